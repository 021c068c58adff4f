//! The flight recorder's cost on a training step, side by side with the same step without it, in
//! one run.
//!
//! ```text
//! VRAMSCOPE_TORCH_PYTHON=/path/to/venv/bin/python cargo bench -p vramscope-hook --bench flight_step
//! ```
//!
//! The step is `tests/workloads/flight_step.py`: a model trained on the host with PyTorch (about
//! 55 ms a step here, as long as a step of the sample GPT on an H200) and 1,800 driver calls, the
//! most a step of that size makes on a GPU (every tensor a driver allocation, as under
//! `backend:cudaMallocAsync`), through the fake driver. Sixteen rounds alternate the two ways
//! (without the hook; with the hook keeping a flight recorder's ring of 64 MiB) in the order
//! A B, B A, …, a process of 20 steps after warm-up each; each way's median (of its processes'
//! median steps) is compared, and the spread between processes (interquartile, of the median)
//! said beside it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Processes run each way.
const ROUNDS: usize = 16;

fn steps(python: &Path, hook: Option<&Path>, flight: &Path) -> Vec<f64> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/workloads/flight_step.py");
    let mut command = Command::new(python);
    command.arg(script).args(["--steps", "20", "--calls", "1800"]);
    command.env("LD_LIBRARY_PATH", vramscope_fake_cuda::lib_dir());
    if let Some(hook) = hook {
        command.env("LD_PRELOAD", hook).env(vramscope_wire::env::FLIGHT, flight);
    }
    let output = command.output().unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    assert!(output.status.success(), "the step failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).lines().filter_map(|l| l.trim().parse().ok()).collect()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() {
    let Some(python) = std::env::var_os("VRAMSCOPE_TORCH_PYTHON").map(PathBuf::from) else {
        eprintln!("set VRAMSCOPE_TORCH_PYTHON to a Python with PyTorch (scripts/install-torch.sh makes one)");
        std::process::exit(2);
    };
    let exe = std::env::current_exe().unwrap_or_default();
    let hook = exe.parent().map(|d| d.join("libvramscope_hook.so")).unwrap_or_default();
    assert!(hook.exists(), "{} is missing: build the hook crate in this profile first", hook.display());
    let dir = std::env::temp_dir().join(format!("vramscope-flight-step-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let (mut without, mut with) = (Vec::new(), Vec::new());
    // A B B A ...: a drift of the machine's speed over the run falls on both alike. A process's
    // speed varies from one start to the next by more than the effect measured (a few percent
    // here: where its memory lands, the other processes): each process gives its median step,
    // and each way the median of its processes'.
    for round in 0..ROUNDS {
        if round % 2 == 0 {
            without.push(median(steps(&python, None, &dir)));
            with.push(median(steps(&python, Some(&hook), &dir)));
        } else {
            with.push(median(steps(&python, Some(&hook), &dir)));
            without.push(median(steps(&python, None, &dir)));
        }
    }
    let spread = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        let (low, high) = (v[v.len() / 4], v[v.len() * 3 / 4]);
        100.0 * (high - low) / median(v)
    };
    let (spread_a, spread_b) = (spread(&without), spread(&with));
    // The largest ring: its size, and what it takes on disk (the file is sparse until written).
    let (ring_bytes, on_disk) = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok())
                .map(|m| (m.len(), std::os::unix::fs::MetadataExt::blocks(&m) * 512))
                .max()
                .unwrap_or((0, 0))
        })
        .unwrap_or((0, 0));
    let _ = std::fs::remove_dir_all(&dir);
    let (a, b) = (median(without), median(with));
    println!("| training step (median of {ROUNDS} processes' medians) | ms | | spread between processes |");
    println!("|---|---|---|---|");
    println!("| without the hook | {:.2} | | {spread_a:.1}% |", a * 1e3);
    println!("| flight recorder on | {:.2} | {:+.2}% | {spread_b:.1}% |", b * 1e3, 100.0 * (b - a) / a);
    println!("(the largest ring: {ring_bytes} bytes, {on_disk} of them on disk)");
}
