//! `vramscope record -- CMD ARGS...`: a thin front over `vramscope_collector::session`. It checks
//! the output before anything runs, records, writes the trace (and one per rank of a distributed
//! run), and says what it got.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Result, bail};
use vramscope_collector::session;

use crate::query::peak;
use crate::units::{bytes, count};

/// Where a recording is watched as it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Watch {
    /// Nowhere (`vramscope open --follow` or `top` can attach).
    None,
    /// In the desktop app (`--live`).
    Window,
    /// In this terminal (`--tui`).
    Terminal,
}

/// Reads `--flight`'s bounds: a size (`256MiB`) for each process's ring, or a duration (`10min`,
/// `90s`, `2h`) it should reach back, within the default size.
pub fn parse_flight(text: &str) -> std::result::Result<session::Flight, String> {
    let split = text.find(|c: char| c.is_alphabetic()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let seconds = match unit {
        "s" => Some(1.0),
        "min" | "m" => Some(60.0),
        "h" => Some(3600.0),
        _ => None,
    };
    if let Some(scale) = seconds {
        let value: f64 =
            number.parse().map_err(|_| format!("--flight={text}: give a size (256MiB) or a duration (10min)"))?;
        if !(value > 0.0 && value * scale <= 7.0 * 86400.0) {
            return Err(format!("--flight={text}: a duration from a second to a week"));
        }
        let default = vramscope_collector::wire::env::FLIGHT_DEFAULT_BYTES;
        return Ok(session::Flight { bytes: default, span: Some(std::time::Duration::from_secs_f64(value * scale)) });
    }
    let bytes = crate::cli::advise::parse_bytes(text).map_err(|e| format!("--flight={text}: {e}"))?;
    if !(64 << 10..=64 << 30).contains(&bytes) {
        return Err(format!("--flight={text}: each process's ring takes from 64KiB to 64GiB"));
    }
    Ok(session::Flight { bytes, span: None })
}

/// `record --flight=SPEC -o DIR -- CMD`: runs the command under the flight recorder; returns its
/// exit code. The directory is made (an existing one that is not empty is kept unless `force`).
pub fn run_flight(output: Option<&Path>, force: bool, spec: &str, command: &[OsString]) -> Result<i32> {
    let bounds = parse_flight(spec).map_err(anyhow::Error::msg)?;
    let Some((program, args)) = command.split_first() else {
        bail!("nothing to record: give the command after --, e.g. vramscope record --flight -- python train.py");
    };
    let dir = match output {
        Some(path) => path.to_owned(),
        None => default_output(program, "flight"),
    };
    if dir.exists() && !dir.is_dir() {
        bail!("{} exists and is not a directory: --flight keeps its rings in a directory", dir.display());
    }
    let occupied = std::fs::read_dir(&dir).is_ok_and(|mut entries| entries.next().is_some());
    if occupied && !force {
        bail!("{} is not empty: choose another directory, or --force to add to it", dir.display());
    }
    eprintln!(
        "vramscope: flight recorder on, each process's last {} in {}",
        match bounds.span {
            Some(span) =>
                format!("{} (within {})", crate::units::duration_ns(span.as_nanos() as i64), bytes(bounds.bytes)),
            None => bytes(bounds.bytes),
        },
        dir.display()
    );
    let status = session::flight(program, args, &dir, bounds)?;
    let rings = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_str().is_some_and(vramscope_collector::flight::is_ring))
                .count()
        })
        .unwrap_or(0);
    eprintln!(
        "vramscope: {} kept in {}; open it with `vramscope {}`",
        count_rings(rings),
        dir.display(),
        dir.display()
    );
    Ok(session::exit_code(status))
}

fn count_rings(n: usize) -> String {
    match n {
        0 => "no process called the driver: nothing".to_owned(),
        1 => "1 process's ring".to_owned(),
        n => format!("{n} processes' rings"),
    }
}

/// Where a recording of `program` goes without -o: `PROGRAM-PID.EXTENSION` here.
fn default_output(program: &std::ffi::OsStr, extension: &str) -> PathBuf {
    let name = Path::new(program).file_name().map_or_else(|| "run".into(), |n| n.to_string_lossy().into_owned());
    PathBuf::from(format!("{name}-{}.{extension}", std::process::id()))
}

