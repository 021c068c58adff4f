//! On the CPU the shim reads tensor allocations by stopping PyTorch's profiler and starting
//! another. Started while a range that began under the stopped one is still open, PyTorch writes
//! into freed memory when that range ends, and the recorded program dies later (a malloc abort or
//! SIGSEGV, now and then). `tests/workloads/profiler_restarts.py` sees every start of the
//! profiler and every range it opens, and fails on such a start; here it runs under `record` with
//! a drain at every chance, in the ways real programs open ranges.

#![allow(clippy::expect_used)]

use std::path::Path;
use std::process::Output;

use vramscope_e2e::{info_json, record_command, repo_root, torch_python};

fn probe() -> std::path::PathBuf {
    repo_root().join("tests/workloads/profiler_restarts.py")
}

/// Records the probe with `args`, draining at every optimizer step and forward.
fn record_probe(trace: &Path, args: &[&str]) -> (Output, serde_json::Value) {
    let output = record_command(trace, torch_python())
        .arg(probe())
        .args(args)
        .env("VRAMSCOPE_TORCH_DRAIN_S", "0")
        .output()
        .expect("vramscope record runs");
    let summary = String::from_utf8_lossy(&output.stdout)
        .lines()
        .find(|l| l.starts_with('{'))
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or(serde_json::Value::Null);
    (output, summary)
}

fn notes(info: &serde_json::Value) -> String {
    info["notes"]
        .as_array()
        .map(|n| n.iter().filter_map(|s| s.as_str()).collect::<Vec<_>>().join("\n"))
        .unwrap_or_default()
}

/// The probe is not a test that cannot fail: a profiler restarted inside the optimizer step (what
/// the shim did before, at each step's post-hook) is caught, with the ranges it was inside, at the
/// first such start and before it happens (let happen, it corrupts the heap, and the process
/// could die before reporting).
#[test]
fn the_probe_catches_a_profiler_restarted_inside_an_open_range() {
    let output =
        std::process::Command::new(torch_python()).arg(probe()).arg("--naive-restart").output().expect("python runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("profiler started inside 'Optimizer.step#SGD.step'"), "{stderr}");
    assert!(stderr.contains("profiler started inside 'iteration 0'"), "{stderr}");
}

/// Ranges around each iteration and forward or none, the optimizer step's own range, backward,
/// steps taken inside backward, `torch.autograd.grad` through a checkpointed block, the
/// program's own profiler for one iteration: the shim drains at every iteration and never
/// restarts the profiler inside a range it saw begin. Every allocation is still seen: what the
/// trace ends holding is, to the byte, what the probe's tensors hold then. What the program's
/// own profiler ran over is said to be missing.
#[test]
fn the_cpu_profiler_is_restarted_only_outside_the_ranges_it_saw_begin() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, args) in [
        ("ranges", &[][..]),
        ("no_ranges", &["--no-ranges"][..]),
        ("in_backward", &["--step-in-backward", "--no-ranges"][..]),
        ("grad_checkpoint", &["--grad-checkpoint", "--no-ranges"][..]),
        ("own_profiler", &["--own-profiler"][..]),
    ] {
        let trace = dir.path().join(format!("{name}.vtrace"));
        let (output, probe) = record_probe(&trace, args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{name}: {stderr}");
        assert!(!stderr.contains("shim"), "{name}: the shim complained: {stderr}");
        // Drained (stopped and started again) once an iteration at least: the drain waited for
        // the ranges, it did not give up.
        let steps = probe["steps"].as_u64().expect("the probe's summary");
        assert!(probe["starts"].as_u64().expect("starts") >= steps, "{name}: {probe}");
        let info = info_json(&trace);
        let host = info["devices"].as_array().and_then(|d| d.iter().find(|d| d["device"] == -1)).expect("host");
        let notes = notes(&info);
        if name == "own_profiler" {
            assert!(
                notes.contains("CPU tensor allocations of process")
                    && notes.contains("were not recorded for")
                    && notes.contains("the program ran its own PyTorch profiler"),
                "{name}: {notes}"
            );
        } else {
            assert_eq!(host["allocated_bytes"], probe["live_bytes"], "{name}: the trace's end against the probe's");
            assert!(!notes.contains("not recorded"), "{name}: {notes}");
        }
    }
}

