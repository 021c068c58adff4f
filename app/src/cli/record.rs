//! `vramscope record -- CMD ARGS...`: a thin front over `vramscope_collector::session`. It checks
//! the output before anything runs, records, writes the trace (and one per rank of a distributed
//! run), and says what it got.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use vramscope_collector::session;

use crate::analysis::peak;
use crate::units::{bytes, count};

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
    let recording = session::record(program, args, torch)?;
    for note in &recording.notes {
        eprintln!("vramscope: {note}");
    }
    let trace = &recording.trace;
    super::convert::write_vtrace(trace, &output, force)?;
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
    let peaks = trace.devices().into_iter().map(|d| peak::peaks(trace, d)).max_by_key(|p| p.reserved.bytes);
    let peak = peaks.map_or(0, |p| p.reserved.bytes);
    eprintln!(
        "vramscope: {} driver events{} from {} process{}, peak reserved {}, {} OOM{}; trace: {}",
        count(recording.driver_records),
        if recording.torch_events > 0 {
            format!(" and {} PyTorch events", count(recording.torch_events))
        } else {
            String::new()
        },
        processes,
        if processes == 1 { "" } else { "es" },
        bytes(peak),
        trace.ooms.len(),
        if trace.ooms.len() == 1 { "" } else { "s" },
        output.display()
    );
    Ok(session::exit_code(recording.status))
}
