//! `vramscope record` on the fake CUDA driver: the client program reaches the driver by direct
//! linking, through `cuGetProcAddress(_v2)`, through `dlopen` + `dlsym(handle, ...)` and through
//! the resolver found that way; the trace holds exactly
//! the calls the client reports making (addresses, sizes, order), the OOM with its size, and the
//! workload's exit status passes through.

#![allow(clippy::expect_used)]

use std::path::Path;

use vramscope_e2e::{vramscope_bin, vramscope_command};
use vramscope_trace_format::{DeviceId, EventKind, NoProgress, Trace};

/// What the client printed: ("alloc", address, size), ("free", address, 0), ("oom", 0, size).
fn client_calls(stdout: &str) -> Vec<(String, u64, u64)> {
    stdout
        .lines()
        .map(|line| {
            let parts: Vec<&str> = line.split_whitespace().collect();
            let n = |i: usize| parts.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or_else(|| panic!("{line}"));
            match parts.first().copied() {
                Some("alloc") => ("alloc".to_owned(), n(1), n(2)),
                Some("free") => ("free".to_owned(), n(1), 0),
                Some("oom") => ("oom".to_owned(), 0, n(1)),
                Some("host_alloc") => ("host_alloc".to_owned(), n(1), n(2)),
                Some("host_free") => ("host_free".to_owned(), n(1), 0),
                _ => panic!("unexpected client output: {line}"),
            }
        })
        .collect()
}

fn read_trace(path: &Path) -> Trace {
    let data = std::fs::read(path).expect("trace written");
    vramscope_trace_format::import(&data, &NoProgress).expect("trace reads").trace
}

fn record(mode: &str, out: &Path) -> (std::process::Output, Trace) {
    record_client("client", mode, out)
}

fn record_client(client: &str, mode: &str, out: &Path) -> (std::process::Output, Trace) {
    let output = vramscope_command()
        .args(["record", "-o"])
        .arg(out)
        .arg("--")
        .arg(vramscope_fake_cuda::client(client))
        .arg(mode)
        .output()
        .expect("vramscope record runs");
    let trace = read_trace(out);
    (output, trace)
}

#[test]
fn every_way_of_reaching_the_driver_is_recorded_exactly() {
    let dir = tempfile::tempdir().expect("tempdir");
    for mode in ["direct", "proc", "proc_v2", "dlsym", "dlsym_proc"] {
        let out = dir.path().join(format!("{mode}.vtrace"));
        let (output, trace) = record(mode, &out);
        assert!(output.status.success(), "{mode}: {}", String::from_utf8_lossy(&output.stderr));
        let calls = client_calls(&String::from_utf8_lossy(&output.stdout));
        assert_eq!(calls.len(), 9, "{mode}: the client's own output passes through");
        // Each alloc: a segment and a block of its size; each free: both released, in order.
        let mut expected = Vec::new();
        let mut sizes = std::collections::HashMap::new();
        for (what, address, size) in &calls {
            match what.as_str() {
                "alloc" => {
                    sizes.insert(*address, *size);
                    expected.push((EventKind::SegmentAlloc, *address, *size));
                    expected.push((EventKind::Alloc, *address, *size));
                }
                "free" => {
                    let size = sizes[address];
                    expected.push((EventKind::FreeCompleted, *address, size));
                    expected.push((EventKind::SegmentFree, *address, size));
                }
                _ => {}
            }
        }
        let got: Vec<(EventKind, u64, u64)> = trace.events.iter().map(|e| (e.kind, e.address, e.size_bytes)).collect();
        assert_eq!(got, expected, "{mode}");
        assert_eq!(trace.ooms.iter().map(|o| o.requested_bytes).collect::<Vec<_>>(), vec![2u64 << 30], "{mode}");
        assert!(trace.events.windows(2).all(|w| w[0].time_ns <= w[1].time_ns), "{mode}: time order");
        let stderr = String::from_utf8_lossy(&output.stderr);
        // 8 calls and the failed one.
        assert!(stderr.contains("9 driver events from 1 process"), "{mode}: {stderr}");
    }
}