/// A range opened with the operator under `record_function` (no Python hook sees it end) is found
/// open when the profiler stops: the shim leaves the profiler off rather than risk the program,
/// says so on stderr, and the trace says from when allocations are missing.
#[test]
fn a_range_no_hook_sees_end_leaves_the_profiler_off_and_the_trace_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("raw.vtrace");
    let (output, probe) = record_probe(&trace, &["--raw-range"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("CPU tensor allocations are not recorded from here on")
            && stderr.contains("while raw range is open"),
        "{stderr}"
    );
    // Left off: started fewer times than the iterations (each restarts it when it is on).
    let (starts, steps) = (probe["starts"].as_u64().expect("starts"), probe["steps"].as_u64().expect("steps"));
    assert!(starts < steps, "the profiler was started {starts} times in {steps} iterations: {probe}");
    let notes = notes(&info_json(&trace));
    assert!(notes.contains("could not be restarted safely while raw range was open"), "{notes}");
    assert!(notes.contains("memory allocated after that is missing"), "{notes}");
}

/// Taking a snapshot looks up `torch._inductor`, which imports it; from the shim's timer thread
/// that import raced the program's own import of torch._dynamo and broke it (PyTorch 2.11 on an
/// H200). With the shim's guard on, a thread's lookup imports nothing: the program's own import
/// is the one that brings inductor in, on the main thread; the guard holds on the thread that
/// took it alone (other threads' lookups go through), and undoing it puts the lookup back.
#[test]
fn a_snapshot_on_the_timer_thread_does_not_import_inductor_under_the_program() {
    let shim = repo_root().join("python/vramscope/_shim");
    let code = r#"
import sys, threading, time
sys.path.insert(0, sys.argv[1])
import torch
import vramscope_patches

first = []
class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch._inductor" and not first:
            first.append(threading.current_thread().name)
        return None
sys.meta_path.insert(0, Watch())

original = torch.__dict__["__getattr__"]
taking = vramscope_patches.WithoutLazyInductor()
undo = taking.install(torch)
looked = []
stop = threading.Event()
def timer():
    with taking:
        while not stop.is_set():
            looked.append(hasattr(torch, "_inductor"))
            time.sleep(0.001)
thread = threading.Thread(target=timer, name="vramscope-drain", daemon=True)
thread.start()
while not looked:
    time.sleep(0.001)
assert "torch._inductor" not in sys.modules, "the guarded lookup imported inductor"
import torch._dynamo
stop.set()
thread.join()
assert first == ["MainThread"], first
assert looked[0] is False, looked[0]
assert "torch._inductor" in sys.modules, "the program's own import brought inductor in"

# The guard is the guarded thread's alone: while the timer thread holds it, a lookup on any
# other thread goes through to the module's own lookup (a stand-in module here, whose lookup
# says it ran, so that nothing real is imported or already there).
import types
fake = types.ModuleType("fake")
def lookup(name):
    return "looked up " + name
fake.__getattr__ = lookup
guard = vramscope_patches.WithoutLazyInductor()
undo_fake = guard.install(fake)
inside, release, seen = threading.Event(), threading.Event(), {}
def guarded():
    with guard:
        seen["guarded"] = hasattr(fake, "_inductor")
        inside.set()
        release.wait(10)
    seen["after"] = getattr(fake, "_inductor")
holder = threading.Thread(target=guarded)
holder.start()
assert inside.wait(10)
other = threading.Thread(target=lambda: seen.__setitem__("other", getattr(fake, "_inductor")))
other.start(); other.join()
seen["main"] = getattr(fake, "_inductor")
release.set(); holder.join()
assert seen == {"guarded": False, "other": "looked up _inductor", "main": "looked up _inductor",
                "after": "looked up _inductor"}, seen
undo_fake()
assert fake.__dict__["__getattr__"] is lookup
undo()
assert torch.__dict__["__getattr__"] is original
print("ok")
"#;
    let output =
        std::process::Command::new(torch_python()).arg("-c").arg(code).arg(&shim).output().expect("python runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "ok", "{stderr}");
}
