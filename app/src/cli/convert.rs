//! `vramscope convert`: any supported file to a `.vtrace`.

use std::io::{BufWriter, Write};
use std::path::Path;

use anyhow::{Context, Result, bail};

use crate::load;
use crate::units::{bytes, count};

/// Converts `input` (a file, or a recording's directory) to a `.vtrace` at `output`. An existing `output` is replaced only with
/// `force`, and never half-written: the trace goes to a temporary file beside it first.
pub fn run(
    input: &Path,
    output: &Path,
    force: bool,
    range: Option<vramscope_trace_format::TraceRange>,
    out: &mut dyn Write,
) -> Result<()> {
    if output.exists() && force && same_file(input, output) {
        bail!("{} is the input file; choose another output", output.display());
    }
    crate::atomic::check_writable(output, force)?;
    if input.is_dir() && vramscope_collector::session::is_recording_dir(input) {
        let recording = vramscope_collector::session::collect_dir(input)
            .with_context(|| format!("cannot read the recording in {}", input.display()))?;
        super::record::write_recording(&recording, "auto", output, force)?;
        return Ok(());
    }
    // The temporary file is made first: a Ctrl+C while a large input is read removes it too.
    let file = crate::atomic::AtomicFile::create(output)?;
    let loaded = load::load(input, range)?;
    for warning in &loaded.warnings {
        eprintln!("warning: {}: {warning}", input.display());
    }
    let mut trace = loaded.trace;
    trace.metadata.tool_version = env!("CARGO_PKG_VERSION").to_owned();
    let written = write_vtrace_to(&trace, file, force)?;
    writeln!(
        out,
        "wrote {}: {} records in {} ({} of the {} source)",
        output.display(),
        count(trace.record_count()),
        bytes(written),
        share(written, loaded.file_bytes),
        bytes(loaded.file_bytes)
    )?;
    Ok(())
}

/// Writes `trace` as a `.vtrace` at `output` through a temporary file beside it, renamed into
/// place when complete (replacing an existing file only with `force`). Returns the bytes written.
pub fn write_vtrace(trace: &vramscope_trace_format::Trace, output: &Path, force: bool) -> Result<u64> {
    write_vtrace_to(trace, crate::atomic::AtomicFile::create(output)?, force)
}

/// [`write_vtrace`] into a file already begun.
fn write_vtrace_to(
    trace: &vramscope_trace_format::Trace,
    mut file: crate::atomic::AtomicFile,
    force: bool,
) -> Result<u64> {
    let output = file.output().to_owned();
    vramscope_trace_format::vtrace::write(trace, BufWriter::new(file.file()))
        .with_context(|| format!("cannot write {}", output.display()))?
        .into_inner()
        .map_err(|e| e.into_error())
        .with_context(|| format!("cannot write {}", output.display()))?;
    let written = file.commit(force)?;
    if load::self_checking() {
        reads_back_whole(trace, &output)?;
    }
    Ok(written)
}

/// Checks that the `.vtrace` at `output` reads back whole and equal to `trace`: read, it has no
/// damage, and written again it is the same bytes (the writer is deterministic).
fn reads_back_whole(trace: &vramscope_trace_format::Trace, output: &Path) -> Result<()> {
    let fail = |why: String| anyhow::anyhow!("{}: self-check failed: what was written {why}", output.display());
    let bytes = std::fs::read(output).with_context(|| format!("cannot read {}", output.display()))?;
    let loaded = vramscope_trace_format::vtrace::read(&bytes, &vramscope_trace_format::NoProgress)
        .map_err(|e| fail(format!("does not read back: {e}")))?;
    if let Some(damage) = loaded.damage {
        return Err(fail(format!("reads back damaged at byte {}: {}", damage.offset, damage.reason)));
    }
    let again = vramscope_trace_format::vtrace::write(&loaded.trace, Vec::new())
        .map_err(|e| fail(format!("cannot be written again: {e}")))?;
    let expected = vramscope_trace_format::vtrace::write(trace, Vec::new())
        .map_err(|e| fail(format!("cannot be written again: {e}")))?;
    if again != bytes || expected != bytes {
        let (a, b) = (&loaded.trace, trace);
        let tables = [
            ("events", format!("{:?}", a.events), format!("{:?}", b.events)),
            ("annotations", format!("{:?}", a.annotations), format!("{:?}", b.annotations)),
            ("segments", format!("{:?}", a.segments), format!("{:?}", b.segments)),
            ("counters", format!("{:?}", a.counters), format!("{:?}", b.counters)),
            ("tags", format!("{:?}", a.tags), format!("{:?}", b.tags)),
            ("ooms", format!("{:?}", a.ooms), format!("{:?}", b.ooms)),
            ("metadata", format!("{:?}", a.metadata), format!("{:?}", b.metadata)),
        ];
        let differ: Vec<&str> = tables.iter().filter(|t| t.1 != t.2).map(|t| t.0).collect();
        return Err(fail(format!("reads back as a different trace (its {} differ)", differ.join(", "))));
    }
    Ok(())
}

/// `part` as a share of `whole`, with the digits it needs: `7.9%`, `0.25%`, `under 0.01%`.
fn share(part: u64, whole: u64) -> String {
    let percent = 100.0 * part as f64 / whole.max(1) as f64;
    match percent {
        p if p >= 1.0 => format!("{p:.1}%"),
        p if p >= 0.01 => format!("{p:.2}%"),
        _ => "under 0.01%".to_owned(),
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}
