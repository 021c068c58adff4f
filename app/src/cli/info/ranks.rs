//! `info` on a run of several ranks: a row per rank and what the run says.

use anyhow::{Result, bail};
use vramscope_trace_format::TraceRange;

use crate::units::{bytes, duration_ns};

pub(super) fn run_of_ranks(
    paths: &[std::path::PathBuf],
    summed: &crate::runs::Summed,
    range: Option<TraceRange>,
    to: &mut super::To<'_>,
) -> Result<()> {
    let Some(summary) = &summed.summary else {
        bail!(
            "no ranks with memory events in {}",
            paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        );
    };
    let mut notes = crate::words::run_notes(&summed.notes, &summed.skipped);
    if let Some(range) = range {
        notes.insert(0, crate::words::range_note(range));
    }
    use crate::query::documents::{Document, RunDocument};
    let doc = RunDocument::new(summary, notes);
    let Some(out) = to.document(Document::Run(&doc))? else { return Ok(()) };
    let notes = &doc.notes;
    writeln!(out, "{}", crate::words::run_headline(summary))?;
    let nodes = summary.ranks.iter().any(|r| r.node.is_some());
    writeln!(
        out,
        "\n  {:>5}  {:>14}  {:>14}  {:<14}  {:>12}  file",
        "rank", "peak allocated", "peak reserved", "phase", "when"
    )?;
    for r in &summary.ranks {
        // From the rank's own first event: ranks on several machines do not share a clock.
        let start = r.first_event_ns.unwrap_or(0);
        let at = r
            .peak
            .peak_allocated_clock_ns
            // Said to the µs, as the JSON gives it.
            .map_or_else(
                || "-".to_owned(),
                |ns| format!("+{}", duration_ns((ns.div_euclid(1000) * 1000 - start).max(0))),
            );
        writeln!(
            out,
            "  {:>5}  {:>14}  {:>14}  {:<14}  {:>12}  {}{}",
            r.rank,
            bytes(r.peak.peak_allocated_bytes),
            bytes(r.peak.peak_reserved_bytes),
            r.peak_phase.map_or("-", crate::words::run_phase),
            at,
            if nodes {
                let host = r.host.as_deref().map_or_else(String::new, |h| format!(" on {h}"));
                format!("node {}{host}: {}", r.node.map_or_else(|| "?".to_owned(), |n| n.to_string()), r.source)
            } else {
                r.source.clone()
            },
            if r.rank == summary.worst_rank { "  <- highest" } else { "" }
        )?;
    }
    let sites = crate::words::site_spread(summary);
    if !sites.is_empty() {
        writeln!(out, "\n  where the ranks differ most at their peaks:")?;
        for line in sites {
            writeln!(out, "    {line}")?;
        }
    }
    for note in notes {
        writeln!(out, "  {note}")?;
    }
    Ok(())
}
