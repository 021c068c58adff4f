//! `vramscope info`: what a trace holds, in numbers. One file per mode: the summary of one
//! trace (here, its text in `text.rs`), an instant (`at.rs`), the OOMs explained (`oom.rs`), and
//! a run of several ranks (`ranks.rs`).

use std::io::Write;
use std::path::Path;

use anyhow::{Result, bail};
use vramscope_trace_format::TraceRange;

use super::To;
use crate::load::LoadedTrace;
use crate::query::documents::Document;
use crate::units::{bytes, counted, duration_ns};

mod at;
mod oom;
mod ranks;
mod text;
mod whole;

pub use self::at::{When, parse_when, parse_when_arg};
pub use self::oom::{answer_oom, run_oom};
use self::ranks::run_of_ranks;
pub(crate) use self::text::category_shares;
use self::text::{device_name, write_text};

/// `info` on what the paths hold: one trace, or a run of several ranks (several files, a
/// directory of them, or one recording of several ranks): per-rank rows and the run's summary.
pub fn run_paths(paths: &[std::path::PathBuf], options: &Options<'_>, out: &mut dyn Write) -> Result<()> {
    answer(paths, options, &mut To::new(options.json, out))
}

/// [`run_paths`], its answer given `to` a writer or a keeper of the document (`options.json`
/// aside: `to` says it).
pub fn answer(paths: &[std::path::PathBuf], options: &Options<'_>, to: &mut To<'_>) -> Result<()> {
    let Options { at, blocks, all_phases, range, .. } = *options;
    let summed = match crate::runs::open_for_summary(paths, range)? {
        crate::runs::Held::Trace(loaded) => return answer_loaded(&loaded, options, to),
        crate::runs::Held::Run(summed) => summed,
    };
    if at.is_some() || blocks > 0 || all_phases {
        bail!(
            "--at, --blocks and --all-phases look at one trace: give one rank's file (a recording writes \
             RUN.rankN.vtrace beside it)"
        );
    }
    run_of_ranks(paths, &summed, range, to)
}

/// `info` on one file: its summary and, with `at`, what was alive at that instant (its text as
/// given, and parsed).
pub fn run(path: &Path, options: &Options<'_>, out: &mut dyn Write) -> Result<()> {
    run_paths(&[path.to_path_buf()], options, out)
}

/// What `info` is asked for beyond the summary.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options<'a> {
    /// One JSON object instead of text.
    pub json: bool,
    /// Also what was alive at this instant (its text, and what it means).
    pub at: Option<(&'a str, &'a When)>,
    /// Also the N largest blocks alive at the peak (or at `at`).
    pub blocks: usize,
    /// Also every iteration's phases and their high points, not only the outline.
    pub all_phases: bool,
    /// The part of each trace read (`None`: the whole).
    pub range: Option<TraceRange>,
}

/// `info` on one loaded trace: its document, given as JSON or as text.
fn answer_loaded(loaded: &LoadedTrace, options: &Options<'_>, to: &mut To<'_>) -> Result<()> {
    let Options { at, blocks, all_phases, .. } = *options;
    let doc =
        crate::query::documents::info_document(&loaded.trace, loaded.format, &loaded.wrappers, at, blocks, all_phases)
            .map_err(|(text, why)| anyhow::anyhow!(crate::words::not_in_trace(&text, &why)))?;
    if let Some(out) = to.document(Document::Info(&doc))? {
        let summary = &doc.summary;
        write_text(loaded, summary, out)?;
        let start = loaded.trace.origin_ns();
        for device in &summary.whole_devices {
            whole::write_whole(start, device, out)?;
        }
        if let Some(at) = &doc.at {
            let start = loaded.trace.origin_ns();
            // Said to the µs, as the JSON gives it.
            let time_ns = at.time_ns.div_euclid(1000) * 1000;
            writeln!(out, "\nat {} (+{})", at.when, duration_ns((time_ns - start).max(0)))?;
            for d in &at.devices {
                let mut categories = crate::words::by_name(&d.categories);
                categories.sort_by_key(|c| std::cmp::Reverse(c.1));
                let parts: Vec<String> =
                    categories.iter().map(|(c, v)| format!("{} {}", c.name(), bytes(*v))).collect();
                writeln!(
                    out,
                    "  {}: {} allocated in {}: {}",
                    device_name(&loaded.trace, d.device),
                    bytes(d.allocated_bytes),
                    counted(d.live_blocks, "live block", "live blocks"),
                    parts.join(", ")
                )?;
            }
        }
        if all_phases {
            for d in summary.devices.iter().filter(|d| !d.phases.is_empty()) {
                let name = crate::words::device_name(d.device, &d.label);
                writeln!(out, "\nphases of {name}, the high point of each")?;
                for line in crate::words::phase_table(&d.phases) {
                    writeln!(out, "  {line}")?;
                }
            }
        }
        if let Some(largest) = &doc.largest_blocks {
            writeln!(out, "\nlargest blocks at {}", largest.when)?;
            for d in &largest.devices {
                writeln!(out, "  {}:", device_name(&loaded.trace, d.device))?;
                for b in &d.blocks {
                    writeln!(out, "    {:>10}  {:<15} {}  [{}]", bytes(b.size_bytes), b.category, b.site, b.why)?;
                    for line in &b.context {
                        writeln!(out, "    {:>10}  {line}", "")?;
                    }
                }
            }
        }
    }
    for warning in &loaded.warnings {
        eprintln!("warning: {}: {warning}", loaded.path.display());
    }
    Ok(())
}
