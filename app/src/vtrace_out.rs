//! Writing a trace as a `.vtrace`: through a temporary file renamed into place when complete,
//! and, under the self-check, read back and written again to the same bytes. `convert`,
//! `record` and `serve` (a killed recorder's directory) write through it.

use std::io::BufWriter;
use std::path::Path;

use anyhow::{Context, Result};

use crate::load;

/// Writes `trace` as a `.vtrace` at `output` through a temporary file beside it, renamed into
/// place when complete (replacing an existing file only with `force`). Returns the bytes written.
pub fn write_vtrace(trace: &vramscope_trace_format::Trace, output: &Path, force: bool) -> Result<u64> {
    write_vtrace_to(trace, crate::atomic::AtomicFile::create(output)?, force)
}

/// [`write_vtrace`] into a file already begun.
pub fn write_vtrace_to(
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
