//! `diff` of two runs of several ranks: ranks paired by number, each gate on every rank.

use std::path::Path;

use anyhow::Result;

use crate::query::diff::{self, percent};
use crate::units::{bytes, signed_bytes};

use super::text::{pct_text, write_text};
use super::{Options, RunSide};

/// `diff` of two runs of several ranks: ranks paired by number; each gate must hold on every
/// rank, and says the rank where it came out worst; the full comparison of the rank whose peak
/// grew most.
pub(super) fn ranks(
    a: &Path,
    b: &Path,
    side_a: &RunSide,
    side_b: &RunSide,
    options: &Options<'_>,
    to: &mut crate::cli::To<'_>,
) -> Result<bool> {
    let Options { gates, range, .. } = *options;
    use crate::query::compare::{RanksNotCompared, compare_ranks, peak_growth};
    let mut compared = compare_ranks(&side_a.peaks, &side_b.peaks, gates).map_err(|why| match why {
        RanksNotCompared::NoRankInCommon(ranks_a, ranks_b) => {
            anyhow::anyhow!(
                "{} and {} have no rank in common (ranks {ranks_a:?} and {ranks_b:?})",
                a.display(),
                b.display()
            )
        }
        RanksNotCompared::Gate(rank, why) => {
            anyhow::anyhow!("rank {rank}: {}", crate::words::gate_unchecked(&why))
        }
    })?;
    // The rank shown in full: of a directory of ranks only the gates' figures were kept.
    let shown = compared.most_grown().0;
    if side_a.slim || side_b.slim {
        compared.pairs[compared.most_grown].1 = diff::diff(side_a.full(shown)?, side_b.full(shown)?);
    }
    let (worst_rank, worst) = compared.most_grown();
    let (only_a, only_b, results) = (&compared.only_in_a, &compared.only_in_b, &compared.gates);
    let grew = peak_growth;
    let (a_max, b_max) = compared.highest_peak;
    let doc = crate::query::documents::ranks_diff_document(
        a.display().to_string(),
        b.display().to_string(),
        &compared,
        range,
    );
    if let Some(out) = to.document(crate::query::documents::Document::RanksDiff(&doc))? {
        writeln!(out, "A  {} ({} ranks)", a.display(), side_a.peaks.len())?;
        writeln!(out, "B  {} ({} ranks)", b.display(), side_b.peaks.len())?;
        if let Some(range) = range {
            writeln!(out, "   {}", crate::words::range_note(range))?;
        }
        let which = if grew(worst) > 0 {
            format!("rank {worst_rank} grew most")
        } else {
            format!("no rank grew; rank {worst_rank} shrank least")
        };
        writeln!(
            out,
            "\nthe highest rank peak: {} -> {} ({}); {which}",
            bytes(a_max),
            bytes(b_max),
            pct_text(percent(a_max, b_max))
        )?;
        writeln!(out, "\n  {:>5}{:>14}{:>14}{:>13}{:>10}", "rank", "A", "B", "B - A", "")?;
        for r in &doc.ranks {
            writeln!(
                out,
                "  {:>5}{:>14}{:>14}{:>13}{:>10}",
                r.rank,
                bytes(r.a_peak_allocated_bytes),
                bytes(r.b_peak_allocated_bytes),
                signed_bytes(r.delta_bytes),
                pct_text(r.percent)
            )?;
        }
        for (what, list) in [("only in A", only_a), ("only in B", only_b)] {
            if !list.is_empty() {
                writeln!(out, "  ranks {what}: {list:?}")?;
            }
        }
        writeln!(out, "\nrank {worst_rank}:")?;
        write_text(worst, &[], false, range, out)?;
        for (g, rank) in results {
            writeln!(out, "{}", crate::words::gate_line(g, Some(*rank)))?;
        }
    }
    Ok(results.iter().all(|(r, _)| r.passed))
}
