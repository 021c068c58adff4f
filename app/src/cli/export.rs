//! `vramscope export`: a trace or a run written for the tools people already use. `--format
//! perfetto` writes the Chrome trace event format (JSON), which Perfetto's UI, `chrome://tracing`
//! and the trace tools that read it open: a process per rank, on it a counter track per device
//! (allocated and reserved bytes) and the recorded phases as slices, so memory shows beside the
//! kernels of a profile of the same run.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::json;
use vramscope_trace_format::{AnnotationKind, Clock, Trace};

use crate::atomic;
use crate::query::replay;
use crate::query::run::Rank;

/// What `export` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Chrome trace event JSON, for Perfetto's UI and `chrome://tracing`.
    Perfetto,
    /// Parquet tables in a directory (ranks, events, blocks, segments, annotations, tags), for
    /// DuckDB, Polars, Spark and Dask; the schema is in docs/EXPORT.md.
    Parquet,
}

/// A device's counter keeps at most this many points; beyond, each stretch keeps its highest
/// point, so peaks survive.
const MAX_POINTS_PER_DEVICE: usize = 1_000_000;

/// The counter's points of one device: (time µs, allocated, reserved), at most
/// [`MAX_POINTS_PER_DEVICE`], the highest allocated of each stretch kept.
fn points(trace: &Trace, device: vramscope_trace_format::DeviceId) -> Vec<(f64, u64, u64)> {
    let mut all: Vec<(i64, u64, u64)> = Vec::new();
    replay::replay(trace, device, |_, p| all.push((p.time_ns, p.allocated_bytes, p.reserved_bytes)));
    let keep = |(t, a, r): (i64, u64, u64)| (t as f64 / 1000.0, a, r);
    if all.len() <= MAX_POINTS_PER_DEVICE {
        return all.into_iter().map(keep).collect();
    }
    let stretch = all.len().div_ceil(MAX_POINTS_PER_DEVICE);
    all.chunks(stretch)
        .filter_map(|c| c.iter().copied().max_by_key(|p| (p.1, std::cmp::Reverse(p.0))))
        .map(keep)
        .collect()
}

fn phase_name(kind: AnnotationKind) -> Option<&'static str> {
    match kind {
        AnnotationKind::Forward => Some("forward"),
        AnnotationKind::Backward => Some("backward"),
        AnnotationKind::OptimizerStep => Some("optimizer step"),
        AnnotationKind::Iteration => Some("iteration"),
        _ => None,
    }
}

/// Writes one JSON event per line into `out`, separated by commas.
fn event(out: &mut dyn Write, first: &mut bool, value: &serde_json::Value) -> Result<()> {
    if !*first {
        out.write_all(b",\n")?;
    }
    *first = false;
    serde_json::to_writer(&mut *out, value)?;
    Ok(())
}

