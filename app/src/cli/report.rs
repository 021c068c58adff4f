//! `vramscope report FILE [FILE2] -o OUT.png|OUT.svg`.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::report::{self, ReportRun};

/// Writes the report of `files` (one run, or two compared) to `out`.
/// `range`: the part of each file read (`None`: the whole).
pub fn run(
    files: &[PathBuf],
    out: &Path,
    force: bool,
    range: Option<vramscope_trace_format::TraceRange>,
    stdout: &mut dyn Write,
) -> Result<()> {
    // Before any reading: a report that cannot be written is said at once.
    crate::atomic::check_writable(out, force)?;
    let mut runs = Vec::with_capacity(files.len());
    for path in files {
        // A run of several ranks (a directory of rank files, a recording of several): the rank
        // that peaks highest, alone, as advise takes it; never several processes' memory summed.
        let (trace, chosen) = crate::runs::highest_rank(path, range)?;
        let mut name =
            path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
        if let Some(chosen) = &chosen {
            let others: Vec<String> =
                chosen.peaks.iter().map(|(r, b)| format!("rank {r} {}", crate::units::bytes(*b))).collect();
            writeln!(
                stdout,
                "{}: a run of {} ranks: reporting rank {}, the one that peaks highest ({})",
                path.display(),
                chosen.peaks.len(),
                chosen.rank,
                others.join(", ")
            )?;
            name = format!("{name}, rank {}", chosen.rank);
        }
        if let Some(range) = &trace.metadata.range {
            name = format!("{name}, {} only", range.range);
        }
        runs.push(ReportRun::new(&trace, &name));
    }
    report::write(&runs, out, force)?;
    writeln!(stdout, "wrote {}", out.display())?;
    Ok(())
}
