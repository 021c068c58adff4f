//! Phase by phase: the phases of every real fixture and their high points (`info --json`) equal
//! the independent reference's (`scripts/reference/snapshot_reference.py`, which tells the
//! phases by the same definitions, written again in Python); `diff` pairs them by kind and
//! iteration with the reference's numbers on both sides; a longer context in a real PyTorch run
//! on the CPU, whose two lengths both peak in the optimizer step, is told by the phase that grew
//! (`tests/workloads/phases.py`); and the phase gates decide the exit status.

#![allow(clippy::expect_used)]

use std::path::{Path, PathBuf};

use serde_json::Value;
use vramscope_e2e::{fixtures_dir, info_json, info_json_with, reference, repo_root, torch_python, vramscope};

/// One phase as both sides give it: iteration, kind (null for the whole iteration), high
/// point, its time in whole µs (snapshots: profiler traces are put on the Unix clock when read,
/// the reference keeps the file's), and bytes by category (snapshots).
type Row = (u64, Option<String>, u64, i64, Option<Value>);

fn row(v: &Value, snapshot: bool) -> Row {
    let with_categories = snapshot;
    let kind = v.get("kind").or_else(|| v.get("phase")).and_then(Value::as_str).map(str::to_owned);
    let time = if snapshot { v["high_time_us"].as_f64().expect("high_time_us").floor() as i64 } else { 0 };
    let categories = with_categories.then(|| v["categories"].clone());
    (v["iteration"].as_u64().expect("iteration"), kind, v["high_bytes"].as_u64().expect("high_bytes"), time, categories)
}

fn sorted(mut rows: Vec<Row>) -> Vec<Row> {
    rows.sort_by(|x, y| (x.0, &x.1).cmp(&(y.0, &y.1)));
    rows
}

/// The reference's phases of `file`'s device `index` (in its own device order).
fn reference_phases(file: &Path, index: usize, with_categories: bool) -> Vec<Row> {
    let r = reference(file);
    let list = r["devices"][index]["phases"].as_array().cloned().unwrap_or_default();
    sorted(list.iter().map(|p| row(p, with_categories)).collect())
}

/// Ours, from `info --json --all-phases`, of the device labelled `label`; the outline that
/// `info --json` gives without the flag is checked against them on the way.
fn our_phases(file: &Path, label: &str, with_categories: bool) -> Vec<Row> {
    let device =
        |info: Value| info["devices"].as_array().expect("devices").iter().find(|d| d["label"] == label).cloned();
    let phases = device(info_json_with(file, &["--all-phases"])).map(|d| d["phases"].clone()).unwrap_or(Value::Null);
    let outline = device(info_json(file)).map(|d| d["phases"].clone()).unwrap_or(Value::Null);
    let list = |key: &str| phases[key].as_array().cloned().unwrap_or_default();
    let (all_phases, iterations) = (list("phases"), list("iterations"));
    // The outline: the same counts, each kind's highest (the first of equals), the highest
    // iterations; never the rows themselves.
    assert!(outline.get("phases").is_none() && outline.get("iterations").is_none(), "{outline}");
    if all_phases.is_empty() {
        assert_eq!(outline, Value::Null, "{}: no phases, no outline", file.display());
        return Vec::new();
    }
    assert_eq!(outline["phase_count"].as_u64(), Some(all_phases.len() as u64), "{}", file.display());
    if !iterations.is_empty() {
        assert_eq!(outline["iteration_count"].as_u64(), Some(iterations.len() as u64), "{}", file.display());
    }
    for highest in outline["highest"].as_array().into_iter().flatten() {
        let kind = &highest["kind"];
        let best = all_phases.iter().filter(|p| &p["kind"] == kind).map(|p| p["high_bytes"].as_u64()).max().flatten();
        assert_eq!(highest["high_bytes"].as_u64(), best, "{}: {kind}", file.display());
    }
    let top = outline["highest_iterations"].as_array().cloned().unwrap_or_default();
    assert!(top.len() <= 5 && top.len() == iterations.len().min(5), "{}", file.display());
    let floor = top.iter().filter_map(|p| p["high_bytes"].as_u64()).min().unwrap_or(0);
    let above = iterations.iter().filter(|p| p["high_bytes"].as_u64().unwrap_or(0) > floor).count();
    assert!(above < top.len().max(1), "{}: an iteration above the outline's lowest is left out", file.display());
    sorted(all_phases.iter().chain(&iterations).map(|p| row(p, with_categories)).collect())
}

