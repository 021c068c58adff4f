//! One origin for every time: a run of three GPUs whose devices start at different times and one
//! of which runs out of memory in its first forward pass (`tests/scripts/forward_oom.py`, which
//! works out what must be said from its own entries). `info` (text, `--oom`, `--json`), a range
//! of the trace and the terminal view say every time from the trace's first event, of any
//! device; the layers of that one forward pass are not iterations, and no device's growth is
//! said of them.

#![allow(clippy::expect_used)]

use std::path::Path;

use serde_json::Value;
use vramscope_e2e::{Tmux, info_json, repo_root, run_python, vramscope};

/// Writes the snapshot into `dir`; its path and the generator's expectations.
fn forward_oom(dir: &Path) -> (std::path::PathBuf, Value) {
    let file = dir.join("forward_oom.pickle");
    let said = run_python(&repo_root().join("tests/scripts/forward_oom.py"), &[file.as_os_str()]);
    (file, serde_json::from_str(said.trim()).expect("the generator's JSON line"))
}

fn us(v: &Value) -> i64 {
    v.as_i64().unwrap_or_else(|| panic!("not a time: {v}"))
}

/// A time after the origin as `info` prints it, to the µs: `1.834 s`, `704.000 ms`.
fn offset(time_us: i64, origin_us: i64) -> String {
    let seconds = (time_us - origin_us) as f64 / 1e6;
    if seconds >= 1.0 { format!("{seconds:.3} s") } else { format!("{:.3} ms", seconds * 1e3) }
}

/// The same as the terminal view says it, shortest: `1.834 s`, `704 ms`.
fn short_offset(time_us: i64, origin_us: i64) -> String {
    let trim = |v: f64| format!("{v:.3}").trim_end_matches('0').trim_end_matches('.').to_owned();
    let seconds = (time_us - origin_us) as f64 / 1e6;
    if seconds >= 1.0 { format!("{} s", trim(seconds)) } else { format!("{} ms", trim(seconds * 1e3)) }
}

#[test]
fn every_face_says_times_from_the_traces_first_event() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (file, expect) = forward_oom(dir.path());
    let origin = us(&expect["origin_us"]);
    let info = info_json(&file);
    assert_eq!(us(&info["time_origin_us"]), origin);
    let output = vramscope(&["info".as_ref(), file.as_os_str()]);
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    for (label, device) in expect["devices"].as_object().expect("devices") {
        let ours = info["devices"]
            .as_array()
            .and_then(|ds| ds.iter().find(|d| d["label"] == label.as_str()))
            .unwrap_or_else(|| panic!("no {label} in {info}"));
        assert_eq!(ours["peak_allocated_bytes"], device["peak_allocated_bytes"], "{label}");
        assert_eq!(ours["peak_allocated_time_us"], device["peak_allocated_time_us"], "{label}");
        // The text: the device's peak at its offset from cuda:0's first entry, not its own.
        let section = text.split(&format!("\n{label} ")).nth(1).expect("the device's section");
        let peak_line = section.lines().find(|l| l.contains("peak allocated")).expect("a peak line");
        let at = format!("at +{}", offset(us(&device["peak_allocated_time_us"]), origin));
        assert!(peak_line.contains(&at), "{label}: {peak_line:?} should say {at:?}");
        // No device's layers are iterations: nothing grows, nothing is kept "every iteration".
        assert!(ours.get("growth").is_none_or(|g| g["grows"] == false), "{label}: {}", ours["growth"]);
    }
    assert!(!text.contains("grows") && !text.contains("every iteration"), "{text}");
    // The OOM: at its offset from the same origin, in the summary and the post-mortem.
    let oom_us = us(&expect["devices"]["cuda:1"]["oom_time_us"]);
    let output = vramscope(&["info".as_ref(), "--oom".as_ref(), file.as_os_str()]);
    let post_mortem = String::from_utf8_lossy(&output.stdout).into_owned();
    let heading = format!("out of memory on cuda:1 at +{}", offset(oom_us, origin));
    assert!(post_mortem.contains(&heading), "{heading:?} not in:\n{post_mortem}");
    let output = vramscope(&["info".as_ref(), "--oom".as_ref(), "--json".as_ref(), file.as_os_str()]);
    let oom: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(us(&oom["ooms"][0]["time_us"]), oom_us);
    // A range says the same instant the same way: its times count from the whole trace's start.
    let from_us = us(&expect["devices"]["cuda:1"]["first_us"]) - origin;
    let range = format!("+{from_us}us..");
    let output = vramscope(&["info".as_ref(), "--range".as_ref(), range.as_ref(), file.as_os_str()]);
    let part = String::from_utf8_lossy(&output.stdout).into_owned();
    let section = part.split("\ncuda:1 ").nth(1).expect("cuda:1 in the range");
    let at = format!("at +{}", offset(us(&expect["devices"]["cuda:1"]["peak_allocated_time_us"]), origin));
    assert!(section.lines().any(|l| l.contains("peak allocated") && l.contains(&at)), "{at:?} not in:\n{part}");
}

/// The terminal view opens on the device that ran out of memory and says its peak at the same
/// offset as `info`, and no growth finding.
#[test]
fn the_terminal_view_says_the_same_times() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (file, expect) = forward_oom(dir.path());
    let origin = us(&expect["origin_us"]);
    let bin = vramscope_e2e::vramscope_bin();
    let tmux = Tmux::start(dir.path(), &format!("{} top {}", bin.display(), file.display()));
    let at = format!("at +{}", short_offset(us(&expect["devices"]["cuda:1"]["peak_allocated_time_us"]), origin));
    let screen = tmux.wait_for("the device that ran out of memory", std::time::Duration::from_secs(30), |s| {
        s.contains("[cuda:1") && s.lines().any(|l| l.starts_with("allocated "))
    });
    let peak = screen.lines().find(|l| l.starts_with("allocated ")).unwrap_or_default();
    assert!(peak.contains(&at), "{at:?} not in {peak:?}:\n{screen}");
    assert!(!screen.contains("grows"), "{screen}");
}
