//! One question, one answer: wherever two commands say the same thing of a trace, they say it
//! alike. A table of questions (the peak allocated, the reserved peak and whether the trace
//! records it, the categories at the peak, the device) asked of every fixture and recorded
//! sample through every command that answers them: `info --json`, `advise --json`, each side of
//! `diff --json`, and the blocks `info --blocks` lists at the peak. A consistency test; `info`'s
//! own answers are also checked here against independent references: the snapshots against
//! `scripts/reference/snapshot_reference.py`, the H200 recordings against PyTorch's own counters
//! (`samples/traces/*.summary.json`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
use vramscope_e2e::{all_fixtures, info_json, info_json_with, reference, repo_root, vramscope};

/// What a face says to the questions, for one device of one file.
#[derive(Debug, PartialEq)]
struct Answers {
    device: i64,
    peak_allocated_bytes: u64,
    peak_reserved_bytes: u64,
    reserved_recorded: Option<bool>,
    categories_at_peak: BTreeMap<String, u64>,
}

fn categories(value: &Value) -> BTreeMap<String, u64> {
    value
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(u64::MAX))).collect())
        .unwrap_or_default()
}

fn answers(value: &Value, device: i64) -> Answers {
    Answers {
        device,
        peak_allocated_bytes: value["peak_allocated_bytes"].as_u64().unwrap_or(u64::MAX),
        peak_reserved_bytes: value["peak_reserved_bytes"].as_u64().unwrap_or(u64::MAX),
        reserved_recorded: value["reserved_recorded"].as_bool(),
        categories_at_peak: categories(&value["categories_at_peak"]),
    }
}

/// `info --json`'s answers for `device`.
fn from_info(info: &Value, device: i64) -> Answers {
    let devices = info["devices"].as_array().cloned().unwrap_or_default();
    let found = devices.iter().find(|d| d["device"].as_i64() == Some(device));
    answers(found.unwrap_or_else(|| panic!("no device {device} in {info}")), device)
}

/// The device `advise` and `diff` look at: the one with the highest peak, the first of equals.
fn highest_device(info: &Value) -> i64 {
    let devices = info["devices"].as_array().cloned().unwrap_or_default();
    let mut highest: Option<(i64, u64)> = None;
    for d in &devices {
        let peak = d["peak_allocated_bytes"].as_u64().unwrap_or(0);
        if highest.is_none_or(|(_, best)| peak > best) {
            highest = d["device"].as_i64().map(|device| (device, peak));
        }
    }
    highest.map(|(device, _)| device).unwrap_or_else(|| panic!("no devices in {info}"))
}

fn json_of(args: &[&std::ffi::OsStr]) -> Value {
    let output = vramscope(args);
    assert!(output.status.success(), "vramscope {args:?} failed:\n{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("vramscope {args:?}: not JSON ({e})"))
}

/// Every fixture, and the recorded samples (one process each).
fn files() -> Vec<PathBuf> {
    let mut files = all_fixtures();
    let samples = repo_root().join("samples/traces");
    let mut recorded: Vec<PathBuf> =
        std::fs::read_dir(&samples).map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect()).unwrap_or_default();
    recorded.retain(|p| p.extension().is_some_and(|e| e == "vtrace") && !p.to_string_lossy().contains("2ranks"));
    recorded.sort();
    assert!(recorded.len() >= 4, "the recorded samples in {}", samples.display());
    files.extend(recorded);
    files
}

fn name(path: &Path) -> String {
    path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned())
}

