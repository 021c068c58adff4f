//! `vramscope convert`: any supported file to a `.vtrace`.

use std::io::Write;
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
    let written = crate::vtrace_out::write_vtrace_to(&trace, file, force)?;
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
