//! `vramscope report FILE [FILE2] -o OUT.png|OUT.svg [--json [--blocks N]]`.

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::To;
use crate::query::documents::{self, Document, InfoDocument, RankChosen, ReportDocument, ReportedRun};
use crate::report::{self, ReportRun};

/// What `report` is asked beyond its files and image.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// Replace the image if it exists.
    pub force: bool,
    /// The part of each file read (`None`: the whole).
    pub range: Option<vramscope_trace_format::TraceRange>,
    /// With `--json`: the largest blocks at each device's peak to list.
    pub blocks: usize,
}

/// A run drawn, and what its document is made of.
struct Drawn {
    name: String,
    chosen: Option<RankChosen>,
    info: Option<InfoDocument>,
    advice: Option<crate::query::advisor::Advice>,
    growth: Option<(crate::query::growth::Growth, String)>,
}

/// Writes the report of `files` (one run, or two compared) to `out`; `to` says what was written
/// (text), or gives the document of what the picture shows.
pub fn run(files: &[PathBuf], out: &Path, options: Options, to: &mut To<'_>) -> Result<()> {
    // Before any reading: a report that cannot be written is said at once.
    crate::atomic::check_writable(out, options.force)?;
    let text = matches!(to, To::Text(_));
    let mut runs = Vec::with_capacity(files.len());
    let mut drawn = Vec::with_capacity(files.len());
    for path in files {
        // A run of several ranks (a directory of rank files, a recording of several): the rank
        // that peaks highest, alone, as advise takes it; never several processes' memory summed.
        let (loaded, chosen) = crate::runs::highest_rank(path, options.range)?;
        let trace = &loaded.trace;
        let mut name =
            path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
        if let Some(chosen) = &chosen {
            if let To::Text(stdout) = to {
                writeln!(stdout, "{}: {}", path.display(), crate::words::rank_chosen("reporting", chosen))?;
            }
            name = format!("{name}, rank {}", chosen.rank);
        }
        if let Some(range) = &trace.metadata.range {
            name = format!("{name}, {} only", range.range);
        }
        runs.push(ReportRun::new(trace, &name));
        if !text {
            let info = documents::info_document(trace, loaded.format, &loaded.wrappers, None, options.blocks, false)
                .map_err(|(text, why)| anyhow::anyhow!(crate::words::not_in_trace(&text, &why)))?;
            let advice = crate::query::advice(trace, None, None, None);
            let growth =
                advice.as_ref().and_then(|a| crate::query::growth(trace, a.baseline.device)).filter(|g| g.alarms());
            let growth = growth.map(|g| {
                let label = trace.metadata.device_label(g.device);
                (g, label)
            });
            drawn.push(Drawn { name, chosen, info: Some(info), advice, growth });
        }
    }
    report::write(&runs, out, options.force)?;
    let doc = ReportDocument {
        schema_version: documents::SCHEMA_VERSION,
        image: out.display().to_string(),
        runs: drawn
            .iter()
            .filter_map(|d| {
                let info = d.info.as_ref()?;
                let growth = d.growth.as_ref().map(|(g, label)| documents::GrowthFound::new(g, label));
                Some(ReportedRun {
                    name: d.name.clone(),
                    rank: d.chosen.as_ref(),
                    info,
                    advice: d
                        .advice
                        .as_ref()
                        .map(|a| documents::advice_document_with(a, None, growth, d.chosen.as_ref(), options.range)),
                })
            })
            .collect(),
    };
    if let Some(stdout) = to.document(Document::Report(&doc))? {
        writeln!(stdout, "wrote {}", out.display())?;
    }
    Ok(())
}