#[test]
fn info_json_outlines_the_phases_at_any_length_of_run() {
    // 200,000 entries of about 3 allocations per iteration: tens of thousands of iterations,
    // whose rows come only on request.
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("many_iterations.pickle");
    let status = std::process::Command::new("python3")
        .arg(repo_root().join("scripts/gen_snapshot.py"))
        .args(["--entries", "200000", "--iteration-allocs", "3", "--out"])
        .arg(&file)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("python3 runs");
    assert!(status.success());
    let run = |args: &[&str]| {
        let mut all: Vec<&std::ffi::OsStr> = vec!["info".as_ref(), "--json".as_ref()];
        all.extend(args.iter().map(|a| std::ffi::OsStr::new(*a)));
        all.push(file.as_os_str());
        let output = vramscope(&all);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        output.stdout
    };
    let (outline, full) = (run(&[]), run(&["--all-phases"]));
    let json: Value = serde_json::from_slice(&outline).expect("json");
    let iterations = json["devices"][0]["phases"]["iteration_count"].as_u64().expect("iteration_count");
    assert!(iterations > 10_000, "{iterations}");
    assert!(outline.len() < 16_000, "info --json wrote {} bytes for {iterations} iterations", outline.len());
    assert!(full.len() > 100 * outline.len(), "{} against {}", full.len(), outline.len());
}

fn snapshot(name: &str) -> PathBuf {
    fixtures_dir().join("pytorch-snapshots").join(name)
}

#[test]
fn every_real_fixture_has_the_phases_and_high_points_of_the_reference() {
    let snapshots = [
        "gpt_ctx128_forward_fp32.pickle",
        "gpt_ctx128_forward_mixed.pickle",
        "gpt_ctx128_fullstep_fp32.pickle",
        "stanford_cs336_a2_memory_snapshot.pickle",
        "mosaic_output.pickle",
    ];
    for name in snapshots {
        let file = snapshot(name);
        let (ours, theirs) = (our_phases(&file, "cuda:0", true), reference_phases(&file, 0, true));
        assert_eq!(ours, theirs, "{name}");
    }
    // The full step: forward, backward and the optimizer step, told by the frames (and
    // PyTorch's `Optimizer.step#AdamW.step` range).
    let full = our_phases(&snapshot("gpt_ctx128_fullstep_fp32.pickle"), "cuda:0", false);
    let kinds: Vec<Option<&str>> = full.iter().map(|r| r.1.as_deref()).collect();
    assert_eq!(kinds, [None, Some("backward"), Some("forward"), Some("optimizer_step")]);
    // A profiler trace: three iterations, by its ProfilerStep and Optimizer.step ranges and its
    // backward operators.
    let chrome = fixtures_dir().join("torch-profiler/mlp_adam_cpu.chrome_trace.json");
    let ours = our_phases(&chrome, "host", false);
    assert_eq!(ours, reference_phases(&chrome, 0, false));
    assert_eq!(ours.iter().filter(|r| r.1.is_some()).count(), 9, "{ours:?}");
}

fn diff_json(a: &Path, b: &Path, args: &[&str]) -> (Option<i32>, Value, String) {
    let mut all: Vec<&std::ffi::OsStr> = vec!["diff".as_ref(), a.as_os_str(), b.as_os_str(), "--json".as_ref()];
    all.extend(args.iter().map(|s| std::ffi::OsStr::new(*s)));
    let output = vramscope(&all);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let json = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
    (output.status.code(), json, stderr)
}

/// The reference's value of a diff row on one side: the phase of that iteration, or the
/// highest of its kind (the first of equals).
fn reference_side(phases: &[Row], row: &Value) -> Option<Row> {
    let kind = row["phase"].as_str().map(str::to_owned);
    match row["iteration"].as_u64() {
        Some(i) => phases.iter().find(|p| p.0 == i && p.1 == kind).cloned(),
        None => {
            let mut best: Option<&Row> = None;
            for p in phases.iter().filter(|p| p.1 == kind) {
                if best.is_none_or(|b| p.2 > b.2 || (p.2 == b.2 && p.0 < b.0)) {
                    best = Some(p);
                }
            }
            best.cloned()
        }
    }
}

