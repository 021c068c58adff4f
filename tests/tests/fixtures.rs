//! Every fixture in `../shared/fixtures`, read by the built binary, against the independent
//! Python reference (`scripts/reference/snapshot_reference.py`, which follows PyTorch's own
//! `segsum` and MemoryViz's replay rules).

use std::path::Path;

use serde_json::Value;
use vramscope_e2e::{
    SNAPSHOT_REFERENCE_KEYS, all_fixtures, fixtures_dir, info_json, info_json_with, reference, reference_in_range,
    run_python_code, vramscope,
};

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
        // The reference applies the stack-frame rules of DESIGN.md on its own.
        let extra = ["peak_allocated_time_us", "categories_at_peak"];
        for key in SNAPSHOT_REFERENCE_KEYS.into_iter().chain(extra) {
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
    for protocol in 0..=5 {
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
            b['history'] = [{'addr': b['address'], 'real_size': requested, 'frames': frames}, {'addr': b['address'], 'real_size': 1, 'frames': []}]
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
            // The converted file is a plain .vtrace, whatever the source came wrapped in.
            if let Some(object) = json.as_object_mut() {
                object.remove("wrapped_in");
            }
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

/// A hand-made snapshot with every action, two devices, an expandable segment, memory from
/// before the trace window, an OOM, a snapshot marker, an unknown action and every optional
/// field, checked against the reference and against hand-computed numbers.
#[test]
fn a_hand_made_snapshot_with_every_action() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let file = dir.path().join("every_action.pickle");
    run_python_code(
        r#"
import pickle, sys
MB = 1 << 20
fr = [{'name': 'forward', 'filename': 'model.py', 'line': 7}, {'name': '<module>', 'filename': 'train.py', 'line': 1}]
def block(addr, size, state, req=0):
    return {'address': addr, 'size': size, 'requested_size': req, 'state': state, 'frames': fr if state != 'inactive' else []}
def seg(dev, addr, size, blocks, expandable=False):
    return {'device': dev, 'address': addr, 'total_size': size, 'allocated_size': 0, 'active_size': 0,
            'requested_size': 0, 'stream': 0, 'segment_type': 'large', 'segment_pool_id': (0, 0),
            'is_expandable': expandable, 'frames': fr, 'blocks': blocks}
def e(action, addr, size, t, **kw):
    d = {'action': action, 'addr': addr, 'size': size, 'stream': 0, 'time_us': t, 'frames': fr,
         'compile_context': 'N/A', 'user_metadata': 'step=1'}
    d.update(kw)
    return d
S0, S1, S2 = 0x10000000, 0x20000000, 0x7000000000
segments = [
    seg(0, S0, 2 * MB, [block(S0, 1024, 'active_allocated', 1000), block(S0 + 1024, 2048, 'inactive'),
                        block(S0 + 3072, 2 * MB - 3072, 'inactive')]),
    seg(0, S1, 20 * MB, [block(S1, 4 * MB, 'inactive'), block(S1 + 4 * MB, 1024, 'active_allocated', 1000),
                         block(S1 + 4 * MB + 1024, 16 * MB - 1024, 'inactive')]),
    seg(1, S2, 2 * MB, [block(S2, 1024, 'active_allocated', 1000), block(S2 + 1024, 2 * MB - 1024, 'inactive')], True),
]
dev0 = [
    e('segment_alloc', S1, 20 * MB, 100),
    e('alloc', S1, 4000000, 110),
    e('alloc', S1 + 4 * MB, 1000, 120),
    e('snapshot', 0, 0, 130),
    e('free_requested', S1, 4000000, 140),
    e('free_completed', S1, 4000000, 150),
    e('oom', 0, 1 << 40, 160, device_free=123456),
    e('free_requested', S0 + 1024, 2000, 170),
    e('free_completed', S0 + 1024, 2000, 180),
    e('mystery', 0, 0, 185),
    e('segment_free', 0x30000000, 2 * MB, 190),
]
dev1 = [
    e('segment_map', S2, 2 * MB, 105),
    e('alloc', S2, 1000, 115),
    e('segment_map', S2 + 2 * MB, 2 * MB, 125),
    e('segment_unmap', S2 + 2 * MB, 2 * MB, 135),
]
snap = {'segments': segments, 'device_traces': [dev0, dev1],
        'allocator_settings': {'expandable_segments': True, 'max_split_size': -1},
        'external_annotations': [{'stage': 'START', 'name': 'fwd', 'device': 0, 'time_us': 105},
                                 {'stage': 'END', 'name': 'fwd', 'device': 0, 'time_us': 145}]}
pickle.dump(snap, open(sys.argv[1], 'wb'), protocol=4)
"#,
        &[file.as_os_str()],
    );
    check_snapshot(&file, true);
    let ours = info_json(&file);
    let d0 = device(&ours, 0);
    let d1 = device(&ours, 1);
    const MB: u64 = 1 << 20;
    // Hand-computed: before the window, block S0 (1024) and the block freed at 180 (2048 from
    // the trace's 2000 rounded up) were alive, and S0 plus the segment freed at 190 reserved.
    // The peak follows the two allocs: 1024 + 2048 + 4000256 + 1024.
    assert_eq!(d0["peak_allocated_bytes"].as_u64(), Some(1024 + 2048 + 4_000_256 + 1024));
    assert_eq!(d0["peak_reserved_bytes"].as_u64(), Some(2 * MB + 2 * MB + 20 * MB));
    assert_eq!(d0["reserved_bytes"].as_u64(), Some(22 * MB));
    assert_eq!(d0["allocated_bytes"].as_u64(), Some(2048));
    assert_eq!(d0["requested_bytes"].as_u64(), Some(2000));
    assert_eq!(d0["oom_events"].as_u64(), Some(1));
    // The OOM explained (info --oom), against the same hand computation: at 160 the blocks
    // alive are S0's (1024), the one freed at 180 (2048) and S1 + 4 MiB (1024); reserved are
    // S0, S1 and the segment freed at 190; S1's largest free range is its last 16 MiB - 1024.
    let output = vramscope(&["info".as_ref(), "--oom".as_ref(), "--json".as_ref(), file.as_os_str()]);
    let oom: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}"));
    let pm = &oom["ooms"][0];
    assert_eq!(oom["oom_count"], 1);
    assert_eq!(pm["requested_bytes"].as_u64(), Some(1 << 40));
    assert_eq!(pm["device_free_bytes"].as_u64(), Some(123_456));
    assert_eq!(pm["allocated_bytes"].as_u64(), Some(4096));
    assert_eq!(pm["reserved_bytes"].as_u64(), Some(24 * MB));
    assert_eq!(pm["held_free"]["bytes"].as_u64(), Some(24 * MB - 4096));
    assert_eq!(pm["held_free"]["largest_range_bytes"].as_u64(), Some(16 * MB - 1024));
    assert_eq!(pm["fragmentation"], false);
    assert_eq!(pm["stack"][0], "forward  model.py:7");
    assert_eq!(pm["capacity_bytes"].as_u64(), Some(24 * MB + 123_456));
    assert!(pm["fix"].is_null());
    let said = pm["words"].to_string();
    assert!(said.contains("the request alone (1.00 TiB) is more than the 24.1 MiB there was"), "{said}");
    // Device 1: the expandable segment's 2 MiB mapped once and a second mapping undone.
    assert_eq!(d1["peak_reserved_bytes"].as_u64(), Some(4 * MB));
    assert_eq!(d1["reserved_bytes"].as_u64(), Some(2 * MB));
    assert_eq!(d1["peak_allocated_bytes"].as_u64(), Some(1024));
    // The snapshot marker and the external range are annotations.
    assert_eq!(ours["annotations"].as_u64(), Some(2));
    let output = vramscope(&["info".as_ref(), file.as_os_str()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unknown action \"mystery\""), "{stderr}");
}