/// How often the devices are sampled (`--sample-devices`): `None` is off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sampling(pub Option<std::time::Duration>);

/// Reads `--sample-devices`: `off`, or an interval (`100ms`, `1s`, `250us`) from 1 ms to 1 min.
pub fn parse_sampling(text: &str) -> std::result::Result<Sampling, String> {
    if text == "off" {
        return Ok(Sampling(None));
    }
    let split = text.find(|c: char| c.is_alphabetic()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale = match unit {
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        _ => return Err(format!("{text:?}: give an interval such as 100ms or 1s, or off")),
    };
    let seconds = number.parse::<f64>().map(|n| n * scale).map_err(|_| format!("{text:?} is not NUMBER[us|ms|s]"))?;
    if !(0.001..=60.0).contains(&seconds) {
        return Err(format!("{text:?}: sample between every 1ms and every 60s (or off)"));
    }
    Ok(Sampling(Some(std::time::Duration::from_secs_f64(seconds))))
}

/// How to record: where tensor allocations come from (`auto`, `cuda`, `cpu` or `off`), where
/// the run is watched, whether it is served, how often the devices are sampled.
#[derive(Clone, Copy, Debug)]
pub struct How<'a> {
    /// The PyTorch shim's source.
    pub torch: &'a str,
    /// Where the run is watched as it goes.
    pub watch: Watch,
    /// Served on this address.
    pub serve: Option<&'a str>,
    /// NVML's sampling.
    pub sampling: Sampling,
}

/// Runs `command` recorded into `output` as `how` says; returns the workload's exit code.
pub fn run(output: Option<&Path>, force: bool, how: &How<'_>, command: &[OsString]) -> Result<i32> {
    let (torch, watch, serve) = (how.torch, how.watch, how.serve);
    let Some((program, args)) = command.split_first() else {
        bail!("nothing to record: give the command after --, e.g. vramscope record -- python train.py");
    };
    let output = match output {
        Some(path) => path.to_owned(),
        None => default_output(program, "vtrace"),
    };
    // Refuse before running anything, not after the workload has spent an hour: an existing
    // output, a directory, a missing or read-only directory.
    crate::atomic::check_writable(&output, force)?;
    // The port is taken before anything runs, so one in use is said at once.
    let serving = serve.map(Serving::bind).transpose()?.map(Arc::new);
    let job = Job {
        program: program.clone(),
        args: args.to_vec(),
        torch: torch.to_owned(),
        sampling: how.sampling.0,
        output,
        force,
        serving,
    };
    match watch {
        Watch::Window => run_live(job),
        Watch::Terminal => run_in_terminal(job),
        Watch::None => job.record(None, |_| {
            if job.serving.is_none() {
                eprintln!(
                    "vramscope: recording; watch it live with `vramscope open --follow {0}` or `vramscope top {0}`",
                    job.output.display()
                );
            }
        }),
    }
}

/// A recording to make: the command, the shim's source, where the trace goes, and whether it
/// is served to viewers elsewhere as it goes.
struct Job {
    program: OsString,
    args: Vec<OsString>,
    torch: String,
    sampling: Option<std::time::Duration>,
    output: PathBuf,
    force: bool,
    serving: Option<Arc<Serving>>,
}

impl Job {
    /// Records, writes the trace (and one per rank), says what it got; returns the workload's
    /// exit code. `started` is called with the recording's directory before the workload
    /// starts; with `log`, the workload's output goes there. Served, the server starts with the
    /// recording and is told when its trace is written.
    fn record(&self, log: Option<&Path>, started: impl FnOnce(&Path)) -> Result<i32> {
        let serving = self.serving.as_deref();
        let how = session::How { torch: &self.torch, sampling: self.sampling };
        let recorded = session::record(&self.program, &self.args, &how, Some(&self.output), log, |dir| {
            if let Some(serving) = serving {
                serving.start(dir, &self.output);
            }
            started(dir);
        });
        let written = recorded
            .map_err(anyhow::Error::from)
            .and_then(|r| write_recording(&r, &self.torch, &self.output, self.force));
        if let Some(serving) = serving {
            serving.end(written.as_ref().ok().map(|_| self.output.clone()));
        }
        written
    }
}

