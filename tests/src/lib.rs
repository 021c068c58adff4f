//! Helpers for the end-to-end tests in `tests/tests/`: where the built binary, the shared
//! fixtures and the Python reference are, and how to run them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root, found at run time (cargo sets `CARGO_MANIFEST_DIR` for tests): a target
/// directory shared between clones can hold a test binary built in another clone, whose
/// compile-time path would point there.
pub fn repo_root() -> PathBuf {
    (std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// `../shared/fixtures` beside the repository root.
pub fn fixtures_dir() -> PathBuf {
    repo_root().join("../shared/fixtures")
}

/// Every fixture file, sorted.
pub fn all_fixtures() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in ["pytorch-snapshots", "torch-profiler"] {
        let Ok(entries) = std::fs::read_dir(fixtures_dir().join(dir)) else { continue };
        files.extend(entries.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.is_file()));
    }
    files.sort();
    assert!(
        !files.is_empty(),
        "no fixtures in {}: the tests read ../shared/fixtures beside the repository",
        fixtures_dir().display()
    );
    files
}

/// Newest modification time of the file at `path`, or of the files under it (Python's byte
/// code caches left out: importing the shim writes them, after any build).
fn newest_source(path: &Path) -> Option<std::time::SystemTime> {
    if path.is_file() {
        return std::fs::metadata(path).and_then(|m| m.modified()).ok();
    }
    let mut newest = None;
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "__pycache__") {
                    stack.push(path);
                }
            } else if path.extension().is_none_or(|e| e != "pyc")
                && let Ok(modified) = entry.metadata().and_then(|m| m.modified())
            {
                newest = newest.max(Some(modified));
            }
        }
    }
    newest
}

/// The `vramscope` binary: `VRAMSCOPE_BIN`, or the one built beside this test binary.
///
/// `cargo test` does not rebuild another package's binary, so `scripts/check.sh` builds the
/// workspace (binaries and the hook library) first; a binary older than the sources is refused
/// rather than tested.
pub fn vramscope_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("VRAMSCOPE_BIN") {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    // target/<profile>/deps/<test> -> target/<profile>/vramscope
    let profile_dir = exe.parent().and_then(Path::parent).map(Path::to_path_buf).unwrap_or_default();
    let bin = profile_dir.join(format!("vramscope{}", std::env::consts::EXE_SUFFIX));
    assert!(bin.exists(), "{} is missing: run `cargo build --workspace` first", bin.display());
    let hook = profile_dir.join("libvramscope_hook.so");
    for (built, sources) in [
        // Every source the binary is built from or embeds: the crates, the PyTorch shim, the
        // built-in sample, the hook and emulation libraries it carries.
        (
            &bin,
            &[
                "app/src",
                "analysis/src",
                "trace-format/src",
                "collector/src",
                "collector/wire/src",
                "collector/hook/src",
                "collector/emulate/src",
                "python/vramscope/_shim",
                "samples/traces/h200-torch-plain.vtrace",
            ][..],
        ),
        (&hook, &["collector/wire/src", "collector/hook/src"][..]),
    ] {
        let modified = std::fs::metadata(built).and_then(|m| m.modified()).ok();
        let newest = sources.iter().filter_map(|d| newest_source(&repo_root().join(d))).max();
        assert!(
            modified >= newest,
            "{} is older than its sources: run `cargo build --workspace` first",
            built.display()
        );
    }
    bin
}

/// The environment variable under which `vramscope` holds every trace it reads to the
/// invariants (`query::invariants`) and reads back every `.vtrace` it writes.
pub const SELF_CHECK: &str = "VRAMSCOPE_SELF_CHECK";

/// A command that runs `vramscope` with [`SELF_CHECK`] on: every file the suite opens through
/// it is held to the invariants.
pub fn vramscope_command() -> Command {
    let mut command = Command::new(vramscope_bin());
    command.env(SELF_CHECK, "1");
    command
}

/// Runs `vramscope` with arguments (with [`SELF_CHECK`] on).
pub fn vramscope(args: &[&std::ffi::OsStr]) -> Output {
    match vramscope_command().args(args).output() {
        Ok(output) => output,
        Err(e) => panic!("cannot run vramscope: {e}"),
    }
}