#[test]
fn exit_status_passes_through_and_outputs_are_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("t.vtrace");
    let status =
        vramscope_command().args(["record", "-o"]).arg(&out).args(["--", "sh", "-c", "exit 7"]).status().expect("runs");
    assert_eq!(status.code(), Some(7));
    let before = std::fs::read(&out).expect("written even when nothing was recorded");
    // An existing trace is kept unless --force, and the workload is not even started.
    let marker = dir.path().join("ran");
    let output =
        vramscope_command().args(["record", "-o"]).arg(&out).args(["--", "touch"]).arg(&marker).output().expect("runs");
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--force"));
    assert!(!marker.exists(), "the workload must not run when the output would be refused");
    assert_eq!(std::fs::read(&out).expect("kept"), before);
}

/// The binary alone, copied where nothing is beside it (as `cargo install` or a pip wheel puts
/// it), records: it carries the hook library, and no copy is left behind.
#[test]
fn the_binary_alone_records_with_the_hook_it_carries() {
    let dir = tempfile::tempdir().expect("tempdir");
    let alone = dir.path().join("bin");
    std::fs::create_dir(&alone).expect("bin");
    let binary = alone.join("vramscope");
    std::fs::copy(vramscope_bin(), &binary).expect("copied");
    let scratch = dir.path().join("tmp");
    std::fs::create_dir(&scratch).expect("tmp");
    let out = dir.path().join("t.vtrace");
    let output = std::process::Command::new(&binary)
        .args(["record", "-o"])
        .arg(&out)
        .arg("--")
        .arg(vramscope_fake_cuda::client("client"))
        .arg("direct")
        .env_remove("VRAMSCOPE_HOOK")
        .env("TMPDIR", &scratch)
        .output()
        .expect("vramscope record runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let calls = client_calls(&String::from_utf8_lossy(&output.stdout));
    let trace = read_trace(&out);
    let (expected, recorded) = same_calls(&calls, &trace);
    assert!(!expected.is_empty());
    assert_eq!(recorded, expected);
    assert_eq!(std::fs::read_dir(&alone).expect("bin").count(), 1, "nothing was written beside the binary");
    assert_eq!(std::fs::read_dir(&scratch).expect("tmp").count(), 0, "the recording's folder is removed");
    // A VRAMSCOPE_HOOK that names nothing is said as such, and the workload is not run.
    let output = std::process::Command::new(&binary)
        .args(["record", "-o"])
        .arg(dir.path().join("u.vtrace"))
        .args(["--", "touch"])
        .arg(dir.path().join("ran"))
        .env("VRAMSCOPE_HOOK", dir.path().join("missing.so"))
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("VRAMSCOPE_HOOK names") && stderr.contains("missing.so"), "{stderr}");
    assert!(!dir.path().join("ran").exists(), "the workload must not run without its hook");
}

/// A call as (kind, address, size).
type Call = (String, u64, u64);

/// The client's calls and the trace's block events as sorted multisets.
fn same_calls(calls: &[Call], trace: &Trace) -> (Vec<Call>, Vec<Call>) {
    let mut sizes = std::collections::HashMap::new();
    let mut expected: Vec<Call> = Vec::new();
    for (what, address, size) in calls {
        match what.as_str() {
            "alloc" => {
                sizes.insert(*address, *size);
                expected.push(("alloc".to_owned(), *address, *size));
            }
            "free" => expected.push(("free".to_owned(), *address, sizes.get(address).copied().unwrap_or(0))),
            _ => {}
        }
    }
    let mut got: Vec<Call> = trace
        .events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Alloc => Some(("alloc".to_owned(), e.address, e.size_bytes)),
            EventKind::FreeCompleted => Some(("free".to_owned(), e.address, e.size_bytes)),
            _ => None,
        })
        .collect();
    expected.sort();
    got.sort();
    (expected, got)
}

