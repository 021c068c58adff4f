//! Memory that grows every iteration, found in real PyTorch runs on the CPU: the common leaks
//! (`tests/workloads/growth.py`: validation losses kept with their graphs, outputs kept for
//! logging, a cache that never evicts) are found with the site and the bytes each iteration
//! keeps, computed by hand from the tensors' shapes; the same loop without a leak, and the sample
//! training script, are steady (allocator caching and warm-up are not growth). Without the
//! recorded iteration spans, the iterations are found from the allocations' pattern, with the
//! same answer. Inference and evaluation loops (`tests/workloads/generate.py`, no backward pass)
//! take each call of the model as an iteration: what they keep is found as in training, a
//! key/value cache is said to be generation's own (no alarm), and a sequence that grows without
//! anything kept is not called a leak.

#![allow(clippy::expect_used)]

use std::path::Path;

use vramscope_e2e::{info_json, record_command, repo_root, torch_python};

fn record(args: &[&str], out: &Path) {
    let mut command = record_command(out, torch_python());
    let output = command.args(args).output().expect("vramscope record runs");
    assert!(output.status.success(), "{args:?}: {}", String::from_utf8_lossy(&output.stderr));
}

/// The host device's growth finding, from `info --json`.
fn growth_of(file: &Path) -> serde_json::Value {
    let info = info_json(file);
    let devices = info["devices"].as_array().expect("devices");
    let host = devices.iter().find(|d| d["device"] == -1).expect("the host device");
    host["growth"].clone()
}

const F32: u64 = 4;

/// A copy of the recording at `file` without its iteration spans (beside it, `.bare.vtrace`), as an
/// imported trace would be.
fn without_spans(file: &Path) -> std::path::PathBuf {
    let data = std::fs::read(file).expect("read");
    let mut trace = vramscope_trace_format::import(&data, &vramscope_trace_format::NoProgress).expect("reads").trace;
    trace.annotations.clear();
    let bare = file.with_extension("bare.vtrace");
    let mut bytes = Vec::new();
    vramscope_trace_format::vtrace::write(&trace, &mut bytes).expect("write");
    std::fs::write(&bare, &bytes).expect("write");
    bare
}

#[test]
fn the_common_leaks_are_found_with_their_sites_and_sizes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = repo_root().join("tests/workloads/growth.py");
    let script = script.to_str().expect("path");
    // (mode, bytes kept per iteration, the largest site and its bytes), from the script's shapes:
    // batch 128, Linear(256, 1024) -> ReLU -> Linear(1024, 512). A validation loss keeps its
    // input, the ReLU's output, the log-softmax, the int64 targets, and two scalars (the loss in
    // the list, and the total weight nll_loss saves).
    let validation_graph = 128 * 256 * F32 + 128 * 1024 * F32 + 128 * 512 * F32 + 128 * 8 + 2 * F32;
    let cases = [
        ("loss-list", validation_graph, "aten::clamp_min", 128 * 1024 * F32),
        ("outputs", 128 * 512 * F32, "aten::addmm", 128 * 512 * F32),
        ("cache", 128 * 1024 * F32, "aten::addmm", 128 * 1024 * F32),
    ];
    let steady = dir.path().join("none.vtrace");
    record(&[script, "none"], &steady);
    for (mode, per_iteration, site, site_bytes) in cases {
        let out = dir.path().join(format!("{mode}.vtrace"));
        record(&[script, mode], &out);
        // diff says which run grows, in text and JSON.
        let diff = vramscope_e2e::vramscope(&["diff".as_ref(), steady.as_os_str(), out.as_os_str()]);
        let text = String::from_utf8_lossy(&diff.stdout);
        assert!(text.contains("A: steady over 8 recorded iterations"), "{mode}:\n{text}");
        assert!(text.contains("B: memory grows") && text.contains(&format!("at {site}")), "{mode}:\n{text}");
        let diff = vramscope_e2e::vramscope(&["diff".as_ref(), "--json".as_ref(), steady.as_os_str(), out.as_os_str()]);
        let json: serde_json::Value = serde_json::from_slice(&diff.stdout).expect("diff --json");
        assert_eq!(json["b"]["growth"]["bytes_per_iteration"], per_iteration, "{mode}");
        assert_eq!(json["a"]["growth"]["grows"], false, "{mode}");
        let growth = growth_of(&out);
        assert_eq!(growth["grows"], true, "{mode}: {growth}");
        assert_eq!(growth["iterations"]["kind"], "spans", "{mode}");
        assert_eq!(growth["count"], 8, "{mode}");
        assert_eq!(growth["bytes_per_iteration"], per_iteration, "{mode}: {growth}");
        let top = &growth["sites"][0];
        assert_eq!(top["site"], site, "{mode}: {growth}");
        assert_eq!(top["bytes_per_iteration"], site_bytes, "{mode}");
        let kept: u64 = growth["sites"]
            .as_array()
            .expect("sites")
            .iter()
            .map(|s| s["bytes_per_iteration"].as_u64().unwrap_or(0))
            .sum();
        assert_eq!(kept, per_iteration, "{mode}: what the sites keep is the growth");
        // The text says it too.
        let text = vramscope_e2e::vramscope(&["info".as_ref(), out.as_os_str()]);
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(text.contains("memory grows") && text.contains(&format!("at {site}")), "{mode}:\n{text}");

        // Without the spans: the iterations come from the allocations' pattern, same answer.
        let growth = growth_of(&without_spans(&out));
        assert_eq!(growth["grows"], true, "{mode} without spans: {growth}");
        assert_eq!(growth["iterations"]["kind"], "pattern", "{mode}");
        assert_eq!(growth["bytes_per_iteration"], per_iteration, "{mode} without spans: {growth}");
        assert_eq!(growth["sites"][0]["site"], site, "{mode} without spans");
    }
}

