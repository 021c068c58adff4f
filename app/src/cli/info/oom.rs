//! `info --oom`: the first out-of-memory error on each device, explained.

use std::io::Write;

use anyhow::{Result, bail};
use vramscope_trace_format::TraceRange;

use crate::load::{self};

use super::text::wrap;

/// `info --oom`: the first out-of-memory error on each device of one trace, explained.
pub fn run_oom(paths: &[std::path::PathBuf], json: bool, range: Option<TraceRange>, out: &mut dyn Write) -> Result<()> {
    answer_oom(paths, range, &mut super::To::new(json, out))
}

/// [`run_oom`], its answer given `to` a writer or a keeper of the document.
pub fn answer_oom(paths: &[std::path::PathBuf], range: Option<TraceRange>, to: &mut super::To<'_>) -> Result<()> {
    let [path] = paths else { bail!("--oom explains one trace: give one file (one rank's, for a run)") };
    let loaded = load::load(path, range)?;
    let trace = &loaded.trace;
    // The first OOM of each device (of each process: no view mixes two processes' blocks).
    let explained = crate::query::oom::explain_firsts(trace);
    let doc = crate::query::documents::oom_document(trace, path.display().to_string(), &explained);
    let Some(out) = to.document(crate::query::documents::Document::Oom(&doc))? else { return Ok(()) };
    writeln!(out, "{}", path.display())?;
    if trace.ooms.is_empty() {
        writeln!(out, "  no out-of-memory error in this trace")?;
        return Ok(());
    }
    for crate::query::oom::Explained { postmortem: pm, part, later, .. } in &explained {
        let t = part.as_ref().unwrap_or(trace);
        writeln!(out, "\n{}", crate::words::postmortem_heading(t, pm))?;
        for line in crate::words::postmortem_lines(pm) {
            for (j, part) in wrap(&line, 96).iter().enumerate() {
                writeln!(out, "  {}{part}", if j == 0 { "" } else { "  " })?;
            }
        }
        if *later > 0 {
            writeln!(out, "  and {later} more on this device after it")?;
        }
    }
    Ok(())
}