#[test]
fn threads_forks_subprocesses_exit_and_sigkill_lose_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (mode, exit_code, processes) in
        [("threads", 0, 1), ("fork", 0, 2), ("subprocess", 0, 2), ("exit", 0, 1), ("kill", 137, 1)]
    {
        let out = dir.path().join(format!("{mode}.vtrace"));
        let (output, trace) = record(mode, &out);
        assert_eq!(output.status.code(), Some(exit_code), "{mode}: {}", String::from_utf8_lossy(&output.stderr));
        let calls = client_calls(&String::from_utf8_lossy(&output.stdout));
        let (expected, got) = same_calls(&calls, &trace);
        assert!(!expected.is_empty(), "{mode}: the client made calls");
        assert_eq!(got, expected, "{mode}");
        assert_eq!(trace.metadata.processes.len(), processes, "{mode}");
        if mode == "threads" {
            assert_eq!(calls.len(), 8 * 2 * 200, "8 threads, 200 allocs and 200 frees each");
        }
    }
}

#[test]
fn the_recorder_outlives_ctrl_c_and_passes_sigterm_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Ctrl+C reaches the whole process group; the recorder ignores it and still writes the trace.
    let out = dir.path().join("int.vtrace");
    let output = vramscope_command()
        .args(["record", "-o"])
        .arg(&out)
        .args(["--", "sh", "-c", "kill -INT $PPID; sleep 0.2; echo alive"])
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "alive");
    assert!(out.exists());
    // SIGTERM to the recorder goes to the workload, whose own handling decides the exit status.
    let out = dir.path().join("term.vtrace");
    let output = vramscope_command()
        .args(["record", "-o"])
        .arg(&out)
        .args(["--", "sh", "-c", "trap 'exit 42' TERM; kill -TERM $PPID; sleep 5 >/dev/null 2>&1 & wait"])
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(42), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(out.exists());
    // The workload itself still dies of Ctrl+C: it does not inherit the recorder's handling.
    let out = dir.path().join("own.vtrace");
    let output = vramscope_command()
        .args(["record", "-o"])
        .arg(&out)
        .args(["--", "sh", "-c", "kill -INT $$; echo survived"])
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(128 + 2));
    assert!(!String::from_utf8_lossy(&output.stdout).contains("survived"));
}

#[test]
fn stream_ordered_pitched_managed_and_pinned_host_memory_are_recorded() {
    let dir = tempfile::tempdir().expect("tempdir");
    for mode in ["others_proc", "others_dlsym"] {
        let out = dir.path().join(format!("{mode}.vtrace"));
        let (output, trace) = record(mode, &out);
        assert!(output.status.success(), "{mode}: {}", String::from_utf8_lossy(&output.stderr));
        let calls = client_calls(&String::from_utf8_lossy(&output.stdout));
        let device: Vec<Call> = calls.iter().filter(|c| c.0 == "alloc" || c.0 == "free").cloned().collect();
        let (expected, got) = same_calls(
            &device,
            &Trace {
                events: trace.events.iter().filter(|e| e.device == DeviceId(0)).copied().collect(),
                ..Trace::default()
            },
        );
        assert_eq!(got, expected, "{mode}: device memory");
        assert_eq!(expected.len(), 8, "{mode}");
        // Pinned host memory is on device -1.
        let host: Vec<Call> = calls
            .iter()
            .filter(|c| c.0.starts_with("host_"))
            .map(|c| (c.0.trim_start_matches("host_").to_owned(), c.1, c.2))
            .collect();
        let (expected, got) = same_calls(
            &host,
            &Trace {
                events: trace.events.iter().filter(|e| e.device == DeviceId::HOST).copied().collect(),
                ..Trace::default()
            },
        );
        assert_eq!(got, expected, "{mode}: host memory");
        assert_eq!(expected.len(), 4, "{mode}");
        // Stream-ordered calls keep their stream.
        let streams: Vec<u64> = trace
            .events
            .iter()
            .filter(|e| e.device == DeviceId(0) && !e.stream.is_default())
            .map(|e| e.stream.raw())
            .collect();
        assert!(streams.iter().all(|&s| s == 0x51) && streams.len() >= 2 * 2, "{mode}: {streams:?}");
    }
}