/// Every row of `diff --json` on both sides equals the reference's, and B - A is the difference.
fn assert_rows_match(a: &Path, b: &Path, json: &Value, with_categories: bool) {
    let (ra, rb) = (reference_phases(a, 0, with_categories), reference_phases(b, 0, with_categories));
    let rows = json["phases"]["rows"].as_array().expect("rows");
    assert!(!rows.is_empty());
    for r in rows {
        for (side, phases) in [("a", &ra), ("b", &rb)] {
            let expected = reference_side(phases, r);
            match (&r[side], expected) {
                (Value::Null, None) => {}
                (got, Some(want)) => {
                    assert_eq!(got["high_bytes"].as_u64(), Some(want.2), "{side} {r}");
                    if with_categories {
                        assert_eq!(got["high_time_us"].as_i64(), Some(want.3), "{side} {r}");
                    }
                    assert_eq!(got["iteration"].as_u64(), Some(want.0), "{side} {r}");
                    if let Some(categories) = want.4 {
                        for c in r["categories"].as_array().expect("categories") {
                            let name = c["category"].as_str().expect("name");
                            assert_eq!(c[side].as_u64().unwrap_or(0), categories[name].as_u64().unwrap_or(0), "{name}");
                        }
                    }
                }
                (got, None) => panic!("{side} has {got} where the reference has nothing: {r}"),
            }
        }
        if let (Some(x), Some(y)) = (r["a"]["high_bytes"].as_i64(), r["b"]["high_bytes"].as_i64()) {
            assert_eq!(r["delta"].as_i64(), Some(y - x));
        }
    }
}