/// `record --serve`: the recording served to viewers on other machines (`crate::serve`).
struct Serving {
    listener: std::sync::Mutex<Option<std::net::TcpListener>>,
    token: Option<String>,
    finish: Arc<crate::serve::Finish>,
    server: std::sync::Mutex<Option<crate::serve::Server>>,
}

/// How long `record --serve` waits, once the trace is written, for its viewers to have it.
const LINGER: std::time::Duration = std::time::Duration::from_secs(60);

impl Serving {
    fn bind(addr: &str) -> Result<Self> {
        let addr = crate::serve::parse_addr(addr)?;
        let listener = crate::serve::Server::bind(addr)?;
        let token = Some(crate::serve::token_from_env()?);
        Ok(Self {
            listener: std::sync::Mutex::new(Some(listener)),
            token,
            finish: Arc::default(),
            server: std::sync::Mutex::new(None),
        })
    }

    fn start(&self, dir: &Path, output: &Path) {
        let Some(listener) = self.listener.lock().ok().and_then(|mut l| l.take()) else { return };
        let output = std::path::absolute(output).unwrap_or_else(|_| output.to_owned());
        let served = crate::serve::Served::Recording { dir: dir.to_owned(), output: Some(output) };
        match crate::serve::Server::start(listener, served, self.token.clone(), Some(Arc::clone(&self.finish))) {
            Ok(server) => {
                eprintln!("{}", server.how_to_connect("open"));
                if let Ok(mut slot) = self.server.lock() {
                    *slot = Some(server);
                }
            }
            Err(error) => eprintln!("vramscope: not serving the recording: {error:#}"),
        }
    }