#[test]
fn mapped_memory_counts_and_a_context_reset_frees_what_was_held() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("vmm.vtrace");
    let (output, trace) = record("vmm", &out);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut expected = Vec::new();
    let mut held: Vec<(u64, u64, bool)> = Vec::new();
    for line in stdout.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let n = |i: usize| parts.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or_default();
        match parts.first().copied() {
            Some("map") => {
                expected.extend([(EventKind::SegmentMap, n(1), n(2)), (EventKind::Alloc, n(1), n(2))]);
                held.push((n(1), n(2), true));
            }
            Some("unmap") => {
                expected.extend([(EventKind::FreeCompleted, n(1), n(2)), (EventKind::SegmentUnmap, n(1), n(2))]);
                held.retain(|h| h.0 != n(1));
            }
            Some("alloc") => {
                expected.extend([(EventKind::SegmentAlloc, n(1), n(2)), (EventKind::Alloc, n(1), n(2))]);
                held.push((n(1), n(2), false));
            }
            Some("reset") => {
                held.sort_unstable();
                for (address, size, mapped) in held.drain(..) {
                    let release = if mapped { EventKind::SegmentUnmap } else { EventKind::SegmentFree };
                    expected.extend([(EventKind::FreeCompleted, address, size), (release, address, size)]);
                }
            }
            _ => panic!("unexpected client output: {line}"),
        }
    }
    let got: Vec<(EventKind, u64, u64)> = trace.events.iter().map(|e| (e.kind, e.address, e.size_bytes)).collect();
    assert_eq!(got, expected);
    // Creating handles and reserving addresses alone add nothing: 3 pages mapped at the peak.
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("peak reserved 6.00 MiB"), "{stderr}");
}

#[test]
fn a_stream_ordered_pool_is_reserved_memory_until_it_gives_it_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    for mode in ["pool", "pool_proc"] {
        let out = dir.path().join(format!("{mode}.vtrace"));
        let (output, trace) = record(mode, &out);
        assert!(output.status.success(), "{mode}: {}", String::from_utf8_lossy(&output.stderr));
        let stdout = String::from_utf8_lossy(&output.stdout);
        // What the driver said the pool reserves after each step, changes only.
        let mut said: Vec<u64> = Vec::new();
        for line in stdout.lines().filter_map(|l| l.strip_prefix("reserved ")) {
            let bytes: u64 = line.parse().expect("a number");
            if said.last() != Some(&bytes) {
                said.push(bytes);
            }
        }
        const MIB: u64 = 1 << 20;
        assert_eq!(said, [4 * MIB, 2 * MIB, 6 * MIB, 2 * MIB, 0], "{mode}: the fake pool's own account");
        // The trace's reserved memory walks through the same values (taken after all the
        // events of one instant).
        let mut reserved = 0i64;
        let mut walked: Vec<(i64, u64)> = Vec::new();
        for e in trace.events.iter().filter(|e| e.device == DeviceId(0)) {
            match e.kind {
                EventKind::SegmentAlloc | EventKind::SegmentMap => reserved += e.size_bytes as i64,
                EventKind::SegmentFree | EventKind::SegmentUnmap => reserved -= e.size_bytes as i64,
                _ => continue,
            }
            if walked.last().is_some_and(|w| w.0 == e.time_ns) {
                walked.pop();
            }
            walked.push((e.time_ns, reserved as u64));
        }
        let walked: Vec<u64> = walked.into_iter().map(|w| w.1).collect();
        assert_eq!(walked, said, "{mode}: reserved memory in the trace");
        // The blocks are the calls the client made, with no segments of their own.
        let calls: Vec<Call> =
            stdout.lines().filter(|l| !l.starts_with("reserved ")).map(|l| client_calls(l).remove(0)).collect();
        let (expected, got) = same_calls(&calls, &trace);
        assert_eq!(expected.len(), 6, "{mode}");
        assert_eq!(got, expected, "{mode}");
        assert!(!trace.events.iter().any(|e| e.kind == EventKind::SegmentAlloc), "{mode}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("peak reserved 6.00 MiB"), "{mode}: {stderr}");
    }
}