/// A profiler trace with CPU and CUDA memory, starting with memory already allocated (a second
/// profiler session in the same process), checked against hand-computed numbers.
#[test]
fn a_chrome_trace_with_cuda_memory_and_memory_from_before() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let file = dir.path().join("trace.json");
    let memory = |ts: f64, device_type: i64, device: i64, addr: u64, bytes: i64, total: i64, reserved: i64| {
        serde_json::json!({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1,
            "ts": ts, "args": {"Addr": addr, "Bytes": bytes, "Total Allocated": total, "Total Reserved": reserved,
            "Device Type": device_type, "Device Id": device}})
    };
    const MB: i64 = 1 << 20;
    let events = vec![
        serde_json::json!({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 1, "tid": 1, "ts": 0.5, "dur": 10.0}),
        memory(1.0, 0, -1, 0x1000, 100, 100, 0),
        // 1,024 bytes were allocated on the GPU before this session began.
        memory(2.0, 1, 0, 0x7f00_0000_0000, 512, 1536, 2 * MB),
        // One of them (512 bytes at an address this trace never saw allocated) is freed.
        memory(3.0, 1, 0, 0x7f00_0000_1000, -512, 1024, 2 * MB),
        memory(4.0, 1, 0, 0x7f00_0000_2000, 2048, 3072, 4 * MB),
        memory(5.0, 1, 0, 0x7f00_0000_2000, -2048, 1024, 4 * MB),
        memory(6.0, 0, -1, 0x1000, -100, 0, 0),
    ];
    let json = serde_json::json!({"traceEvents": events, "baseTimeNanoseconds": 1_700_000_000_000_000_000i64});
    std::fs::write(&file, json.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let ours = info_json(&file);
    assert_eq!(ours["format"], "chrome-trace");
    let gpu = device(&ours, 0);
    assert_eq!(gpu["peak_allocated_bytes"].as_u64(), Some(3072));
    assert_eq!(gpu["peak_reserved_bytes"].as_u64(), Some(4 << 20));
    assert_eq!(gpu["allocated_bytes"].as_u64(), Some(1024), "ends at the last Total Allocated");
    assert_eq!(gpu["peak_allocated_time_us"].as_i64(), Some(1_700_000_000_000_000 + 4));
    let cpu = device(&ours, -1);
    assert_eq!(cpu["peak_allocated_bytes"].as_u64(), Some(100));
    assert_eq!(cpu["allocated_bytes"].as_u64(), Some(0));
    assert_eq!(ours["annotations"].as_u64(), Some(1));
    let theirs = reference(&file);
    for r in theirs["devices"].as_array().cloned().unwrap_or_default() {
        let o = device(&ours, r["device"].as_i64().unwrap_or(-99));
        assert_eq!(o["peak_allocated_bytes"], r["peak_allocated_bytes"]);
        assert_eq!(o["peak_reserved_bytes"], r["peak_reserved_bytes"]);
    }
}

