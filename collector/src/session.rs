//! One recording, start to end: the workload started with the hook library preloaded and the
//! PyTorch shim first on `PYTHONPATH`, signals handled as `env` or `time` would, and what both
//! wrote merged into one trace with the driver's account of the devices. `vramscope record` is a
//! thin front over [`record`]: it checks its output, writes the trace and says what it got.

use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::process::{Command, ExitStatus};

use vramscope_trace_format::{DeviceInfo, Trace};
use vramscope_wire::env;

pub use crate::error::Error;
use crate::error::io;
use crate::{live, merge, signals, torch};

/// A finished recording.
#[derive(Debug)]
pub struct Recording {
    /// Everything recorded, merged.
    pub trace: Trace,
    /// How the workload ended.
    pub status: ExitStatus,
    /// Driver-level records read.
    pub driver_records: usize,
    /// Lines of the PyTorch shim's logs read.
    pub torch_events: usize,
    /// Things to tell the user (files cut short, unreadable log lines).
    pub notes: Vec<String>,
}

/// `value` prepended to what the environment already has for `name`, `:`-separated.
fn prepend(name: &str, value: &OsStr) -> OsString {
    let mut joined = value.to_os_string();
    if let Some(existing) = std::env::var_os(name).filter(|p| !p.is_empty()) {
        joined.push(":");
        joined.push(existing);
    }
    joined
}

/// How a recording is made.
#[derive(Clone, Copy, Debug)]
pub struct How<'a> {
    /// Where the PyTorch shim takes tensor allocations from: `auto`, `cuda`, `cpu` or `off`.
    pub torch: &'a str,
    /// How often NVML is asked what each device holds, for every process on it (`None`: never).
    pub sampling: Option<std::time::Duration>,
}

/// Runs `program` with `args` recorded as `how` says, and returns what was recorded. `output` (where the caller
/// will write the trace) goes into the recording's manifest, for viewers that follow it live;
/// `started` is called with the recording's directory once it is ready, just before the
/// workload starts. With `log`, the workload's standard output and error go to that file (a
/// terminal view has the terminal) and its standard input is empty.
pub fn record(
    program: &OsStr,
    args: &[OsString],
    how: &How<'_>,
    output: Option<&Path>,
    log: Option<&Path>,
    started: impl FnOnce(&Path),
) -> Result<Recording, Error> {
    run(program, args, how, None, output, log, started)
}

/// The GPU an estimate runs its program on.
#[derive(Clone, Debug)]
pub struct Emulated {
    /// What the PyTorch shim's emulation is told (`VRAMSCOPE_EMULATE`): JSON with the name,
    /// total memory, compute capability and count.
    pub spec: String,
    /// How many of them the program sees.
    pub count: u32,
    /// The devices, as the trace's metadata names them.
    pub facts: Vec<DeviceInfo>,
    /// The program's standard output goes to our standard error (ours carries a document, or a
    /// protocol).
    pub stdout_to_stderr: bool,
    /// The program's standard input is empty (ours carries a protocol).
    pub no_stdin: bool,
}

/// Runs `program` with `args` on the emulated GPU `device` (`vramscope estimate`): tensors without
/// storage, allocated in the PyTorch shim's model of the caching allocator, whose history the shim
/// records as it does a GPU's; returns what was recorded. `log` as for [`record`].
pub fn estimate(
    program: &OsStr,
    args: &[OsString],
    device: &Emulated,
    output: Option<&Path>,
    log: Option<&Path>,
    started: impl FnOnce(&Path),
) -> Result<Recording, Error> {
    run(program, args, &How { torch: "cuda", sampling: None }, Some(device), output, log, started)
}

