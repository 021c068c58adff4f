//! Import and `.vtrace` benchmarks, side by side with the reference, in one run.
//!
//! ```text
//! cargo bench -p vramscope --bench import -- [SNAPSHOT.pickle ...]
//! ```
//!
//! For each snapshot: the best of several runs of our importer against the best of several runs
//! of Python's `pickle.loads` of the same bytes (timed inside Python, so interpreter start-up is
//! not counted), `vramscope info --json` of the file (the whole process of the release binary,
//! timed from outside) against a fresh Python's `pickle.load`, and the size of the `.vtrace` it
//! converts to. Then a synthetic trace of 10M
//! events is written and read back, to time the `.vtrace` reader on one core. Without
//! arguments, the shared fixtures are used.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use vramscope_trace_format::{Event, EventKind, NoProgress, StackId, Trace, import, vtrace};

const RUNS: usize = 5;

fn best_of<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut best = Duration::MAX;
    let mut last = None;
    for _ in 0..runs {
        let started = Instant::now();
        let value = f();
        best = best.min(started.elapsed());
        last = Some(value);
    }
    match last {
        Some(value) => (best, value),
        None => (best, f()),
    }
}

fn python_pickle_seconds(path: &Path, runs: usize) -> Option<f64> {
    let code = "import pickle, sys, time\n\
                data = open(sys.argv[1], 'rb').read()\n\
                best = float('inf')\n\
                for _ in range(int(sys.argv[2])):\n\
                \x20   t = time.perf_counter(); obj = pickle.loads(data); best = min(best, time.perf_counter() - t); del obj\n\
                print(best)\n";
    let python = std::env::var("VRAMSCOPE_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let output = Command::new(python).arg("-c").arg(code).arg(path).arg(runs.to_string()).output().ok()?;
    String::from_utf8_lossy(&output.stdout).trim().parse().ok()
}

fn bench_snapshot(path: &Path) {
    let Ok(data) = std::fs::read(path) else {
        eprintln!("skipping {}: cannot read it", path.display());
        return;
    };
    // Small files are timed many times: the best of many runs is stable on a noisy machine.
    let runs = if data.len() > 50 << 20 { 3 } else { (RUNS * (20 << 20) / data.len().max(1)).clamp(RUNS, 200) };
    let (ours, imported) = best_of(runs, || import(&data, &NoProgress));
    let imported = match imported {
        Ok(imported) => imported,
        Err(e) => {
            eprintln!("skipping {}: {e}", path.display());
            return;
        }
    };
    let entries = imported.trace.events.len();
    let vtrace_bytes = vtrace::write(&imported.trace, Vec::new()).map(|v| v.len()).unwrap_or(0);
    let python = if std::env::args().any(|a| a == "--no-python") { None } else { python_pickle_seconds(path, runs) };
    let name = path.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let ratio = python.map_or_else(|| "n/a".to_owned(), |p| format!("{:.1}x", p / ours.as_secs_f64()));
    let (cold_ours, cold_python) = if python.is_some() { cold(path, 5) } else { (None, None) };
    let cold_ratio = match (cold_ours, cold_python) {
        (Some(o), Some(p)) => format!("{:.1} ms / {:.1} ms = {:.1}x", o, p, p / o),
        _ => "n/a".to_owned(),
    };
    let info = if python.is_some() { info_json(path, 5) } else { None };
    let info_ratio = match (info, cold_python) {
        (Some((ms, json_bytes)), Some(p)) => {
            format!("{ms:.1} ms ({:.1} KB of JSON) / {p:.1} ms = {:.1}x", json_bytes as f64 / 1e3, p / ms)
        }
        _ => "n/a".to_owned(),
    };
    println!(
        "| {name} | {:.1} MB | {} | {:.2} ms | {} | {ratio} | {cold_ratio} | {info_ratio} | {:.2} MB ({:.1}%) |",
        data.len() as f64 / 1e6,
        entries,
        ours.as_secs_f64() * 1e3,
        python.map_or_else(|| "n/a".to_owned(), |p| format!("{:.2} ms", p * 1e3)),
        vtrace_bytes as f64 / 1e6,
        100.0 * vtrace_bytes as f64 / data.len() as f64,
    );
}

/// A synthetic trace shaped like an allocator's: allocs and frees over a few thousand stacks.
fn synthetic_trace(events: usize) -> Trace {
    let mut trace = Trace::default();
    let file = trace.interner.string("model.py");
    let mut stacks = Vec::new();
    for i in 0..4000u32 {
        let function = trace.interner.string(&format!("layer_{i}"));
        let frame = trace.interner.frame(vramscope_trace_format::Frame { function, file, line: i });
        stacks.push(trace.interner.stack(&[frame]));
    }
    let mut live: Vec<(u64, u64)> = Vec::new();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut time_ns = 1_700_000_000_000_000_000i64;
    let mut next_address = 0x7f00_0000_0000u64;
    while trace.events.len() < events {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        time_ns += (state % 5_000) as i64;
        if live.len() > 2_000 || (!live.is_empty() && state.is_multiple_of(3)) {
            let (address, size) = live.swap_remove((state >> 20) as usize % live.len());
            trace.events.push(Event::new(EventKind::FreeCompleted, time_ns, 0, address, size));
        } else {
            let size = 512 * (1 + (state >> 40) % 8192);
            let mut e = Event::new(EventKind::Alloc, time_ns, 0, next_address, size);
            e.stack = stacks.get((state >> 8) as usize % stacks.len()).copied().unwrap_or(StackId(0));
            next_address += size;
            live.push((e.address, size));
            trace.events.push(e);
        }
    }
    trace
}

fn bench_vtrace_read() {
    let events = 10_000_000;
    let trace = synthetic_trace(events);
    let Ok(bytes) = vtrace::write(&trace, Vec::new()) else { return };
    let (read, loaded) = best_of(RUNS, || vtrace::read(&bytes, &NoProgress));
    let ok = loaded.map(|l| l.trace.events.len() == events).unwrap_or(false);
    println!(
        "\n.vtrace read, {events} events, {:.1} MB on disk ({:.2} bytes/event): best of {RUNS} {:.0} ms on one core ({:.1} M events/s){}",
        bytes.len() as f64 / 1e6,
        bytes.len() as f64 / events as f64,
        read.as_secs_f64() * 1e3,
        events as f64 / read.as_secs_f64() / 1e6,
        if ok { "" } else { " (READ FAILED)" }
    );
}

/// Times one read and import of `path` in this fresh process, the way a user's single
/// `vramscope` run meets it (page faults, cold allocator), and prints the milliseconds.
fn cold_child(path: &Path) {
    let started = Instant::now();
    let ok = std::fs::read(path).ok().map(|data| import(&data, &NoProgress).is_ok());
    println!("{}", if ok == Some(true) { started.elapsed().as_secs_f64() * 1e3 } else { f64::NAN });
}

/// Best of `runs` runs of the `vramscope` binary beside this bench (`target/release`):
/// `info --json FILE`, its whole process timed from outside, and the bytes it printed.
fn info_json(path: &Path, runs: usize) -> Option<(f64, usize)> {
    let exe = std::env::current_exe().ok()?;
    let bin = exe.parent()?.parent()?.join(format!("vramscope{}", std::env::consts::EXE_SUFFIX));
    if !bin.exists() {
        eprintln!("no {}: run `cargo build --release -p vramscope` for the info --json column", bin.display());
        return None;
    }
    (0..runs)
        .filter_map(|_| {
            let started = Instant::now();
            let out = Command::new(&bin).arg("info").arg("--json").arg(path).output().ok()?;
            let ms = started.elapsed().as_secs_f64() * 1e3;
            out.status.success().then_some((ms, out.stdout.len()))
        })
        .reduce(|a, b| if b.0 < a.0 { b } else { a })
}

/// Best of `runs` fresh processes: ours (this binary re-run in child mode) and Python's.
fn cold(path: &Path, runs: usize) -> (Option<f64>, Option<f64>) {
    let ours = (0..runs)
        .filter_map(|_| {
            let exe = std::env::current_exe().ok()?;
            let out = Command::new(exe).env("VRAMSCOPE_BENCH_COLD", path).output().ok()?;
            String::from_utf8_lossy(&out.stdout).trim().parse::<f64>().ok().filter(|v| v.is_finite())
        })
        .reduce(f64::min);
    let code = "import pickle, sys, time\n\
                t = time.perf_counter()\n\
                with open(sys.argv[1], 'rb') as f: obj = pickle.load(f)\n\
                print((time.perf_counter() - t) * 1e3)\n";
    let python = std::env::var("VRAMSCOPE_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let theirs = (0..runs)
        .filter_map(|_| {
            let out = Command::new(&python).arg("-c").arg(code).arg(path).output().ok()?;
            String::from_utf8_lossy(&out.stdout).trim().parse::<f64>().ok()
        })
        .reduce(f64::min);
    (ours, theirs)
}

fn main() {
    if let Some(path) = std::env::var_os("VRAMSCOPE_BENCH_COLD") {
        cold_child(Path::new(&path));
        return;
    }
    let args: Vec<PathBuf> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).map(PathBuf::from).collect();
    let files = if args.is_empty() {
        let dir = (std::env::var_os("CARGO_MANIFEST_DIR")
            .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from))
        .join("../../shared/fixtures/pytorch-snapshots");
        let mut files: Vec<PathBuf> =
            std::fs::read_dir(dir).map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect()).unwrap_or_default();
        files.sort();
        files
    } else {
        args
    };
    println!(
        "| snapshot | size | entries | vramscope import (warm, best of N) | Python pickle.loads (warm, best of N) | speed-up | fresh process: vramscope / Python pickle.load, best of 5 | `vramscope info --json` (whole process) / Python pickle.load, best of 5 | .vtrace size |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for file in &files {
        bench_snapshot(file);
    }
    if !std::env::args().any(|a| a == "--no-vtrace") {
        bench_vtrace_read();
    }
}