/// Objects shared through the memo across thousands of entries (one empty frame list, one
/// frame list) stay readable after the batches that first built them are dropped.
#[test]
fn lists_shared_across_batches_stay_readable() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let file = dir.path().join("shared.pickle");
    run_python_code(
        r#"
import pickle, sys
empty = []
fr = [{'name': 'f', 'filename': 'a.py', 'line': 1}]
trace = []
for i in range(2500):
    trace.append({'action': 'alloc', 'addr': 0x1000 + 512 * i, 'size': 100, 'stream': 0, 'time_us': 2 * i,
                  'frames': empty if i % 2 else fr})
for i in range(2500):
    trace.append({'action': 'free_completed', 'addr': 0x1000 + 512 * i, 'size': 100, 'stream': 0,
                  'time_us': 5000 + i, 'frames': empty})
pickle.dump({'segments': [], 'device_traces': [trace]}, open(sys.argv[1], 'wb'), protocol=4)
"#,
        &[file.as_os_str()],
    );
    check_snapshot(&file, true);
    let ours = info_json(&file);
    assert_eq!(device(&ours, 0)["peak_allocated_bytes"].as_u64(), Some(2500 * 512));
}

/// `info --range` on each real snapshot: over the range, the highest allocated, requested and
/// reserved bytes are the independent replay's over the same part of the whole trace.
#[test]
fn a_range_of_a_snapshot_peaks_where_the_whole_trace_does_there() {
    let snapshots: Vec<_> =
        all_fixtures().into_iter().filter(|p| p.extension().is_some_and(|e| e == "pickle")).collect();
    for file in snapshots {
        let whole = reference(&file);
        let devices = whole["devices"].as_array().cloned().unwrap_or_default();
        // Every fixture has one device with a trace; its span, from its first entry.
        let Some(span_us) = devices.iter().find_map(|d| {
            Some(d["trace_last_time_us"].as_i64()? - d["trace_first_time_us"].as_i64()?).filter(|&s| s > 0)
        }) else {
            continue;
        };
        for (from, to) in
            [(span_us / 4, span_us / 2), (span_us / 3, span_us), (0, span_us / 5), (span_us / 2, span_us / 2)]
        {
            let range = format!("+{from}us..+{to}us");
            let ours = info_json_with(&file, &["--range", &range]);
            let theirs = reference_in_range(&file, from, to);
            let mut compared = 0;
            for r in theirs["devices"].as_array().cloned().unwrap_or_default() {
                let d = r["device"].as_i64().unwrap_or(-99);
                if r["range_peak_requested_bytes"].is_null() {
                    continue;
                }
                let o = device(&ours, d);
                for (key, theirs_key) in [
                    ("peak_allocated_bytes", "range_peak_allocated_bytes"),
                    ("peak_requested_bytes", "range_peak_requested_bytes"),
                    ("peak_reserved_bytes", "range_peak_reserved_bytes"),
                ] {
                    assert_eq!(o[key], r[theirs_key], "{} {range}: device {d} {key}", file.display());
                }
                compared += 1;
            }
            assert!(compared > 0, "{} {range}: no device compared", file.display());
            let notes = ours["notes"].as_array().cloned().unwrap_or_default();
            assert!(
                notes
                    .iter()
                    .any(|n| n.as_str().is_some_and(|n| n.starts_with("Only +") && n.contains("of the file is open"))),
                "{} {range}: the notes say it is a range: {notes:?}",
                file.display()
            );
        }
    }
}