    /// The run is over: viewers get its trace (`None`: there is none); waits, up to [`LINGER`],
    /// for those connected to have it.
    fn end(&self, trace: Option<PathBuf>) {
        self.finish.set(trace);
        let Ok(server) = self.server.lock() else { return };
        let Some(server) = server.as_ref() else { return };
        let waiting = std::time::Instant::now();
        let mut said = false;
        while server.viewers() > 0 && waiting.elapsed() < LINGER {
            if !said {
                eprintln!(
                    "vramscope: sending the trace to {} viewer(s) (at most {} s)",
                    server.viewers(),
                    LINGER.as_secs()
                );
                said = true;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

/// `record --tui`: the recording on a thread, the terminal view on this one, following it; the
/// workload's output goes to OUT.log. Leaving the view leaves the workload running.
fn run_in_terminal(job: Job) -> Result<i32> {
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        bail!("--tui draws in a terminal, and this one's input or output is not one: record without it");
    }
    let log = job.output.with_extension("log");
    crate::atomic::check_writable(&log, job.force)
        .map_err(|e| anyhow::anyhow!("the workload's output would go to {}: {e:#}", log.display()))?;
    let (started, ready) = std::sync::mpsc::channel();
    let thread_log = log.clone();
    let recording = std::thread::Builder::new().name("vramscope-record".to_owned()).spawn(move || {
        job.record(Some(&thread_log), move |dir| {
            let _ = started.send(dir.to_owned());
        })
    })?;
    if let Ok(dir) = ready.recv() {
        let interrupt: crate::tui::Interrupt = Box::new(|| vramscope_collector::signals::to_workload(libc::SIGINT));
        if let Err(error) = crate::tui::run(crate::follow::Source::Recording(dir), Some(interrupt)) {
            eprintln!("vramscope: {error:#}; the recording goes on without the view");
        }
        if !recording.is_finished() {
            eprintln!(
                "vramscope: the view was closed; the recording goes on until the workload ends (its output: {})",
                log.display()
            );
        }
    }
    let code = recording.join().map_err(|_| anyhow::anyhow!("the recording's thread failed"))?;
    eprintln!("vramscope: the workload's output: {}", log.display());
    code
}

/// `record --live`: the recording on a thread, the window on this one, following it. Closing
/// the window leaves the workload running; the trace is written when it ends.
fn run_live(job: Job) -> Result<i32> {
    if std::env::var_os("DISPLAY").is_none() && std::env::var_os("WAYLAND_DISPLAY").is_none() {
        bail!(
            "--live needs a display (neither DISPLAY nor WAYLAND_DISPLAY is set): record without it, or watch the \
             recording from a session with one: `vramscope open --follow {}`",
            job.output.display()
        );
    }
    let (started, ready) = std::sync::mpsc::channel();
    let recording = std::thread::Builder::new().name("vramscope-record".to_owned()).spawn(move || {
        job.record(None, move |dir| {
            let _ = started.send(dir.to_owned());
        })
    })?;
    // Nothing comes when the recording could not start: its error is below.
    if let Ok(dir) = ready.recv() {
        let options = crate::gui::GuiOptions {
            follow: Some(crate::gui::follow::Source::Recording(dir)),
            ..crate::gui::GuiOptions::default()
        };
        if let Err(error) = crate::gui::run(options) {
            eprintln!("vramscope: {error:#}; the recording goes on without the window");
        }
        if !recording.is_finished() {
            eprintln!("vramscope: the window was closed; the recording goes on until the workload ends");
        }
    }
    recording.join().map_err(|_| anyhow::anyhow!("the recording's thread failed"))?
}

/// Writes a finished recording to `output` (and each rank's part beside it) and says what it
/// holds; returns the workload's exit code.
pub fn write_recording(recording: &session::Recording, torch: &str, output: &Path, force: bool) -> Result<i32> {
    for note in &recording.notes {
        eprintln!("vramscope: {note}");
    }
    let trace = &recording.trace;
    crate::vtrace_out::write_vtrace(trace, output, force)?;
    // A distributed run: also one trace per rank, beside the merged one.
    let ranked: Vec<(usize, u32)> =
        trace.metadata.processes.iter().enumerate().filter_map(|(i, p)| p.rank.map(|r| (i, r))).collect();
    if ranked.len() > 1 {
        let stem = output.file_stem().map_or_else(|| "trace".into(), |s| s.to_string_lossy().into_owned());
        for (index, rank) in ranked {
            let path = output.with_file_name(format!("{stem}.rank{rank}.vtrace"));
            let part = trace.of_process(vramscope_trace_format::ProcessId(index as u32));
            match crate::vtrace_out::write_vtrace(&part, &path, force) {
                Ok(_) => eprintln!("vramscope: rank {rank}: {}", path.display()),
                Err(error) => eprintln!("vramscope: rank {rank} not written separately: {error:#}"),
            }
        }
    }
    let processes = trace.metadata.recorded_processes();
    // Each process's own peak (two ranks' host memory is not one device's): the highest.
    let highest = |t: &vramscope_trace_format::Trace| {
        t.devices().into_iter().map(|d| peak::peaks(t, d).reserved.bytes).max().unwrap_or(0)
    };
    let peak = if processes > 1 {
        (0..processes)
            .map(|i| highest(&trace.of_process(vramscope_trace_format::ProcessId(i as u32))))
            .max()
            .unwrap_or(0)
    } else {
        highest(trace)
    };
    if torch == "cuda" && !trace.events.iter().any(|e| e.device.0 >= 0) {
        eprintln!(
            "vramscope: warning: --torch cuda recorded no GPU memory: the workload allocated none on a CUDA device \
             (is CUDA available to it? torch.cuda.is_available() is False without a GPU and its driver); \
             --torch cpu records its host memory"
        );
    }
    let in_process = processes > 0 && trace.metadata.processes.iter().all(|p| p.in_process);
    eprintln!(
        "vramscope: {} from {} process{}, peak reserved {}{}, {} OOM{}; trace: {}",
        if in_process {
            format!("{} PyTorch events recorded inside the program", count(recording.torch_events))
        } else if recording.torch_events > 0 {
            format!(
                "{} driver events and {} PyTorch events",
                count(recording.driver_records),
                count(recording.torch_events)
            )
        } else {
            format!("{} driver events", count(recording.driver_records))
        },
        processes,
        if processes == 1 { "" } else { "es" },
        bytes(peak),
        if processes > 1 { " (the highest process's)" } else { "" },
        trace.ooms.len(),
        if trace.ooms.len() == 1 { "" } else { "s" },
        output.display()
    );
    Ok(session::exit_code(recording.status))
}