fn run(
    program: &OsStr,
    args: &[OsString],
    how: &How<'_>,
    emulated: Option<&Emulated>,
    output: Option<&Path>,
    log: Option<&Path>,
    started: impl FnOnce(&Path),
) -> Result<Recording, Error> {
    let dir = tempfile::Builder::new()
        .prefix(if emulated.is_some() { "vramscope-estimate-" } else { "vramscope-record-" })
        .tempdir()
        .map_err(io("cannot create a directory for the recording"))?;
    let dir = dir.path();
    let preload = match emulated {
        None => crate::hook::hook_for(dir)?,
        Some(_) => crate::hook::emulation_for(dir)?,
    };
    // The PyTorch shim: Python finds its sitecustomize first on PYTHONPATH.
    let shim = dir.join("python");
    std::fs::create_dir(&shim).map_err(io("cannot write the PyTorch shim"))?;
    for (name, text) in torch::SHIM_FILES {
        std::fs::write(shim.join(name), text).map_err(io("cannot write the PyTorch shim"))?;
    }
    let command_line = command_line(program, args);
    let manifest = live::Manifest {
        recorder_pid: std::process::id(),
        command: command_line,
        output: output.map(|p| std::path::absolute(p).unwrap_or_else(|_| p.to_owned())),
    };
    manifest.write(dir).map_err(io("cannot write the recording's manifest"))?;
    let mut command = Command::new(program);
    command
        .args(args)
        .env("LD_PRELOAD", prepend("LD_PRELOAD", preload.as_os_str()))
        .env(env::RECORD_DIR, dir)
        .env(env::TORCH, how.torch)
        .env("PYTHONPATH", prepend("PYTHONPATH", shim.as_os_str()));
    if let Some(device) = emulated {
        // The emulation answers as the driver too: the program finds it before any real one.
        let folder = preload.parent().unwrap_or(dir);
        command
            .env(env::EMULATE, &device.spec)
            .env(env::EMULATE_COUNT, device.count.to_string())
            .env("LD_LIBRARY_PATH", prepend("LD_LIBRARY_PATH", folder.as_os_str()));
        if device.stdout_to_stderr && log.is_none() {
            command.stdout(std::io::stderr());
        }
        if device.no_stdin {
            command.stdin(std::process::Stdio::null());
        }
    }
    if let Some(log) = log {
        let file = std::fs::File::create(log).map_err(|source| Error::Io {
            what: format!("cannot write the workload's output to {}", log.display()),
            source,
        })?;
        let errors = file.try_clone().map_err(io("cannot share the workload's output file"))?;
        command.stdin(std::process::Stdio::null()).stdout(file).stderr(errors);
    }
    started(dir);
    let signals = signals::install();
    let spawned = command.spawn();
    let mut child =
        spawned.map_err(|source| Error::Io { what: format!("cannot run {}", Path::new(program).display()), source })?;
    signals.child(child.id());
    let sampler = how.sampling.and_then(|interval| crate::nvml::Sampler::start(dir, interval));
    let status = child.wait().map_err(io("cannot wait for the workload"));
    if let Some(sampler) = sampler {
        sampler.finish();
    }
    drop(signals);
    let facts = emulated.map_or_else(crate::devices::device_facts, |device| (device.facts.clone(), None));
    collect(dir, status?, program, args, &facts)
}

/// A flight recorder's bounds for each process: its ring's bytes, and the time it should span at
/// least (segments begin at least that often over its length).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flight {
    /// Bytes of each process's ring.
    pub bytes: u64,
    /// The time a ring should span, when asked for.
    pub span: Option<std::time::Duration>,
}

/// Runs `program` with `args` under the flight recorder (`record --flight`): the hook preloaded,
/// keeping each process's driver calls in a ring of fixed size in `dir` (made if missing), which
/// stays there however the program ends; no PyTorch shim (its log would grow with the run).
/// Returns how the program ended.
pub fn flight(program: &OsStr, args: &[OsString], dir: &Path, bounds: Flight) -> Result<ExitStatus, Error> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        what: format!("cannot make the flight recorder's directory {}", dir.display()),
        source,
    })?;
    let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_owned());
    // The hook's own folder: the flight recorder's directory holds rings only.
    let folder = tempfile::Builder::new()
        .prefix("vramscope-flight-")
        .tempdir()
        .map_err(io("cannot create a folder for the hook library"))?;
    let preload = crate::hook::hook_for(folder.path())?;
    let manifest =
        live::Manifest { recorder_pid: std::process::id(), command: command_line(program, args), output: None };
    manifest.write(&dir).map_err(io("cannot write the flight recorder's manifest"))?;
    let mut command = Command::new(program);
    command
        .args(args)
        .env("LD_PRELOAD", prepend("LD_PRELOAD", preload.as_os_str()))
        .env(env::FLIGHT, &dir)
        .env(env::FLIGHT_BYTES, bounds.bytes.to_string())
        .env_remove(env::RECORD_DIR);
    match bounds.span {
        Some(span) => command.env(env::FLIGHT_SPAN_NS, span.as_nanos().to_string()),
        None => command.env_remove(env::FLIGHT_SPAN_NS),
    };
    run_to_end(&mut command, program)
}

/// Runs `program` with `args` with only the out-of-memory capture armed (`vramscope run`): no
/// hook library and no recording, the PyTorch shim first on `PYTHONPATH`, which (once the program
/// imports torch and initialises CUDA) keeps the caching allocator's recent history and, when an
/// allocation fails, writes a snapshot into `oom_dir` and prints the post-mortem's first lines.
/// Returns how the program ended.
pub fn run_capturing_oom(program: &OsStr, args: &[OsString], oom_dir: &Path) -> Result<ExitStatus, Error> {
    let dir = tempfile::Builder::new()
        .prefix("vramscope-run-")
        .tempdir()
        .map_err(io("cannot create a directory for the PyTorch shim"))?;
    let shim = dir.path().join("python");
    std::fs::create_dir(&shim).map_err(io("cannot write the PyTorch shim"))?;
    for (name, text) in torch::SHIM_FILES {
        std::fs::write(shim.join(name), text).map_err(io("cannot write the PyTorch shim"))?;
    }
    let oom_dir = std::path::absolute(oom_dir).unwrap_or_else(|_| oom_dir.to_owned());
    let mut command = Command::new(program);
    command
        .args(args)
        .env("VRAMSCOPE_CAPTURE_OOM", &oom_dir)
        .env("PYTHONPATH", prepend("PYTHONPATH", shim.as_os_str()))
        .env_remove(env::RECORD_DIR);
    if let Ok(exe) = std::env::current_exe() {
        command.env("VRAMSCOPE_BIN", exe);
    }
    run_to_end(&mut command, program)
}

