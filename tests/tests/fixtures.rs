//! Every fixture in `../shared/fixtures`, read by the built binary, against the independent
//! Python reference (`scripts/reference/snapshot_reference.py`, which follows PyTorch's own
//! `segsum` and MemoryViz's replay rules).

use std::path::Path;

use serde_json::Value;
use vramscope_e2e::{all_fixtures, fixtures_dir, info_json, reference, run_python_code, vramscope};

fn device(json: &Value, device: i64) -> &Value {
    json["devices"]
        .as_array()
        .and_then(|ds| ds.iter().find(|d| d["device"].as_i64() == Some(device)))
        .unwrap_or_else(|| panic!("no device {device} in {json}"))
}

fn check_snapshot(file: &Path, with_time: bool) {
    let ours = info_json(file);
    let theirs = reference(file);
    assert_eq!(ours["format"], "pytorch-snapshot");
    let reference_devices = theirs["devices"].as_array().cloned().unwrap_or_default();
    assert!(!reference_devices.is_empty());
    for r in &reference_devices {
        let d = r["device"].as_i64().unwrap_or(-99);
        let o = device(&ours, d);
        for key in [
            "segments",
            "reserved_bytes",
            "allocated_bytes",
            "requested_bytes",
            "free_internal_bytes",
            "free_external_bytes",
            "peak_allocated_bytes",
            "peak_allocated_time_us",
            "peak_requested_bytes",
            "peak_reserved_bytes",
        ] {
            if key.ends_with("time_us") && !with_time {
                continue;
            }
            assert_eq!(o[key], r[key], "{}: device {d} {key}", file.display());
        }
        // The categories add up to the peak.
        let total: u64 = o["categories_at_peak"].as_object().map_or(0, |m| m.values().filter_map(Value::as_u64).sum());
        assert_eq!(Some(total), o["peak_allocated_bytes"].as_u64(), "{}", file.display());
    }
}

#[test]
fn snapshots_match_segsum_and_an_independent_replay() {
    let snapshots: Vec<_> =
        all_fixtures().into_iter().filter(|p| p.extension().is_some_and(|e| e == "pickle")).collect();
    assert!(snapshots.len() >= 5, "fixtures missing from {}", fixtures_dir().display());
    for file in snapshots {
        check_snapshot(&file, true);
    }
}

#[test]
fn every_pickle_protocol_reads_the_same() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let source = fixtures_dir().join("pytorch-snapshots/gpt_ctx128_fullstep_fp32.pickle");
    let expected = info_json(&source);
    for protocol in 2..=5 {
        let out = dir.path().join(format!("p{protocol}.pickle"));
        run_python_code(
            "import pickle,sys; d=pickle.load(open(sys.argv[1],'rb')); pickle.dump(d, open(sys.argv[2],'wb'), protocol=int(sys.argv[3]))",
            &[source.as_os_str(), out.as_os_str(), protocol.to_string().as_ref()],
        );
        assert_eq!(info_json(&out), expected, "protocol {protocol}");
    }
}

#[test]
fn older_snapshots_with_history_and_no_times_read() {
    // Before PyTorch 2.1 blocks carried `history` instead of `frames`/`requested_size`, and
    // trace entries had no `time_us`.
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let source = fixtures_dir().join("pytorch-snapshots/gpt_ctx128_fullstep_fp32.pickle");
    let old = dir.path().join("old.pickle");
    run_python_code(
        r#"
import pickle, sys
d = pickle.load(open(sys.argv[1], 'rb'))
for seg in d['segments']:
    for b in seg['blocks']:
        frames = b.pop('frames', [])
        requested = b.pop('requested_size')
        if b['state'] != 'inactive':
            b['history'] = [{'addr': b['address'], 'real_size': requested, 'frames': frames}]
for trace in d['device_traces']:
    for e in trace:
        e.pop('time_us', None)
pickle.dump(d, open(sys.argv[2], 'wb'), protocol=2)
"#,
        &[source.as_os_str(), old.as_os_str()],
    );
    check_snapshot(&old, false);
    let ours = info_json(&old);
    let d = device(&ours, 0);
    assert_eq!(d["peak_allocated_time_us"], Value::Null, "no clock, no time");
    let modern = info_json(&source);
    for key in ["reserved_bytes", "allocated_bytes", "requested_bytes", "peak_allocated_bytes"] {
        assert_eq!(d[key], device(&modern, 0)[key], "{key}");
    }
}

