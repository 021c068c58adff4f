//! `vramscope report FILE [FILE2] -o OUT.png|OUT.svg`.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::load;
use crate::report::{self, ReportRun};

/// Writes the report of `files` (one run, or two compared) to `out`.
pub fn run(files: &[PathBuf], out: &Path, force: bool, stdout: &mut dyn Write) -> Result<()> {
    // Before any reading: a report that cannot be written is said at once.
    crate::atomic::check_writable(out, force)?;
    let mut runs = Vec::with_capacity(files.len());
    for path in files {
        let loaded = load::load(path)?;
        for warning in &loaded.warnings {
            eprintln!("warning: {}: {warning}", path.display());
        }
        let mut name =
            path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
        if let Some(range) = loaded.trace.metadata.range {
            name = format!("{name}, {} only", range.range);
        }
        runs.push(ReportRun::new(&loaded.trace, &name));
    }
    report::write(&runs, out, force)?;
    writeln!(stdout, "wrote {}", out.display())?;
    Ok(())
}