#[test]
fn diff_pairs_the_phases_of_real_snapshots_with_the_reference_numbers() {
    for (a, b) in [
        ("gpt_ctx128_forward_fp32.pickle", "gpt_ctx128_forward_mixed.pickle"),
        ("gpt_ctx128_forward_fp32.pickle", "gpt_ctx128_fullstep_fp32.pickle"),
    ] {
        let (a, b) = (snapshot(a), snapshot(b));
        let (code, json, stderr) = diff_json(&a, &b, &[]);
        assert_eq!(code, Some(0), "{stderr}");
        assert_rows_match(&a, &b, &json, true);
        assert_eq!(json["phases"]["a_from"], "stacks");
    }
    // The forward pass alone against the full step: forward pairs, the rest is B's alone.
    let (a, b) = (snapshot("gpt_ctx128_forward_fp32.pickle"), snapshot("gpt_ctx128_fullstep_fp32.pickle"));
    let (_, json, _) = diff_json(&a, &b, &[]);
    let rows = json["phases"]["rows"].as_array().expect("rows");
    let step = rows.iter().find(|r| r["phase"] == "optimizer_step" && r["iteration"].is_null()).expect("step");
    assert!(step["a"].is_null() && step["delta"].is_null());
    assert_eq!(json["phases"]["b_peak_phase"], "optimizer_step");
    // A gate on a phase A does not have cannot be checked.
    let (code, _, stderr) = diff_json(&a, &b, &["--fail-if-phase-grows", "optimizer_step=5"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("A shows no optimizer step phase"), "{stderr}");
}

/// `tests/workloads/phases.py` at a context length, as a profiler trace in `dir`.
fn profiled_run(dir: &Path, seq_len: u32) -> PathBuf {
    let out = dir.join(format!("ctx{seq_len}.json"));
    let script = repo_root().join("tests/workloads/phases.py");
    let output = std::process::Command::new(torch_python())
        .arg(script)
        .args(["--seq-len", &seq_len.to_string(), "--out"])
        .arg(&out)
        .output()
        .expect("python runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    out
}

#[test]
fn a_longer_context_is_told_by_the_phase_that_grew_when_both_runs_peak_in_the_optimizer_step() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b) = (profiled_run(dir.path(), 16), profiled_run(dir.path(), 40));
    let (code, json, stderr) = diff_json(&a, &b, &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_rows_match(&a, &b, &json, false);
    assert_eq!(json["phases"]["a_peak_phase"], "optimizer_step");
    assert_eq!(json["phases"]["b_peak_phase"], "optimizer_step");
    // The phase whose high point grew most, by the reference, leads the sentence.
    let (ra, rb) = (reference_phases(&a, 0, false), reference_phases(&b, 0, false));
    let highest =
        |phases: &[Row], kind: &str| phases.iter().filter(|p| p.1.as_deref() == Some(kind)).map(|p| p.2).max();
    let grew = |kind: &str| highest(&rb, kind).expect("B") as i64 - highest(&ra, kind).expect("A") as i64;
    let (kind, most) = ["forward", "backward", "optimizer_step"]
        .into_iter()
        .map(|k| (k, grew(k)))
        .max_by_key(|(_, d)| d.unsigned_abs())
        .expect("kinds");
    let peak_delta = json["delta"]["peak_allocated_bytes"].as_i64().expect("delta");
    assert!(most.unsigned_abs() > 2 * peak_delta.unsigned_abs(), "{kind} {most} vs the peak's {peak_delta}");
    let phrase = match kind {
        "forward" => "the forward pass",
        "backward" => "the backward pass",
        _ => "the optimizer step",
    };
    let summary = json["summary"].as_str().expect("summary");
    assert!(summary.starts_with(&format!("B's high point in {phrase} is")), "{summary}");
    assert_eq!(json["summary_phase"]["kind"], kind);
    assert_eq!(json["summary_phase"]["delta"].as_i64(), Some(most));
    assert!(summary.ends_with("because both runs peak in the optimizer step."), "{summary}");

    // The gates, against the reference's growth of each phase.
    let percent = |kind: &str| grew(kind) as f64 * 100.0 / highest(&ra, kind).expect("A") as f64;
    for (kind, limit) in [("forward", 5.0), ("optimizer_step", 10.0), ("backward", 1.0)] {
        let gate = format!("{kind}={limit}");
        let (code, json, stderr) = diff_json(&a, &b, &["--fail-if-phase-grows", &gate]);
        let expected = if percent(kind) <= limit { 0 } else { 1 };
        assert_eq!(code, Some(expected), "{gate}: {} {stderr}", percent(kind));
        let result = &json["gates"][0];
        assert_eq!(result["gate"], format!("phase:{kind}"));
        let actual = result["actual_percent"].as_f64().expect("actual");
        assert!((actual - percent(kind)).abs() < 1e-9, "{actual} {}", percent(kind));
    }
    // By category within a phase: the profiler's memory events carry no stacks, so what grew is
    // unattributed.
    let (code, json, _) = diff_json(&a, &b, &["--fail-if-phase-grows", "forward:unknown=1"]);
    assert_eq!(code, Some(1));
    assert_eq!(json["gates"][0]["gate"], "phase:forward:unknown");
    // And in words.
    let output = vramscope(&["diff".as_ref(), a.as_os_str(), b.as_os_str()]);
    let text = String::from_utf8_lossy(&output.stdout);
    for line in
        ["phase by phase", "forward (highest)", "iteration 3 optimizer step", "its peak is in the optimizer step"]
    {
        assert!(text.contains(line), "{line}:\n{text}");
    }
}

#[test]
fn bad_phase_gates_are_refused_with_what_is_expected() {
    let (a, b) = (snapshot("gpt_ctx128_forward_fp32.pickle"), snapshot("gpt_ctx128_forward_mixed.pickle"));
    for (gate, says) in [
        ("sideways=5", "unknown phase"),
        ("forward:activations=5", "unknown category"),
        ("forward", "expected PHASE=PERCENT"),
        ("forward=lots", "not a number"),
    ] {
        let (code, _, stderr) = diff_json(&a, &b, &["--fail-if-phase-grows", gate]);
        assert_eq!(code, Some(2), "{gate}");
        assert!(stderr.contains(says), "{gate}: {stderr}");
    }
    // Mixed precision grows the forward pass's high point by 23%.
    let (code, json, _) =
        diff_json(&a, &b, &["--fail-if-phase-grows", "forward=30", "--fail-if-phase-grows", "forward:activation=50"]);
    assert_eq!(code, Some(1));
    assert_eq!(json["gates"][0]["passed"], true);
    assert_eq!(json["gates"][1]["passed"], false);
}