/// The Python interpreter tests use (`VRAMSCOPE_PYTHON` or `python3`).
pub fn python() -> String {
    std::env::var("VRAMSCOPE_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// A Python with PyTorch: `VRAMSCOPE_TORCH_PYTHON` (set by `scripts/check.sh`), else the venv that
/// `scripts/install-torch.sh` makes (it is run, once per test process; it reuses a finished venv).
pub fn torch_python() -> PathBuf {
    static PYTHON: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PYTHON
        .get_or_init(|| {
            if let Some(python) = std::env::var_os("VRAMSCOPE_TORCH_PYTHON").filter(|p| !p.is_empty()) {
                return PathBuf::from(python);
            }
            let script = repo_root().join("scripts/install-torch.sh");
            let output = match Command::new(&script).output() {
                Ok(output) => output,
                Err(e) => panic!("cannot run {}: {e}", script.display()),
            };
            assert!(
                output.status.success(),
                "{} failed:\n{}",
                script.display(),
                String::from_utf8_lossy(&output.stderr)
            );
            let stdout = String::from_utf8_lossy(&output.stdout);
            PathBuf::from(stdout.lines().last().unwrap_or_default().trim())
        })
        .clone()
}

/// `vramscope record -o TRACE -- PROGRAM`, ready for the program's arguments.
pub fn record_command(trace: &Path, program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = vramscope_command();
    command.args(["record", "-o"]).arg(trace).arg("--").arg(program);
    command
}

/// [`record_command`] for `samples/pytorch/train.py --device cpu` with the PyTorch venv.
pub fn record_train_command(trace: &Path) -> Command {
    let mut command = record_command(trace, torch_python());
    command.arg(repo_root().join("samples/pytorch/train.py")).args(["--device", "cpu"]);
    command
}

/// Runs a Python script file with arguments and returns its stdout; panics with stderr on failure.
pub fn run_python(script: &Path, args: &[&std::ffi::OsStr]) -> String {
    let output = match Command::new(python()).arg(script).args(args).output() {
        Ok(output) => output,
        Err(e) => panic!("cannot run {}: {e}", python()),
    };
    assert!(output.status.success(), "{} failed:\n{}", script.display(), String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Runs inline Python code with arguments; panics with stderr on failure.
pub fn run_python_code(code: &str, args: &[&std::ffi::OsStr]) -> String {
    let output = match Command::new(python()).arg("-c").arg(code).args(args).output() {
        Ok(output) => output,
        Err(e) => panic!("cannot run {}: {e}", python()),
    };
    assert!(output.status.success(), "python failed:\n{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The per-device keys of `info --json` that the reference gives for a snapshot, whatever its
/// vintage (times and categories aside).
pub const SNAPSHOT_REFERENCE_KEYS: [&str; 12] = [
    "segments",
    "reserved_bytes",
    "allocated_bytes",
    "awaiting_free_bytes",
    "active_bytes",
    "peak_active_bytes",
    "requested_bytes",
    "free_internal_bytes",
    "free_external_bytes",
    "peak_allocated_bytes",
    "peak_requested_bytes",
    "peak_reserved_bytes",
];

/// The independent reference's JSON for a file (`scripts/reference/snapshot_reference.py`).
pub fn reference(file: &Path) -> serde_json::Value {
    let script = repo_root().join("scripts/reference/snapshot_reference.py");
    let text = run_python(&script, &[file.as_os_str()]);
    match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => panic!("reference output is not JSON ({e}): {text}"),
    }
}

/// The reference's JSON for a snapshot with its peaks over the part of each device's trace from
/// `from_us` to `to_us` after its first entry (`range_peak_requested_bytes`, ...).
pub fn reference_in_range(file: &Path, from_us: i64, to_us: i64) -> serde_json::Value {
    let script = repo_root().join("scripts/reference/snapshot_reference.py");
    let (from, to) = (from_us.to_string(), to_us.to_string());
    let text = run_python(&script, &[file.as_os_str(), "--range-us".as_ref(), from.as_ref(), to.as_ref()]);
    match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => panic!("reference output is not JSON ({e}): {text}"),
    }
}

/// `vramscope info --json FILE`, parsed; panics if the command fails, or if any device's peak is
/// below the state the trace ends in (checked on every file the suite opens this way).
pub fn info_json(file: &Path) -> serde_json::Value {
    info_json_with(file, &[])
}

/// [`info_json`] with more arguments (`--blocks 5`, `--at forward`).
pub fn info_json_with(file: &Path, args: &[&str]) -> serde_json::Value {
    let mut all: Vec<&std::ffi::OsStr> = vec!["info".as_ref(), "--json".as_ref()];
    all.extend(args.iter().map(|a| std::ffi::OsStr::new(*a)));
    all.push(file.as_os_str());
    let output = vramscope(&all);
    assert!(
        output.status.success(),
        "vramscope info {} failed:\n{}",
        file.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let json: serde_json::Value = match serde_json::from_slice(&output.stdout) {
        Ok(v) => v,
        Err(e) => panic!("info output is not JSON ({e})"),
    };
    assert_peaks_cover_the_end(file, &json);
    json
}

/// A peak can never be below the state the trace ends in, on any device, in any format.
pub fn assert_peaks_cover_the_end(file: &Path, info: &serde_json::Value) {
    let devices = info["devices"].as_array().cloned().unwrap_or_default();
    assert!(!devices.is_empty(), "{}: no devices in {info}", file.display());
    for d in devices {
        let get = |key: &str| d[key].as_u64().unwrap_or_else(|| panic!("{}: no {key} in {d}", file.display()));
        for (peak, end) in [("peak_allocated_bytes", "allocated_bytes"), ("peak_reserved_bytes", "reserved_bytes")] {
            assert!(
                get(peak) >= get(end),
                "{}: device {}: {peak} {} is below {end} {} at the end",
                file.display(),
                d["label"],
                get(peak),
                get(end)
            );
        }
    }
}

/// How a run of `vramscope` went, measured from outside.
#[derive(Debug)]
pub struct Measured {
    /// Its exit status (`None`: killed by a signal).
    pub code: Option<i32>,
    /// What it wrote to stderr.
    pub stderr: String,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// Peak resident memory in KiB (getrusage of the child).
    pub peak_kib: u64,
}

/// The address space [`measured`] runs `vramscope` in (`ulimit -v`): what a small machine or a
/// job scheduler gives, so that memory the input would take past it is refused cleanly, never an
/// abort of the allocator.
pub const MEASURED_ADDRESS_SPACE_BYTES: u64 = 4 << 30;

/// Runs `vramscope` with arguments under a Python parent that reads the child's peak resident
/// memory (`getrusage(RUSAGE_CHILDREN)`), with its stdout discarded and its address space limited
/// to [`MEASURED_ADDRESS_SPACE_BYTES`].
pub fn measured(args: &[&std::ffi::OsStr]) -> Measured {
    measured_with(args, &[])
}

/// [`measured`] with environment variables set for `vramscope`.
pub fn measured_with(args: &[&std::ffi::OsStr], env: &[(String, String)]) -> Measured {
    const CODE: &str = "import json, resource, subprocess, sys, time\n\
        limit = int(sys.argv[2])\n\
        t = time.monotonic()\n\
        r = subprocess.run(sys.argv[3:], stdout=subprocess.DEVNULL, stderr=open(sys.argv[1], 'wb'),\n\
                           preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))\n\
        print(json.dumps({'code': r.returncode, 'seconds': time.monotonic() - t,\n\
                          'peak_kib': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))";
    let dir = std::env::temp_dir().join(format!("vramscope-measured-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let err_path = dir.join(format!("{}.stderr", NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
    let output = match Command::new(python())
        .arg("-c")
        .arg(CODE)
        .arg(&err_path)
        .arg(MEASURED_ADDRESS_SPACE_BYTES.to_string())
        .arg(vramscope_bin())
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
    {
        Ok(output) => output,
        Err(e) => panic!("cannot run {}: {e}", python()),
    };
    let report: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("no measurement ({e}): {}", String::from_utf8_lossy(&output.stderr)));
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    let _ = std::fs::remove_file(&err_path);
    Measured {
        // A negative return code is Python's way of saying "killed by that signal".
        code: report["code"].as_i64().filter(|&c| c >= 0).and_then(|c| i32::try_from(c).ok()),
        stderr,
        seconds: report["seconds"].as_f64().unwrap_or(f64::MAX),
        peak_kib: report["peak_kib"].as_u64().unwrap_or(u64::MAX),
    }
}

/// A real terminal for the terminal view's tests: a tmux server of its own (its socket in a
/// temporary directory), one 80x24 window.
pub struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    /// Runs `command` (a shell line) in a new 80x24 terminal; the pane stays after it ends, its
    /// exit status printed as `EXIT=N`.
    pub fn start(dir: &Path, command: &str) -> Self {
        let socket = dir.join("tmux.sock");
        let line = format!("{command}; echo EXIT=$?; sleep 600");
        let status = Command::new("tmux")
            .arg("-S")
            .arg(&socket)
            .args(["new-session", "-d", "-x", "80", "-y", "24", "-s", "top"])
            .arg(line)
            .env("TERM", "xterm-256color")
            .status()
            .unwrap_or_else(|e| panic!("tmux does not run ({e}): scripts/install-gui-deps.sh installs it"));
        assert!(status.success());
        Tmux { socket }
    }

    /// Runs a tmux command against this server.
    pub fn tmux(&self, args: &[&str]) -> String {
        let output = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("tmux: {e}"));
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// What the terminal shows now.
    pub fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-t", "top"])
    }

    /// Types `keys` (tmux's key names: `q`, `Enter`, `C-c`).
    pub fn keys(&self, keys: &str) {
        self.tmux(&["send-keys", "-t", "top", keys]);
    }

    /// The screen once `ready` holds of it (polled; panics with the last screen after `within`).
    pub fn wait_for(&self, what: &str, within: std::time::Duration, ready: impl Fn(&str) -> bool) -> String {
        let started = std::time::Instant::now();
        loop {
            let screen = self.screen();
            if ready(&screen) {
                return screen;
            }
            assert!(started.elapsed() < within, "no {what} within {within:?}; the screen:\n{screen}");
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.tmux(&["kill-server"]);
    }
}

/// Bytes as vramscope says them, written here from the definition (binary units, three
/// significant digits: `512 B`, `1.50 KiB`, `20.0 MiB`), not taken from vramscope.
pub fn bytes_said(value: u64) -> String {
    if value < 1024 {
        return format!("{value} B");
    }
    let units = ["KiB", "MiB", "GiB", "TiB"];
    let mut scaled = value as f64 / 1024.0;
    let mut unit = 0;
    while scaled >= 1024.0 && unit + 1 < units.len() {
        scaled /= 1024.0;
        unit += 1;
    }
    let digits = if scaled >= 100.0 {
        0
    } else if scaled >= 10.0 {
        1
    } else {
        2
    };
    format!("{scaled:.digits$} {}", units[unit])
}