#[test]
fn loops_without_a_leak_are_steady() {
    let dir = tempfile::tempdir().expect("tempdir");
    let growth_script = repo_root().join("tests/workloads/growth.py");
    let train = repo_root().join("samples/pytorch/train.py");
    let runs: [(&str, Vec<&str>); 2] = [
        ("none", vec![growth_script.to_str().expect("path"), "none"]),
        ("train", vec![train.to_str().expect("path"), "--device", "cpu", "--steps", "6"]),
    ];
    for (name, args) in runs {
        let out = dir.path().join(format!("{name}.vtrace"));
        record(&args, &out);
        let growth = growth_of(&out);
        assert_eq!(growth["grows"], false, "{name}: {growth}");
        assert!(growth["count"].as_u64().unwrap_or(0) >= 6, "{name}: {growth}");
        let text = vramscope_e2e::vramscope(&["info".as_ref(), out.as_os_str()]);
        assert!(String::from_utf8_lossy(&text.stdout).contains("steady over"), "{name}");
        // Without the spans, no growth either (steady, or no repeating pattern to tell by).
        assert_ne!(growth_of(&without_spans(&out))["grows"], true, "{name} without spans");
    }
}

#[test]
fn inference_loops_find_what_they_keep_and_tell_a_cache_or_a_longer_input_from_a_leak() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = repo_root().join("tests/workloads/generate.py");
    let script = script.to_str().expect("path");
    // Batch 128 of a vocabulary of 4,096: the last logits kept each step are 2 MiB; each step's
    // keys and values are 128 x 1 x 256 floats from k_proj and v_proj in each of 2 blocks.
    let logits = 128 * 4096 * F32;
    let keys_and_values = 2 * 2 * 128 * 256 * F32;
    // (mode, the nature, whether it alarms, the bytes kept per iteration by site, in order)
    type Case<'a> = (&'a str, &'a str, bool, &'a [(&'a str, u64)]);
    let cases: [Case<'_>; 6] = [
        ("logits", "kept", true, &[("aten::clone", logits)]),
        ("cache", "kv_cache", false, &[("aten::addmm", keys_and_values)]),
        ("cache-leak", "kept", true, &[("aten::clone", logits), ("aten::addmm", keys_and_values)]),
        ("clean", "working_set", false, &[]),
        ("eval", "", false, &[]),
        ("eval-leak", "kept", true, &[("aten::addmm", 8 * 64 * 4096 * F32)]),
    ];
    for (mode, nature, alarms, kept) in cases {
        let trace = dir.path().join(format!("{mode}.vtrace"));
        record(&[script, mode, "--steps", "12"], &trace);
        let growth = growth_of(&trace);
        assert_eq!(growth["iterations"]["kind"], "model_calls", "{mode}: {growth}");
        assert_eq!(growth["count"], 11, "{mode}: 12 calls, the last not a whole iteration");
        if nature.is_empty() {
            assert_eq!(growth["grows"], false, "{mode}: {growth}");
            continue;
        }
        assert_eq!(growth["grows"], true, "{mode}: {growth}");
        assert_eq!(growth["nature"], nature, "{mode}: {growth}");
        let sites: Vec<(String, u64)> = growth["sites"]
            .as_array()
            .expect("sites")
            .iter()
            .filter(|s| s["bytes_per_iteration"].as_u64().unwrap_or(0) >= 64 << 10)
            .map(|s| (s["site"].as_str().unwrap_or("").to_owned(), s["bytes_per_iteration"].as_u64().unwrap_or(0)))
            .collect();
        let expected: Vec<(String, u64)> = kept.iter().map(|&(site, bytes)| (site.to_owned(), bytes)).collect();
        assert_eq!(sites, expected, "{mode}: {growth}");
        // The cache's sites are named as one wherever it is kept.
        for site in growth["sites"].as_array().into_iter().flatten() {
            let is_cache = site["site"] == "aten::addmm" && mode.starts_with("cache");
            assert_eq!(site["kv_cache"], is_cache, "{mode}: {site}");
        }
        // What alarms is what the app's banner and advise warn of; the others are said calmly.
        let advice = vramscope_e2e::vramscope(&["advise".as_ref(), "--json".as_ref(), trace.as_os_str()]);
        let advice: serde_json::Value = serde_json::from_slice(&advice.stdout).expect("advise --json");
        assert_eq!(advice.get("growth").is_some(), alarms, "{mode}: advise {}", advice["growth"]);
        let text = String::from_utf8_lossy(&vramscope_e2e::vramscope(&["info".as_ref(), trace.as_os_str()]).stdout)
            .into_owned();
        assert_eq!(text.contains("usual causes"), alarms, "{mode}:\n{text}");
    }
}