#[test]
fn the_runtimes_stream_ordered_pool_is_followed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("async.vtrace");
    let (output, trace) = record_client("runtime_client", "async", &out);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let calls = client_calls(&String::from_utf8_lossy(&output.stdout));
    let (expected, got) = same_calls(&calls, &trace);
    assert_eq!(expected.len(), 4);
    assert_eq!(got, expected);
    // Reserved after each instant: 4 MiB for 3 + 1 MiB, 2 MiB once the stream synchronised after
    // the first free, 0 once the device synchronised after the second (release threshold 0).
    let mut reserved = 0i64;
    let mut walked: Vec<(i64, i64)> = Vec::new();
    for e in &trace.events {
        match e.kind {
            EventKind::SegmentMap => reserved += e.size_bytes as i64,
            EventKind::SegmentUnmap => reserved -= e.size_bytes as i64,
            EventKind::SegmentAlloc | EventKind::SegmentFree => panic!("pool blocks have no segments: {e:?}"),
            _ => continue,
        }
        if walked.last().is_some_and(|w| w.0 == e.time_ns) {
            walked.pop();
        }
        walked.push((e.time_ns, reserved));
    }
    let walked: Vec<i64> = walked.into_iter().map(|w| w.1).collect();
    assert_eq!(walked, [4 << 20, 2 << 20, 0]);
}

#[test]
fn the_runtime_and_its_driver_entry_points_are_recorded() {
    let dir = tempfile::tempdir().expect("tempdir");
    // cudaMalloc reaches the driver through a private table of a driver opened with RTLD_LOCAL,
    // as the real runtime does, so the runtime's own function is what is recorded; the other
    // two hand driver functions to the program.
    for mode in ["malloc", "entry", "entry_version"] {
        let out = dir.path().join(format!("{mode}.vtrace"));
        let (output, trace) = record_client("runtime_client", mode, &out);
        assert!(output.status.success(), "{mode}: {}", String::from_utf8_lossy(&output.stderr));
        let calls = client_calls(&String::from_utf8_lossy(&output.stdout));
        let (expected, got) = same_calls(&calls, &trace);
        assert_eq!(expected.len(), 4, "{mode}");
        assert_eq!(got, expected, "{mode}");
    }
}

#[test]
fn each_call_is_on_its_current_contexts_device() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("devices.vtrace");
    let (output, trace) = record("devices", &out);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let allocs: Vec<(u64, i16)> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| {
            let p: Vec<&str> = l.split_whitespace().collect();
            (p.first() == Some(&"alloc")).then(|| (p[1].parse().expect("address"), p[3].parse().expect("device")))
        })
        .collect();
    assert_eq!(allocs.len(), 2);
    for (address, device) in allocs {
        let e = trace.events.iter().find(|e| e.kind == EventKind::Alloc && e.address == address).expect("recorded");
        assert_eq!(e.device, DeviceId(device), "{address:#x}");
    }
    let free = trace.events.iter().find(|e| e.kind == EventKind::FreeCompleted).expect("free recorded");
    assert_eq!(free.device, DeviceId(1));
    assert_eq!(trace.metadata.devices.iter().map(|d| d.device).collect::<Vec<_>>(), vec![DeviceId(0), DeviceId(1)]);
}