#[test]
fn the_chrome_trace_peak_is_the_largest_total_allocated() {
    let file = fixtures_dir().join("torch-profiler/mlp_adam_cpu.chrome_trace.json");
    let ours = info_json(&file);
    let theirs = reference(&file);
    assert_eq!(ours["format"], "chrome-trace");
    let base_us = serde_json::from_slice::<Value>(&std::fs::read(&file).unwrap_or_default())
        .ok()
        .and_then(|v| v["baseTimeNanoseconds"].as_i64())
        .unwrap_or(0)
        / 1000;
    for r in theirs["devices"].as_array().cloned().unwrap_or_default() {
        let d = r["device"].as_i64().unwrap_or(-99);
        let o = device(&ours, d);
        assert_eq!(o["peak_allocated_bytes"], r["peak_allocated_bytes"]);
        assert_eq!(o["peak_reserved_bytes"], r["peak_reserved_bytes"]);
        assert_eq!(o["allocated_bytes"], r["final_allocated_bytes"], "the replay ends at the last Total Allocated");
        let ts = r["peak_allocated_time_us"].as_f64().unwrap_or(0.0);
        let ours_us = o["peak_allocated_time_us"].as_i64().unwrap_or(0) - base_us;
        assert!((ours_us as f64 - ts).abs() <= 1.0, "peak time {ours_us} vs {ts}");
    }
}

#[test]
fn memory_timelines_keep_their_categories() {
    for name in ["mlp_adam_cpu.memory_timeline.json", "mlp_adam_cpu.memory_timeline.raw.json.gz"] {
        let file = fixtures_dir().join("torch-profiler").join(name);
        let ours = info_json(&file);
        let theirs = reference(&file);
        assert_eq!(ours["format"], "memory-timeline");
        let o = &ours["devices"][0];
        assert_eq!(o["peak_allocated_bytes"], theirs["peak_total_bytes"], "{name}");
        let ours_time = o["peak_allocated_time_us"].as_i64().unwrap_or(0);
        let theirs_time = theirs["peak_time_us"].as_i64().unwrap_or(0);
        assert!((ours_time - theirs_time).abs() <= 1, "{name}: {ours_time} vs {theirs_time}");
        let expected: serde_json::Map<String, Value> = theirs["categories_at_peak"]
            .as_object()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|(_, v)| v.as_u64() != Some(0))
            .collect();
        assert_eq!(o["categories_at_peak"], Value::Object(expected), "{name}");
        // The final row: parameters, gradients and Adam state of the MLP, exactly.
        let params = 33_574_912u64;
        assert_eq!(theirs["final_categories"]["parameter"].as_u64(), Some(params));
        assert_eq!(
            o["allocated_bytes"].as_u64(),
            theirs["final_categories"].as_object().map(|m| m.values().filter_map(Value::as_u64).sum())
        );
    }
}

#[test]
fn convert_then_info_prints_the_same_numbers() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    for file in all_fixtures() {
        let Some(name) = file.file_name() else { continue };
        let out = dir.path().join(name).with_extension("vtrace");
        let output = vramscope(&["convert".as_ref(), file.as_os_str(), "-o".as_ref(), out.as_os_str()]);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let mut source = info_json(&file);
        let mut converted = info_json(&out);
        assert_eq!(converted["format"], "vtrace");
        assert_eq!(converted["source_format"], source["format"]);
        for json in [&mut source, &mut converted] {
            json["format"] = Value::Null;
            json["source_format"] = Value::Null;
        }
        assert_eq!(source, converted, "{}", file.display());
        // Snapshots shrink to far less than a third of the pickle.
        if file.extension().is_some_and(|e| e == "pickle") {
            let (a, b) = (
                std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0),
                std::fs::metadata(&out).map(|m| m.len()).unwrap_or(u64::MAX),
            );
            assert!(b * 3 <= a, "{}: {b} bytes from {a}", file.display());
        }
    }
}