/// Runs `command` (of `program`) to its end with signals handled as `record` handles them, and
/// says how it ended.
fn run_to_end(command: &mut Command, program: &OsStr) -> Result<ExitStatus, Error> {
    let signals = signals::install();
    let mut child = command
        .spawn()
        .map_err(|source| Error::Io { what: format!("cannot run {}", Path::new(program).display()), source })?;
    signals.child(child.id());
    let status = child.wait().map_err(io("cannot wait for the program"));
    drop(signals);
    status
}

/// Whether `dir` is a recording's directory: what `record` makes while its workload runs, or
/// what a recording made inside the program (`vramscope.record()` in Python) leaves.
pub fn is_recording_dir(dir: &Path) -> bool {
    dir.join(live::MANIFEST).is_file()
        || std::fs::read_dir(dir).is_ok_and(|entries| {
            entries.filter_map(Result::ok).any(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                (name.starts_with("torch.") && name.ends_with(".jsonl"))
                    || (name.starts_with("events.") && name.ends_with(".bin"))
                    || crate::flight::is_ring(&name)
            })
        })
}

/// Merges what a recording's directory holds into a trace, as `record` does when its workload
/// ends: for a recording made inside the program, which has no workload of its own to wait for
/// (its status is success).
pub fn collect_dir(dir: &Path) -> Result<Recording, Error> {
    use std::os::unix::process::ExitStatusExt;
    let command = live::Manifest::read(dir).map(|m| m.command).unwrap_or_default();
    let (program, args) = command
        .split_first()
        .map_or((OsString::new(), Vec::new()), |(p, a)| (OsString::from(p), a.iter().map(OsString::from).collect()));
    collect(dir, ExitStatus::from_raw(0), &program, &args, &crate::devices::device_facts())
}

/// Reads what the hook and the shim wrote, and merges it.
fn collect(
    dir: &Path,
    status: ExitStatus,
    program: &OsStr,
    args: &[OsString],
    facts: &(Vec<DeviceInfo>, Option<i32>),
) -> Result<Recording, Error> {
    let (mut recorded, logs) = live::Tail::read_all(dir).map_err(io("cannot read what the workload recorded"))?;
    // A flight recorder's rings: read whole, the records put among the others in time order.
    let rings = crate::flight::read(dir);
    if !rings.rings.is_empty() {
        recorded.records.extend(rings.records());
        recorded.records.sort_by_key(|r| (r.time_ns, r.pid, r.tid));
    }
    let mut notes: Vec<String> = recorded
        .cut_short
        .iter()
        .map(|file| format!("{} ends in a partial record (the process was killed while writing)", file.display()))
        .collect();
    for log in logs.iter().filter(|l| l.skipped > 0) {
        notes.push(format!(
            "{} unreadable line{} in the PyTorch shim's log of process {} (cut short?)",
            log.skipped,
            if log.skipped == 1 { "" } else { "s" },
            log.pid
        ));
    }
    notes.extend(rings.notes.iter().cloned());
    let mut trace = merge::to_trace(&recorded.records, &logs, &command_line(program, args));
    crate::flight::mark(&mut trace, &rings);
    crate::devices::add_facts(&mut trace, facts);
    crate::nvml::add_to_trace(&mut trace, &crate::nvml::read(dir), &mut notes);
    Ok(Recording {
        trace,
        status,
        driver_records: recorded.records.len(),
        torch_events: logs.iter().map(|l| l.lines.len()).sum(),
        notes,
    })
}

/// The workload's command line, as text.
pub fn command_line(program: &OsStr, args: &[OsString]) -> Vec<String> {
    std::iter::once(program)
        .chain(args.iter().map(OsString::as_os_str))
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

/// How a workload ended, as the shell reports it: its exit code, or 128 + the signal.
pub fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_shim_reads_the_environment_record_sets() {
        let shim = include_str!("../../python/vramscope/_shim/vramscope_torch.py");
        for name in vramscope_wire::env::READ_BY_SHIM {
            assert!(shim.contains(&format!("os.environ.get(\"{name}\"")), "the shim does not read {name}");
        }
    }
}
