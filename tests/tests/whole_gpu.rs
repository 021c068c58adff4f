//! The whole GPU: several real processes on one device of the fake CUDA driver, which keeps
//! their memory in one account, and the fake NVML beside it, which reports every process's memory
//! as the real one does. Two recorded PyTorch processes (a trainer and a rollout engine taking
//! the device in turns, their device memory taken around PyTorch as an inference engine's own
//! allocator takes it) and a plain CUDA program that is not recorded; then a recorded program
//! that runs out of memory because the other one holds most of the device.
#![allow(clippy::expect_used)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The fake device's capacity, and each process's CUDA context on it.
const TOTAL: u64 = 200_000_000;
const CONTEXT: u64 = 3_000_000;
const MIB: u64 = 1 << 20;

/// The environment every process on the shared fake device runs in.
fn on_the_device(command: &mut Command, state: &Path) {
    command
        .env("VRAMSCOPE_FAKE_GPU_DIR", state)
        .env("VRAMSCOPE_FAKE_TOTAL_BYTES", TOTAL.to_string())
        .env("VRAMSCOPE_FAKE_CONTEXT_BYTES", CONTEXT.to_string())
        .env("LD_LIBRARY_PATH", vramscope_fake_cuda::lib_dir());
}

/// A plain CUDA program, not recorded, holding `bytes` on device 0 until [`release`].
fn holder(dir: &Path, state: &Path, bytes: u64) -> Child {
    let mut command = Command::new(vramscope_fake_cuda::client("client"));
    command.arg("hold").arg(dir).arg(bytes.to_string()).stdout(Stdio::null());
    on_the_device(&mut command, state);
    let child = command.spawn().expect("the client runs");
    let ready = dir.join("hold.ready");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready.exists() {
        assert!(Instant::now() < deadline, "the client never took its memory");
        std::thread::sleep(Duration::from_millis(10));
    }
    child
}

fn release(dir: &Path, mut child: Child) {
    std::fs::write(dir.join("hold.go"), b"").expect("write");
    assert!(child.wait().expect("the client ends").success());
    let _ = std::fs::remove_file(dir.join("hold.ready"));
    let _ = std::fs::remove_file(dir.join("hold.go"));
}

/// Records `shared_gpu.py ARGS` on the shared device (PyTorch on the host); returns the trace and
/// whether the program succeeded.
fn record(dir: &Path, state: &Path, name: &str, args: &[&OsStr]) -> (PathBuf, bool) {
    let trace = dir.join(format!("{name}.vtrace"));
    let mut command = vramscope_e2e::vramscope_command();
    command.args(["record", "--torch", "cpu", "--sample-devices", "20ms", "-o"]).arg(&trace).arg("--");
    command.arg(vramscope_e2e::torch_python()).arg(vramscope_e2e::repo_root().join("tests/workloads/shared_gpu.py"));
    command.args(args);
    on_the_device(&mut command, state);
    let output = command.output().expect("vramscope record runs");
    assert!(trace.exists(), "{name}: no trace: {}", String::from_utf8_lossy(&output.stderr));
    (trace, output.status.success())
}

fn json(args: &[&OsStr]) -> serde_json::Value {
    let output = vramscope_e2e::vramscope(args);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("JSON")
}

