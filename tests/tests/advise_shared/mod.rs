//! What the advisor's tests share: recording a run (the sample, a workload, ranks under
//! torchrun, an estimate), reading `info` and `advise`, and the projections in them.

#![allow(dead_code, clippy::expect_used)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use vramscope_e2e::{record_train_command, repo_root, vramscope};

/// Records `samples/pytorch/train.py --steps 3 ARGS` on the CPU into `dir/NAME.vtrace`.
pub fn record(dir: &Path, name: &str, args: &[&str]) -> PathBuf {
    let trace = dir.join(format!("{name}.vtrace"));
    let output =
        record_train_command(&trace).args(["--steps", "3"]).args(args).output().expect("vramscope record runs");
    assert!(output.status.success(), "{name}: {}", String::from_utf8_lossy(&output.stderr));
    trace
}

/// `vramscope ARGS` (which must succeed), its standard output read as JSON.
pub fn json(args: &[&OsStr]) -> serde_json::Value {
    let output = vramscope(args);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("JSON")
}

/// The allocated peak `info` gives for `device` (-1: the host) of `trace`.
pub fn peak(trace: &Path, device: i64) -> u64 {
    let info = json(&[OsStr::new("info"), OsStr::new("--json"), trace.as_os_str()]);
    info["devices"]
        .as_array()
        .and_then(|d| d.iter().find(|d| d["device"] == device))
        .and_then(|d| d["peak_allocated_bytes"].as_u64())
        .expect("a peak")
}

/// Records `tests/workloads/NAME ARGS` (with the PyTorch venv) into `dir/TRACE.vtrace`.
pub fn record_workload(dir: &Path, trace: &str, workload: &str, args: &[&str]) -> PathBuf {
    let path = dir.join(format!("{trace}.vtrace"));
    let output = vramscope_e2e::record_command(&path, vramscope_e2e::torch_python())
        .arg(repo_root().join("tests/workloads").join(workload))
        .args(args)
        .output()
        .expect("vramscope record runs");
    assert!(output.status.success(), "{trace}: {}", String::from_utf8_lossy(&output.stderr));
    path
}

/// Why `advice` leaves the remedy `id` out (its `left_out` reasons), none when it does not.
pub fn left_out(advice: &serde_json::Value, id: &str) -> Vec<String> {
    let rows = advice["left_out"].as_array().map_or(&[][..], Vec::as_slice);
    rows.iter().filter(|r| r["id"] == id).filter_map(|r| r["why"].as_str().map(str::to_owned)).collect()
}

/// The remedy `id`'s projected allocated peak and its stated uncertainty in `advice`.
pub fn projection(advice: &serde_json::Value, id: &str) -> (u64, f64) {
    let remedy = advice["remedies"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["id"] == id))
        .unwrap_or_else(|| panic!("no {id} in {advice}"));
    (remedy["projected_peak_allocated_bytes"].as_u64().expect("bytes"), remedy["uncertainty"].as_f64().expect("f64"))
}

/// Records `train.py` under `torchrun --nproc_per_node=2` (gloo on the CPU) and returns each
/// rank's trace.
pub fn record_ranks(dir: &Path, name: &str, port: u32, args: &[&str]) -> Vec<PathBuf> {
    let trace = dir.join(format!("{name}.vtrace"));
    let torchrun = vramscope_e2e::torch_python().with_file_name("torchrun");
    let output = vramscope_e2e::record_command(&trace, &torchrun)
        .args(["--nproc_per_node=2", &format!("--master_port={port}")])
        .arg(repo_root().join("samples/pytorch/train.py"))
        .args(["--device", "cpu", "--steps", "3"])
        .args(args)
        .output()
        .expect("vramscope record runs");
    assert!(output.status.success(), "{name}: {}", String::from_utf8_lossy(&output.stderr));
    (0..2).map(|rank| dir.join(format!("{name}.rank{rank}.vtrace"))).collect()
}

/// The highest point of a trace's forward, backward and optimizer-step phases.
pub fn training_high_point(trace: &Path) -> u64 {
    let info = json(&[OsStr::new("info"), OsStr::new("--json"), trace.as_os_str()]);
    let phases = info["devices"][0]["phases"]["highest"].as_array().expect("phases");
    phases.iter().filter_map(|p| p["high_bytes"].as_u64()).max().expect("a phase")
}

/// Runs `vramscope estimate --gpu h100 EXTRA -- PYTHON PROGRAM ARGS` (`PROGRAM` under the
/// repository), as the `name`d step of a test; it must succeed.
pub fn estimate_h100(name: &str, extra: &[&OsStr], program: &str, args: &[&OsStr]) {
    let output = vramscope_e2e::vramscope_command()
        .args(["estimate", "--gpu", "h100"])
        .args(extra)
        .arg("--")
        .arg(vramscope_e2e::torch_python())
        .arg(repo_root().join(program))
        .args(args)
        .output()
        .expect("vramscope estimate runs");
    assert!(output.status.success(), "{name}: {}", String::from_utf8_lossy(&output.stderr));
}
