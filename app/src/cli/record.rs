//! `vramscope record -- CMD ARGS...`: runs a workload with the driver-level hook library loaded
//! and writes what it allocated as one trace.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use vramscope_collector::merge;

use crate::analysis::peak;
use crate::units::{bytes, count};

/// The hook library's file name.
const HOOK_FILE: &str = "libvramscope_hook.so";

/// Where the hook library is: `VRAMSCOPE_HOOK`, else beside this executable.
pub fn hook_path() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("VRAMSCOPE_HOOK") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().context("cannot tell where vramscope is installed")?;
    let path = exe.parent().map(|d| d.join(HOOK_FILE)).unwrap_or_else(|| PathBuf::from(HOOK_FILE));
    if !path.exists() {
        bail!(
            "the hook library {} is missing: build it with `cargo build --workspace` (it is the \
             vramscope-hook crate), or point VRAMSCOPE_HOOK at it",
            path.display()
        );
    }
    Ok(path)
}

/// How the workload ended, as the shell reports it: its exit code, or 128 + the signal.
#[cfg(unix)]
fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// Runs `command` recorded into `output`, the PyTorch shim taking allocations from `torch`
/// (`auto`, `cuda`, `cpu` or `off`); returns the workload's exit code.
pub fn run(output: Option<&Path>, force: bool, torch: &str, command: &[OsString]) -> Result<i32> {
    let Some((program, args)) = command.split_first() else {
        bail!("nothing to record: give the command after --, e.g. vramscope record -- python train.py");
    };
    let output = match output {
        Some(path) => path.to_owned(),
        None => {
            let name =
                Path::new(program).file_name().map_or_else(|| "run".into(), |n| n.to_string_lossy().into_owned());
            PathBuf::from(format!("{name}-{}.vtrace", std::process::id()))
        }
    };
    // Refuse before running anything, not after the workload has spent an hour: an existing
    // output, a directory, a missing or read-only directory.
    crate::atomic::check_writable(&output, force)?;
    let hook = hook_path()?;
    let dir = tempfile::Builder::new()
        .prefix("vramscope-record-")
        .tempdir()
        .context("cannot create a directory for the recording")?;
    let mut preload = hook.into_os_string();
    if let Some(existing) = std::env::var_os("LD_PRELOAD").filter(|p| !p.is_empty()) {
        preload.push(":");
        preload.push(existing);
    }
    // The PyTorch shim: Python finds its sitecustomize first on PYTHONPATH.
    let shim = dir.path().join("python");
    std::fs::create_dir(&shim).context("cannot write the PyTorch shim")?;
    for (name, text) in vramscope_collector::torch::SHIM_FILES {
        std::fs::write(shim.join(name), text).context("cannot write the PyTorch shim")?;
    }
    let mut python_path = shim.into_os_string();
    if let Some(existing) = std::env::var_os("PYTHONPATH").filter(|p| !p.is_empty()) {
        python_path.push(":");
        python_path.push(existing);
    }
    let signals = vramscope_collector::signals::install();
    let mut child = Command::new(program)
        .args(args)
        .env("LD_PRELOAD", preload)
        .env("VRAMSCOPE_RECORD_DIR", dir.path())
        .env("VRAMSCOPE_TORCH", torch)
        .env("PYTHONPATH", python_path)
        .spawn()
        .with_context(|| format!("cannot run {}", Path::new(program).display()))?;
    signals.child(child.id());
    let status = child.wait().context("cannot wait for the workload")?;
    drop(signals);
    let recorded = merge::read_dir(dir.path()).context("cannot read what the hook recorded")?;
    for file in &recorded.cut_short {
        eprintln!("vramscope: {} ends in a partial record (the process was killed while writing)", file.display());
    }
    let logs =
        vramscope_collector::torch::read_logs(dir.path()).context("cannot read what the PyTorch shim recorded")?;
    for log in logs.iter().filter(|l| l.skipped > 0) {
        eprintln!(
            "vramscope: {} unreadable line{} in the PyTorch shim's log of process {} (cut short?)",
            log.skipped,
            if log.skipped == 1 { "" } else { "s" },
            log.pid
        );
    }
    let command_line: Vec<String> = command.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    let mut trace = merge::to_trace(&recorded.records, &logs, &command_line);
    // What the driver says about the devices (nothing on a machine without one).
    let (facts, driver_version) = vramscope_collector::devices::device_facts();
    for fact in facts {
        if let Some(known) = trace.metadata.devices.iter_mut().find(|d| d.device == fact.device) {
            known.name = fact.name;
            known.total_memory_bytes = fact.total_memory_bytes;
        }
    }
    if let Some(version) = driver_version {
        trace.metadata.extra.insert("cuda_driver_version".to_owned(), version.into());
    }
    super::convert::write_vtrace(&trace, &output, force)?;
    // A distributed run: also one trace per rank, beside the merged one.
    let ranked: Vec<(usize, u32)> =
        trace.metadata.processes.iter().enumerate().filter_map(|(i, p)| p.rank.map(|r| (i, r))).collect();
    if ranked.len() > 1 {
        let stem = output.file_stem().map_or_else(|| "trace".into(), |s| s.to_string_lossy().into_owned());
        for (index, rank) in ranked {
            let path = output.with_file_name(format!("{stem}.rank{rank}.vtrace"));
            let part = trace.of_process(vramscope_trace_format::ProcessId(index as u32));
            match super::convert::write_vtrace(&part, &path, force) {
                Ok(_) => eprintln!("vramscope: rank {rank}: {}", path.display()),
                Err(error) => eprintln!("vramscope: rank {rank} not written separately: {error:#}"),
            }
        }
    }
    let processes = trace.metadata.processes.len();
    let peaks = trace.devices().into_iter().map(|d| peak::peaks(&trace, d)).max_by_key(|p| p.reserved.bytes);
    let peak = peaks.map_or(0, |p| p.reserved.bytes);
    let tensor_events: usize = logs.iter().map(|l| l.lines.len()).sum();
    eprintln!(
        "vramscope: {} driver events{} from {} process{}, peak reserved {}, {} OOM{}; trace: {}",
        count(recorded.records.len()),
        if tensor_events > 0 { format!(" and {} PyTorch events", count(tensor_events)) } else { String::new() },
        processes,
        if processes == 1 { "" } else { "es" },
        bytes(peak),
        trace.ooms.len(),
        if trace.ooms.len() == 1 { "" } else { "s" },
        output.display()
    );
    Ok(exit_code(status))
}