#[test]
fn device_facts_come_from_the_driver_when_there_is_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    // With the fake driver on the library path, the recorder finds it through cudarc.
    let out = dir.path().join("facts.vtrace");
    let output = vramscope_command()
        .env("LD_LIBRARY_PATH", vramscope_fake_cuda::lib_dir())
        .args(["record", "-o"])
        .arg(&out)
        .arg("--")
        .arg(vramscope_fake_cuda::client("client"))
        .arg("direct")
        .output()
        .expect("runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let trace = read_trace(&out);
    let device = trace.metadata.devices.iter().find(|d| d.device == DeviceId(0)).expect("device 0");
    assert_eq!(device.name.as_deref(), Some("vramscope fake GPU"));
    assert_eq!(device.total_memory_bytes, Some(1 << 30));
    assert_eq!(trace.metadata.extra.get("cuda_driver_version").and_then(|v| v.as_i64()), Some(12040));
    // Without a driver library, nothing is claimed (and nothing panics).
    let out = dir.path().join("none.vtrace");
    let (output, trace) = record("direct", &out);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(trace.metadata.devices.iter().all(|d| d.name.is_none()));
}

#[test]
fn the_cudarc_sample_records_its_expected_peak() {
    // samples/cudarc-train, built beside vramscope, against the fake driver.
    let sample = vramscope_bin().with_file_name("cudarc-train");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("cudarc.vtrace");
    let output = vramscope_command()
        .env("LD_LIBRARY_PATH", vramscope_fake_cuda::lib_dir())
        .args(["record", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&sample)
        .args(["3", "4", "4"])
        .output()
        .expect("runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let expected: u64 = String::from_utf8_lossy(&output.stdout)
        .trim()
        .strip_prefix("expected peak ")
        .and_then(|s| s.strip_suffix(" bytes"))
        .and_then(|s| s.parse().ok())
        .expect("the sample prints its expected peak");
    // 4 parameters + 8 optimizer-state blocks + 4 activations + 1 gradient, 4 MiB each.
    assert_eq!(expected, 17 * (4 << 20));
    let info = vramscope_e2e::info_json(&out);
    let device = &info["devices"][0];
    assert_eq!(device["peak_allocated_bytes"].as_u64(), Some(expected));
    assert_eq!(device["peak_reserved_bytes"].as_u64(), Some(expected));
    // Everything was freed by the end.
    assert_eq!(device["allocated_bytes"].as_u64(), Some(0));
    assert_eq!(device["reserved_bytes"].as_u64(), Some(0));
    // 4 + 3 * (4 + 4) + 8 allocations and as many frees, each a segment and a block event.
    assert_eq!(info["allocator_events"].as_u64(), Some(2 * 2 * (4 + 3 * 8 + 8)));
}

/// `info --oom` on a recorded OOM (the fake driver refuses 2 GiB): the request, what was alive
/// (nothing: the client freed everything first), and that the device's memory is not known.
#[test]
fn a_recorded_oom_is_explained() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("oom.vtrace");
    let (output, _) = record("direct", &out);
    assert!(output.status.success());
    let explained = vramscope_command().args(["info", "--oom"]).arg(&out).output().expect("runs");
    let text = String::from_utf8_lossy(&explained.stdout);
    assert!(explained.status.success(), "{}", String::from_utf8_lossy(&explained.stderr));
    for expected in [
        "out of memory on cuda:0 at +",
        "tried to allocate 2.00 GiB",
        "the allocator held nothing free",
        "alive: 0 B allocated, 0 B reserved: nothing",
        "what would have fitted cannot be said",
    ] {
        assert!(text.contains(expected), "{expected:?} missing from:\n{text}");
    }
    // A trace without one says so.
    let (_, trace) = record("threads", &dir.path().join("ok.vtrace"));
    assert!(trace.ooms.is_empty());
    let none = vramscope_command().args(["info", "--oom"]).arg(dir.path().join("ok.vtrace")).output().expect("runs");
    assert!(String::from_utf8_lossy(&none.stdout).contains("no out-of-memory error"));
}