/// Writes one rank of a run of `ranks` as Chrome trace events (after the header `first` says
/// whether anything was written yet).
fn write_perfetto_rank(rank: &Rank, ranks: usize, out: &mut dyn Write, first: &mut bool) -> Result<()> {
    let trace = &rank.trace;
    let pid = rank.rank;
    let process = trace.metadata.processes.first();
    let node = process.and_then(|p| p.node).map_or_else(String::new, |n| format!(" (node {n})"));
    let name = if ranks > 1 { format!("rank {}{node}", rank.rank) } else { rank.source.clone() };
    event(out, first, &json!({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}}))?;
    event(
        out,
        first,
        &json!({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}}),
    )?;
    if trace.metadata.clock == Clock::EventIndex {
        // No time was recorded: the counter's "time" is the event's index, said in its name.
        eprintln!("warning: {}: no times recorded; the tracks are over event indices, not time", rank.source);
    }
    for device in trace.devices() {
        let label = trace.metadata.device_label(device);
        let track = format!("memory {label}");
        for (ts, allocated, reserved) in points(trace, device) {
            event(
                out,
                first,
                &json!({"ph": "C", "name": track, "pid": pid, "tid": 0, "ts": ts,
                        "args": {"allocated": allocated, "reserved": reserved}}),
            )?;
        }
    }
    event(out, first, &json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": 1, "args": {"name": "phases"}}))?;
    for a in &trace.annotations {
        let Some(name) = phase_name(a.kind) else { continue };
        let ts = a.start_ns as f64 / 1000.0;
        let dur = (a.end_ns - a.start_ns).max(0) as f64 / 1000.0;
        // Iterations on their own row: they contain the phases.
        let tid = if a.kind == AnnotationKind::Iteration { 2 } else { 1 };
        event(
            out,
            first,
            &json!({"ph": "X", "name": name, "cat": "phase", "pid": pid, "tid": tid, "ts": ts, "dur": dur}),
        )?;
    }
    for oom in &trace.ooms {
        let label = trace.metadata.device_label(oom.device);
        event(
            out,
            first,
            &json!({"ph": "i", "s": "p", "name": format!("OOM on {label}"), "pid": pid, "tid": 1,
                    "ts": oom.time_ns as f64 / 1000.0, "args": {"requested_bytes": oom.requested_bytes}}),
        )?;
    }
    Ok(())
}

/// Exports what `paths` hold (a trace, several, a directory, a recording of several ranks) to
/// `output`.
/// `range`: the part of each file read (`None`: the whole).
pub fn run(
    paths: &[PathBuf],
    output: &Path,
    format: Format,
    force: bool,
    range: Option<vramscope_trace_format::TraceRange>,
    out: &mut dyn Write,
) -> Result<()> {
    if format == Format::Perfetto {
        atomic::check_writable(output, force)?;
    }
    if paths.iter().any(|p| p == output) {
        bail!("{} is both read and written: give another output", output.display());
    }
    let describe = |count: usize| match count {
        1 => String::from("one trace"),
        n => format!("{n} ranks"),
    };
    if format == Format::Parquet {
        let mut count = 0;
        // Ranks with category totals over time but no allocations (a memory timeline).
        let mut totals_only = 0;
        let written = super::parquet_out::write(output, force, |each| {
            count = crate::runs::for_each_rank(paths, range, |rank, _| {
                if rank.trace.events.is_empty() && !rank.trace.counters.is_empty() {
                    totals_only += 1;
                }
                each(rank)
            })?;
            Ok(count)
        })?;
        writeln!(
            out,
            "wrote {} tables into {} ({}, {}), each a directory partitioned by {}: {}",
            super::parquet_out::TABLES.len(),
            output.display(),
            crate::units::bytes(written.bytes),
            describe(count),
            if written.by_node { "node and rank" } else { "rank" },
            super::parquet_out::TABLES.map(|t| format!("{t}/")).join(", ")
        )?;
        if totals_only > 0 {
            writeln!(
                out,
                "note: {} no allocations, only category totals over time (a profiler memory timeline): it has \
                 no rows in events/ or blocks/; ranks/ has its peak, and `vramscope info` its \
                 categories",
                if count == 1 { "the trace holds".to_owned() } else { format!("{totals_only} of the ranks hold") }
            )?;
        }
        return Ok(());
    }
    let mut file = atomic::AtomicFile::create(output)?;
    let count = {
        let mut writer = BufWriter::new(file.file());
        writer.write_all(b"{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n")?;
        let mut first = true;
        let count = crate::runs::for_each_rank(paths, range, |rank, ranks| {
            write_perfetto_rank(rank, ranks, &mut writer, &mut first)
        })?;
        writer.write_all(b"\n]}\n")?;
        writer.flush().with_context(|| format!("cannot write {}", output.display()))?;
        count
    };
    let written = file.commit(force)?;
    writeln!(
        out,
        "wrote {} ({}, {}): open it in https://ui.perfetto.dev or chrome://tracing",
        output.display(),
        crate::units::bytes(written),
        describe(count),
    )?;
    Ok(())
}