/// Consistency test: advise, diff and info --blocks against info --json; info itself against the
/// independent reference (snapshots) and PyTorch's counters (the H200 recordings).
#[test]
fn every_face_answers_the_same_questions_alike() {
    let files = files();
    let infos: Vec<Value> = files.iter().map(|f| info_json(f)).collect();
    let (mut asked, mut blocks_summed, mut referenced) = (0, 0, 0);
    for (k, (file, info)) in files.iter().zip(&infos).enumerate() {
        let device = highest_device(info);
        let expected = from_info(info, device);
        let what = name(file);
        referenced += check_against_reference(file, device, &expected);

        // advise: its baseline.
        let advice = json_of(&["advise".as_ref(), "--json".as_ref(), file.as_os_str()]);
        let baseline = &advice["baseline"];
        let device_of_advice = baseline["device"].as_i64().unwrap_or(i64::MIN);
        assert_eq!(
            answers(baseline, device_of_advice),
            expected,
            "{what}: advise --json's baseline against info --json"
        );

        // diff: each side, against another file.
        let other = &files[(k + 1) % files.len()];
        let diff = json_of(&["diff".as_ref(), "--json".as_ref(), file.as_os_str(), other.as_os_str()]);
        for (side, info_of_side) in [("a", info), ("b", &infos[(k + 1) % files.len()])] {
            let run = &diff[side];
            let device = run["device"].as_i64().unwrap_or(i64::MIN);
            let mut said = answers(run, device);
            // diff does not say whether reserved memory is recorded: the rest must agree.
            said.reserved_recorded = from_info(info_of_side, device).reserved_recorded;
            assert_eq!(said, from_info(info_of_side, device), "{what}: diff --json's '{side}' against info --json");
        }

        // The blocks alive at the peak add up to its categories (traces of allocations; a
        // memory timeline has category totals and no blocks).
        let listed = info_json_with(file, &["--blocks", "1000000"]);
        let devices = listed["largest_blocks"]["devices"].as_array().cloned().unwrap_or_default();
        if let Some(blocks) = devices.iter().find(|d| d["device"].as_i64() == Some(device)) {
            let mut summed: BTreeMap<String, u64> = BTreeMap::new();
            for block in blocks["blocks"].as_array().into_iter().flatten() {
                let category = block["category"].as_str().unwrap_or("?").to_owned();
                *summed.entry(category).or_default() += block["size_bytes"].as_u64().unwrap_or(0);
            }
            summed.retain(|_, v| *v > 0);
            if !summed.is_empty() {
                assert_eq!(
                    summed, expected.categories_at_peak,
                    "{what}: info --blocks against the categories at the peak"
                );
                assert_eq!(summed.values().sum::<u64>(), expected.peak_allocated_bytes, "{what}: blocks at the peak");
                blocks_summed += 1;
            }
        }
        asked += 1;
    }
    assert!(asked >= 12, "only {asked} files asked");
    // Every trace of allocations (all but the profiler's memory timelines) listed its blocks.
    assert!(blocks_summed >= asked - 2, "the blocks were summed on {blocks_summed} files of {asked}");
    assert!(referenced >= 9, "only {referenced} files checked against a reference");
}

/// `info`'s answers for `file` against an independent reference, where there is one: a
/// snapshot's replay by `snapshot_reference.py`, a recording's PyTorch counters. Returns 1 when
/// one was checked.
fn check_against_reference(file: &Path, device: i64, said: &Answers) -> usize {
    let what = name(file);
    if file.extension().is_some_and(|e| e == "pickle") {
        let theirs = reference(file);
        let devices = theirs["devices"].as_array().cloned().unwrap_or_default();
        let r = devices.iter().find(|d| d["device"].as_i64() == Some(device));
        let r = r.unwrap_or_else(|| panic!("{what}: no device {device} in the reference"));
        assert_eq!(said.peak_allocated_bytes, r["peak_allocated_bytes"].as_u64().unwrap_or(0), "{what}: the peak");
        assert_eq!(said.peak_reserved_bytes, r["peak_reserved_bytes"].as_u64().unwrap_or(0), "{what}: reserved");
        assert_eq!(said.categories_at_peak, categories(&r["categories_at_peak"]), "{what}: the categories");
        return 1;
    }
    let counters = file.with_extension("summary.json");
    let Ok(text) = std::fs::read_to_string(&counters) else { return 0 };
    if device < 0 {
        return 0; // the counters are the GPU's
    }
    let counters: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", counters.display()));
    // PyTorch's own max_memory_reserved() for the run: the reserved peak of the GPU the run used.
    let cuda = &counters["cuda"];
    assert_eq!(Some(said.peak_reserved_bytes), cuda["max_memory_reserved"].as_u64(), "{what}: reserved peak");
    1
}
