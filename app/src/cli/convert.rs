//! `vramscope convert`: any supported file to a `.vtrace`.

use std::io::{BufWriter, Write};
use std::path::Path;

use anyhow::{Context, Result, bail};

use crate::load;
use crate::units::{bytes, count};

/// Converts `input` to a `.vtrace` at `output`. An existing `output` is replaced only with
/// `force`, and never half-written: the trace goes to a temporary file beside it first.
pub fn run(input: &Path, output: &Path, force: bool, out: &mut dyn Write) -> Result<()> {
    if output.exists() {
        if !force {
            bail!("{} already exists; pass --force to replace it", output.display());
        }
        if same_file(input, output) {
            bail!("{} is the input file; choose another output", output.display());
        }
    }
    let loaded = load::load(input)?;
    for warning in &loaded.warnings {
        eprintln!("warning: {}: {warning}", input.display());
    }
    let mut trace = loaded.trace;
    trace.metadata.tool_version = env!("CARGO_PKG_VERSION").to_owned();
    let written = write_vtrace(&trace, output, force)?;
    writeln!(
        out,
        "wrote {}: {} records in {} ({:.1}% of the {} source)",
        output.display(),
        count(trace.record_count()),
        bytes(written),
        100.0 * written as f64 / loaded.file_bytes.max(1) as f64,
        bytes(loaded.file_bytes)
    )?;
    Ok(())
}

/// Writes `trace` as a `.vtrace` at `output` through a temporary file beside it, renamed into
/// place when complete (replacing an existing file only with `force`). Returns the bytes written.
pub fn write_vtrace(trace: &vramscope_trace_format::Trace, output: &Path, force: bool) -> Result<u64> {
    let dir = match output.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let temp = tempfile::Builder::new()
        .prefix(".vramscope-")
        .suffix(".vtrace.part")
        .tempfile_in(dir)
        .with_context(|| format!("cannot create a file in {}", dir.display()))?;
    let writer = vramscope_trace_format::vtrace::write(trace, BufWriter::new(temp))
        .with_context(|| format!("cannot write {}", output.display()))?;
    let temp = writer
        .into_inner()
        .map_err(|e| e.into_error())
        .with_context(|| format!("cannot write {}", output.display()))?;
    temp.as_file().sync_all().with_context(|| format!("cannot write {}", output.display()))?;
    let written = temp.as_file().metadata()?.len();
    if force {
        temp.persist(output).map_err(|e| e.error).with_context(|| format!("cannot write {}", output.display()))?;
    } else {
        temp.persist_noclobber(output)
            .map_err(|e| e.error)
            .with_context(|| format!("cannot write {} (it appeared in the meantime?)", output.display()))?;
    }
    Ok(written)
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}