/// One training script (a small GPT, AdamW) recorded at four context lengths, history turned on
/// before the first step at one and after warm-up at the others (`tests/scripts/adamw_window.py`):
/// the model's state from before the window is named by what the window shows (the gradients'
/// sizes held three times over: a parameter and AdamW's two moments each), the same at every
/// length, to the byte of the tensors' sizes.
#[test]
fn model_state_from_before_the_window_is_named_the_same_at_every_length() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let said = vramscope_e2e::run_python(
        &vramscope_e2e::repo_root().join("tests/scripts/adamw_window.py"),
        &[dir.path().as_os_str()],
    );
    let expect: Value = serde_json::from_str(said.trim()).unwrap_or_else(|e| panic!("{e}: {said}"));
    let files = expect["files"].as_array().cloned().unwrap_or_default();
    assert_eq!(files.len(), 4);
    for f in files {
        let file = dir.path().join(f["file"].as_str().unwrap_or_default());
        let at = format!("+{}us", f["update_offset_us"]);
        let ours = info_json_with(&file, &["--at", &at]);
        let categories = &ours["at"]["devices"][0]["categories"];
        for (category, key) in [
            ("parameter", "parameter_bytes"),
            ("gradient", "gradient_bytes"),
            ("optimizer_state", "optimizer_state_bytes"),
        ] {
            assert_eq!(categories[category], expect[key], "{}: {category} in {categories}", file.display());
        }
        assert!(categories.get("unknown").is_none(), "{}: {categories}", file.display());
        // At the peak, as the independent reference names them.
        let theirs = reference(&file);
        assert_eq!(
            ours["devices"][0]["categories_at_peak"],
            theirs["devices"][0]["categories_at_peak"],
            "{}",
            file.display()
        );
    }
}