/// Three processes on one device, two recorded and one not: `info` lists each with what the
/// driver accounted to it at the device's high point (the recorded ones split into PyTorch's,
/// their own allocations around it, and their context), the device's total against its capacity,
/// and the trainer and the rollout engine taking the device in turns, each with its most.
#[test]
fn info_shows_every_process_on_the_device_and_their_turns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("device");
    std::fs::create_dir(&state).expect("mkdir");
    let other = holder(dir.path(), &state, 40_000_000);
    let handover = dir.path().join("turns");
    let (trace, ok) = record(dir.path(), &state, "turns", &[OsStr::new("turns"), handover.as_os_str()]);
    release(dir.path(), other);
    assert!(ok, "the workload failed");
    let info = json(&[OsStr::new("info"), OsStr::new("--json"), trace.as_os_str()]);
    let wholes = info["whole_devices"].as_array().expect("whole_devices");
    assert_eq!(wholes.len(), 1, "{info}");
    let whole = &wholes[0];
    assert_eq!(whole["label"], "cuda:0");
    assert_eq!(whole["capacity_bytes"], TOTAL);
    let processes = whole["processes"].as_array().expect("processes");
    assert_eq!(processes.len(), 3, "{whole}");
    let by_name = |word: &str| processes.iter().find(|p| p["name"].as_str().unwrap_or("").contains(word)).expect(word);
    let (trainer, rollout, client) = (by_name("trainer"), by_name("rollout"), by_name("client"));
    assert_eq!((&trainer["recorded"], &rollout["recorded"]), (&true.into(), &true.into()));
    assert_eq!(client["recorded"], false);
    assert!(client["parts"].is_null());
    // Exactly what each took: the client 40 MB and its context; the trainer 64 MiB and its
    // context at its most, the rollout engine 48 MiB and its context.
    assert_eq!(client["peak_bytes"], 40_000_000 + CONTEXT);
    assert_eq!(trainer["peak_bytes"], 64 * MIB + CONTEXT);
    assert_eq!(rollout["peak_bytes"], 48 * MIB + CONTEXT);
    // The device at its highest is everyone together, within its capacity.
    let at_high: u64 = processes.iter().map(|p| p["at_high_bytes"].as_u64().unwrap_or(0)).sum();
    assert_eq!(whole["high_bytes"].as_u64(), Some(at_high), "{whole}");
    assert!(at_high <= TOTAL);
    // The one awake at the high point: its device memory is its own allocations around PyTorch
    // and its context, nothing of PyTorch's (its tensors are on the host).
    let awake = &processes[0];
    let parts = &awake["parts"];
    assert_eq!(parts["pytorch_reserved_bytes"], 0, "{awake}");
    assert_eq!(parts["not_allocations_bytes"], CONTEXT, "{awake}");
    assert_eq!(
        parts["outside_allocations_bytes"].as_u64().unwrap_or(0) + CONTEXT,
        awake["at_high_bytes"].as_u64().unwrap_or(0)
    );
    // Two rounds: trainer, rollout, trainer, rollout.
    let turns: Vec<String> = whole["turns"]
        .as_array()
        .expect("turns")
        .iter()
        .map(|t| t["name"].as_str().unwrap_or("").split(' ').nth(1).unwrap_or("").to_owned())
        .collect();
    assert_eq!(turns, ["trainer", "rollout", "trainer", "rollout"], "{whole}");
    for turn in whole["turns"].as_array().expect("turns") {
        let most = turn["peak_bytes"].as_u64().unwrap_or(0);
        assert!(most == 64 * MIB + CONTEXT || most == 48 * MIB + CONTEXT, "{turn}");
        assert!(turn["to_us"].as_i64() > turn["from_us"].as_i64(), "{turn}");
    }
    // The text says the same.
    let output = vramscope_e2e::vramscope(&[OsStr::new("info"), trace.as_os_str()]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("cuda:0 whole — 3 processes on it"), "{text}");
    assert!(text.contains("not recorded"), "{text}");
    assert!(text.contains("in turns: shared_gpu.py trainer"), "{text}");
    // The app's Whole GPU view, under Xvfb: the processes stacked (the one not recorded grey,
    // the two recorded in colours of their own), the table and the turns.
    let png = dir.path().join("device.png");
    // A display of its own (tests run in parallel processes; `-a` alone races).
    let display = (260 + std::process::id() % 1000 * 8).to_string();
    let output = Command::new("xvfb-run")
        .args(["-a", "-n", &display, "-s", "-screen 0 1600x1000x24"])
        .arg(vramscope_e2e::vramscope_bin())
        .arg("open")
        .arg(&trace)
        .args(["--view", "device", "--size", "1200x800", "--screenshot"])
        .arg(&png)
        .output()
        .expect("xvfb-run runs (scripts/install-gui-deps.sh)");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let image = image::open(&png).expect("a PNG").to_rgba8();
    let near =
        |rgb: [u8; 3]| image.pixels().filter(|p| p.0[..3].iter().zip(rgb).all(|(a, b)| a.abs_diff(b) <= 6)).count();
    let (grey, first, second) = (near([140, 140, 140]), near([0x4c, 0x72, 0xb0]), near([0x2a, 0x9d, 0x8f]));
    assert!(grey > 5000 && first > 2000 && second > 2000, "grey {grey} px, recorded {first} and {second} px");
}

/// A recorded program runs out of memory because a process that is not recorded holds most of
/// the device: the post-mortem names it with what it held, and what would have fitted is
/// measured against what was left to the program, not the device's capacity.
#[test]
fn the_post_mortem_names_who_held_the_device() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("device");
    std::fs::create_dir(&state).expect("mkdir");
    let other = holder(dir.path(), &state, 150_000_000);
    let (trace, ok) = record(dir.path(), &state, "greedy", &[OsStr::new("greedy"), OsStr::new("60000000")]);
    release(dir.path(), other);
    assert!(!ok, "the program should have run out of memory");
    let oom = json(&[OsStr::new("info"), OsStr::new("--oom"), OsStr::new("--json"), trace.as_os_str()]);
    let first = &oom["ooms"][0];
    assert_eq!(first["requested_bytes"], 60_000_000, "{first}");
    let holders = first["holders"].as_array().expect("holders");
    let client = holders.iter().find(|h| h["this_process"] == false).expect("the other process");
    assert_eq!(client["recorded"], false);
    assert_eq!(client["bytes"], 150_000_000 + CONTEXT);
    assert!(client["name"].as_str().unwrap_or("").starts_with("client (pid "), "{client}");
    let this = holders.iter().find(|h| h["this_process"] == true).expect("the failing process");
    assert!(this["bytes"].as_u64().unwrap_or(0) >= 8 * MIB, "{this}");
    // What the program could have had: the device less what the other held.
    assert_eq!(first["capacity_bytes"], TOTAL - 150_000_000 - CONTEXT);
    let words: Vec<&str> = first["words"].as_array().expect("words").iter().filter_map(|w| w.as_str()).collect();
    let said = words.join("\n");
    assert!(said.contains("by client (pid "), "{said}");
    assert!(said.contains("not recorded"), "{said}");
    // The advisor measures what fits against what the other process left too.
    let advice = json(&[OsStr::new("advise"), OsStr::new("--json"), trace.as_os_str()]);
    assert_eq!(advice["held_by_others_bytes"], 150_000_000 + CONTEXT, "{advice}");
    assert_eq!(advice["target_bytes"], TOTAL - 150_000_000 - CONTEXT);
}
