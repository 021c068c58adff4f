//! `vramscope diff A B`: two runs compared at their peaks and phase by phase, as text or JSON,
//! with gates that turn a memory regression into a failing exit status.

use std::io::Write;
use std::path::Path;

use anyhow::{Result, bail};
use serde::Serialize;
use vramscope_trace_format::{Category, DeviceId, TraceRange};

use crate::analysis::diff::{self, Diff, PhaseDelta, SiteDelta, percent};
use crate::analysis::phases::PhaseKind;
use crate::units::{bytes, signed_bytes};

pub use crate::analysis::query::gates::{Gate, GateResult, PhaseGate, parse_category_gate, parse_phase_gate};

/// How a gate comes out on `d`; an error that says why when it cannot be checked.
fn check(gate: &Gate, d: &Diff) -> Result<GateResult> {
    crate::analysis::query::gates::check(gate, d).map_err(|why| anyhow::anyhow!(crate::words::gate_unchecked(&why, d)))
}

#[derive(Serialize)]
struct Side<'a> {
    file: &'a str,
    device: DeviceId,
    peak_allocated_bytes: u64,
    peak_allocated_time_us: Option<i64>,
    peak_reserved_bytes: u64,
    categories_at_peak: &'a std::collections::BTreeMap<Category, u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    growth: Option<&'a crate::analysis::growth::Growth>,
}

#[derive(Serialize)]
struct Delta {
    peak_allocated_bytes: i64,
    peak_reserved_bytes: i64,
    peak_allocated_percent: Option<f64>,
    categories_at_peak: std::collections::BTreeMap<Category, i64>,
}

#[derive(Serialize)]
struct Json<'a> {
    a: Side<'a>,
    b: Side<'a>,
    delta: Delta,
    summary: &'a str,
    /// The phase the summary leads with, when a phase changed much more than the peak.
    #[serde(skip_serializing_if = "Option::is_none")]
    summary_phase: Option<&'a diff::PhaseChange>,
    top_grown: &'a [SiteDelta],
    top_shrunk: &'a [SiteDelta],
    only_in_a: &'a [SiteDelta],
    only_in_b: &'a [SiteDelta],
    /// Live bytes at each peak by tag or module name, when both runs have names.
    #[serde(skip_serializing_if = "Option::is_none")]
    names: Option<&'a [diff::NameDelta]>,
    phases: Phases<'a>,
    gates: &'a [GateResult],
    /// The part of both read (`--range`), if only a part.
    #[serde(skip_serializing_if = "Option::is_none")]
    range: Option<String>,
}

/// The phases of both runs, paired.
#[derive(Serialize)]
struct Phases<'a> {
    /// How A's phases were found (`recorded`, `annotations`, `stacks`), null when it shows none.
    a_from: Option<crate::analysis::phases::PhasesFrom>,
    /// How B's were.
    b_from: Option<crate::analysis::phases::PhasesFrom>,
    /// The phase A's peak is in.
    a_peak_phase: Option<PhaseKind>,
    /// The phase B's peak is in.
    b_peak_phase: Option<PhaseKind>,
    /// Each kind's highest (`iteration` null), then each iteration (`phase` null) and its phases:
    /// the first [`ITERATIONS_SHOWN`], or with `--all-phases` all of them.
    rows: Vec<&'a PhaseDelta>,
    /// Iterations in the longer run (the last one's number).
    iterations: u32,
    /// When either run shows no phases: the named ranges both have, the high point inside the
    /// first of each.
    ranges: &'a [diff::RangeDelta],
}

fn side(run: &diff::RunPeak) -> Side<'_> {
    Side {
        file: &run.file,
        device: run.device,
        peak_allocated_bytes: run.peak_allocated_bytes,
        peak_allocated_time_us: run.peak_allocated_time_us,
        peak_reserved_bytes: run.peak_reserved_bytes,
        categories_at_peak: &run.categories_at_peak,
        growth: run.growth.as_ref(),
    }
}

const TOP: usize = 10;

fn top(list: &[SiteDelta]) -> &[SiteDelta] {
    list.get(..TOP.min(list.len())).unwrap_or_default()
}

/// What `diff` is asked.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options<'a> {
    /// JSON instead of text.
    pub json: bool,
    /// The gates that must hold.
    pub gates: &'a [Gate],
    /// The device compared (else each run's that peaks highest).
    pub device: Option<DeviceId>,
    /// Every iteration's phases, not only the first few.
    pub all_phases: bool,
    /// The part of each trace read (`None`: the whole).
    pub range: Option<TraceRange>,
}

/// Compares the traces at `a` and `b`. Returns whether every gate held.
pub fn run(a: &Path, b: &Path, options: &Options<'_>, out: &mut dyn Write) -> Result<bool> {
    let Options { json, gates, device, all_phases, range } = *options;
    if a == b {
        bail!("{} is compared with itself: give two different traces", a.display());
    }
    let (side_a, side_b) = (open_side(a, device, range)?, open_side(b, device, range)?);
    if side_a.len() > 1 || side_b.len() > 1 {
        let peaks = |side: ByRank| side.into_iter().map(|(rank, (_, peak))| (rank, peak)).collect::<Vec<_>>();
        return ranks(a, b, &peaks(side_a), &peaks(side_b), options, out);
    }
    let peak_of = |path: &Path, side: ByRank| -> Result<diff::RunPeak> {
        let Some((_, (fits, peak))) = side.into_iter().next() else { bail!("{}: no trace", path.display()) };
        fits?;
        Ok(peak)
    };
    let d = diff::diff(peak_of(a, side_a)?, peak_of(b, side_b)?);
    let results: Vec<GateResult> = gates.iter().map(|g| check(g, &d)).collect::<Result<_>>()?;
    if json {
        let delta = Delta {
            peak_allocated_bytes: d.b.peak_allocated_bytes as i64 - d.a.peak_allocated_bytes as i64,
            peak_reserved_bytes: d.b.peak_reserved_bytes as i64 - d.a.peak_reserved_bytes as i64,
            peak_allocated_percent: percent(d.a.peak_allocated_bytes, d.b.peak_allocated_bytes),
            categories_at_peak: d.categories.iter().map(|c| (c.category, c.delta)).collect(),
        };
        let summary = crate::words::diff_summary(&d);
        let doc = Json {
            a: side(&d.a),
            b: side(&d.b),
            delta,
            summary: &summary,
            summary_phase: d.headline.phase.as_ref(),
            top_grown: top(&d.grown),
            top_shrunk: top(&d.shrunk),
            only_in_a: top(&d.only_in_a),
            only_in_b: top(&d.only_in_b),
            names: d.names.as_deref().map(|n| n.get(..TOP.min(n.len())).unwrap_or_default()),
            phases: Phases {
                a_from: d.a.phases.from,
                b_from: d.b.phases.from,
                a_peak_phase: d.a.peak_phase,
                b_peak_phase: d.b.peak_phase,
                rows: d
                    .phases
                    .iter()
                    .filter(|r| all_phases || r.iteration.is_none_or(|i| i <= ITERATIONS_SHOWN))
                    .collect(),
                iterations: d.phases.iter().filter_map(|r| r.iteration).max().unwrap_or(0),
                ranges: &d.ranges,
            },
            gates: &results,
            range: range.map(|r| r.to_string()),
        };
        serde_json::to_writer_pretty(&mut *out, &doc)?;
        writeln!(out)?;
    } else {
        write_text(&d, &results, all_phases, range, out)?;
    }
    Ok(results.iter().all(|r| r.passed))
}

/// One side of a comparison by rank: whether it holds the device asked for, and its peak.
type ByRank = Vec<(u32, (Result<()>, diff::RunPeak))>;

/// One side of a comparison: a trace, or a run of several ranks (a directory of rank files, or a
/// recording of several ranks). Each rank's peak is taken as its file is read and the trace is
/// dropped, so a run of many ranks holds one trace per reader at a time.
fn open_side(path: &Path, device: Option<DeviceId>, range: Option<TraceRange>) -> Result<ByRank> {
    let (numbered, notes, skipped) = crate::runs::each_rank(&[path.to_path_buf()], range, |file, trace, source| {
        let fits = super::check_device(file, trace, device);
        // A file's name as given, a rank of a recording as `file (rank N)`.
        (fits, diff::compared_run(trace, source, device))
    })?;
    for note in crate::words::run_notes(&notes, &skipped) {
        eprintln!("warning: {note}");
    }
    Ok(numbered.into_iter().map(|(rank, _, _, (_, taken))| (rank, taken)).collect())
}

/// A rank's comparison.
#[derive(Serialize)]
struct RankRow {
    rank: u32,
    a_peak_allocated_bytes: u64,
    b_peak_allocated_bytes: u64,
    delta_bytes: i64,
    percent: Option<f64>,
}

/// `diff` of two runs of several ranks: ranks paired by number; each gate must hold on every
/// rank, and says the rank where it came out worst; the full comparison of the rank whose peak
/// grew most.
fn ranks(
    a: &Path,
    b: &Path,
    side_a: &[(u32, diff::RunPeak)],
    side_b: &[(u32, diff::RunPeak)],
    options: &Options<'_>,
    out: &mut dyn Write,
) -> Result<bool> {
    let Options { json, gates, range, .. } = *options;
    use crate::analysis::query::compare::{RanksNotCompared, compare_ranks, peak_growth};
    let compared = compare_ranks(side_a, side_b, gates).map_err(|why| match why {
        RanksNotCompared::NoRankInCommon(ranks_a, ranks_b) => {
            anyhow::anyhow!(
                "{} and {} have no rank in common (ranks {ranks_a:?} and {ranks_b:?})",
                a.display(),
                b.display()
            )
        }
        RanksNotCompared::Gate(rank, why) => {
            let d = compared_rank(side_a, side_b, rank);
            anyhow::anyhow!("rank {rank}: {}", d.map_or_else(String::new, |d| crate::words::gate_unchecked(&why, &d)))
        }
    })?;
    let (worst_rank, worst) = compared.most_grown();
    let (only_a, only_b, results) = (&compared.only_in_a, &compared.only_in_b, &compared.gates);
    let grew = peak_growth;
    let rows: Vec<RankRow> = compared
        .pairs
        .iter()
        .map(|(rank, d)| RankRow {
            rank: *rank,
            a_peak_allocated_bytes: d.a.peak_allocated_bytes,
            b_peak_allocated_bytes: d.b.peak_allocated_bytes,
            delta_bytes: grew(d),
            percent: percent(d.a.peak_allocated_bytes, d.b.peak_allocated_bytes),
        })
        .collect();
    let (a_max, b_max) = compared.highest_peak;
    if json {
        let gates: Vec<serde_json::Value> = results
            .iter()
            .map(|(g, rank)| {
                let mut v = serde_json::to_value(g).unwrap_or_default();
                if let Some(o) = v.as_object_mut() {
                    o.insert("worst_rank".to_owned(), (*rank).into());
                }
                v
            })
            .collect();
        let doc = serde_json::json!({
            "a": a.display().to_string(),
            "b": b.display().to_string(),
            "ranks": rows,
            "only_in_a": only_a,
            "only_in_b": only_b,
            "highest_peak": { "a": a_max, "b": b_max, "percent": percent(a_max, b_max) },
            "most_grown_rank": worst_rank,
            "most_grown": { "summary": crate::words::diff_summary(worst) },
            "gates": gates,
            "range": range.map(|r| r.to_string()),
        });
        serde_json::to_writer_pretty(&mut *out, &doc)?;
        writeln!(out)?;
    } else {
        writeln!(out, "A  {} ({} ranks)", a.display(), side_a.len())?;
        writeln!(out, "B  {} ({} ranks)", b.display(), side_b.len())?;
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
        for r in &rows {
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
            let verdict = if g.passed { "ok" } else { "FAILED" };
            let actual = crate::words::gate_change(g.actual_percent);
            writeln!(
                out,
                "gate {} (on every rank; worst: rank {rank}): {actual}, limit +{}%: {verdict}",
                g.gate, g.limit_percent
            )?;
        }
    }
    Ok(results.iter().all(|(r, _)| r.passed))
}

/// Rank `rank` of both runs compared (to say why a gate cannot be checked on it).
fn compared_rank(a: &[(u32, diff::RunPeak)], b: &[(u32, diff::RunPeak)], rank: u32) -> Option<Diff> {
    let of = |side: &[(u32, diff::RunPeak)]| side.iter().find(|(r, _)| *r == rank).map(|(_, p)| p.clone());
    Some(diff::diff(of(a)?, of(b)?))
}

/// A site's line, and its paths under it when several reach it or its code moved.
fn write_site(s: &SiteDelta, out: &mut dyn Write) -> Result<()> {
    let moved = s.moved_from.as_ref().map_or_else(String::new, |m| format!("  (moved from {m})"));
    writeln!(out, "  {:>12} -> {:>12} {:>13}  {}{moved}", bytes(s.a), bytes(s.b), signed_bytes(s.delta), s.site)?;
    if s.paths.len() > 1 {
        const PATHS: usize = 4;
        for p in s.paths.iter().take(PATHS) {
            let via = p.via.as_deref().unwrap_or_default();
            writeln!(out, "  {:>12} -> {:>12} {:>13}    via {via}", bytes(p.a), bytes(p.b), signed_bytes(p.delta))?;
        }
        if s.paths.len() > PATHS {
            writeln!(out, "  {:>41}    ... and {} more paths", "", s.paths.len() - PATHS)?;
        }
    }
    Ok(())
}

/// Iterations shown one by one in the text (all of them are in the JSON).
const ITERATIONS_SHOWN: u32 = 4;

/// The phases side by side: each kind's highest, then the first iterations.
fn write_phases(d: &Diff, all_phases: bool, out: &mut dyn Write) -> Result<()> {
    use crate::words::{phase_row_label, phases_from};
    if d.phases.is_empty() {
        writeln!(out, "phase by phase: cannot be compared")?;
        for (name, run) in [("A", &d.a), ("B", &d.b)] {
            if run.phases.is_empty() {
                writeln!(out, "  {name} shows no phases: {}", phases_from(None))?;
            }
        }
        if !d.ranges.is_empty() {
            writeln!(out, "named ranges both runs have (the high point inside the first of each, A -> B):")?;
            for r in d.ranges.iter().take(TOP) {
                writeln!(
                    out,
                    "  {:>12} -> {:>12} {:>13}{:>10}  {}",
                    bytes(r.a),
                    bytes(r.b),
                    signed_bytes(r.delta),
                    pct_text(percent(r.a, r.b)),
                    r.name
                )?;
            }
        }
        return Ok(());
    }
    writeln!(out, "phase by phase (the high point of allocated memory in each):")?;
    for (name, run) in [("A", &d.a), ("B", &d.b)] {
        let peak =
            run.peak_phase.map_or_else(String::new, |p| format!("; its peak is in {}", crate::words::phase_phrase(p)));
        writeln!(out, "  {name}'s phases: {}{peak}", phases_from(run.phases.from))?;
    }
    let last = d.phases.iter().filter_map(|r| r.iteration).max().unwrap_or(0);
    writeln!(out, "  {:<30}{:>12}{:>12}{:>13}{:>10}  most changed", "", "A", "B", "B - A", "")?;
    for r in &d.phases {
        if !all_phases && r.iteration.is_some_and(|i| i > ITERATIONS_SHOWN) {
            continue;
        }
        let side = |s: Option<&diff::PhaseSide>| s.map_or_else(|| "none".to_owned(), |s| bytes(s.high_bytes));
        let indent = if r.iteration.is_some() && r.phase.is_some() { "    " } else { "  " };
        let label = format!("{indent}{}", phase_row_label(r));
        let (delta, pct) = match r.delta {
            Some(delta) => (signed_bytes(delta), pct_text(r.percent)),
            None => (String::new(), String::new()),
        };
        let most = r
            .categories
            .iter()
            .find(|c| c.delta != 0)
            .map_or_else(String::new, |c| format!("  {} {}", c.category.name(), signed_bytes(c.delta)));
        writeln!(out, "{label:<32}{:>12}{:>12}{delta:>13}{pct:>10}{most}", side(r.a.as_ref()), side(r.b.as_ref()))?;
    }
    if !all_phases && last > ITERATIONS_SHOWN {
        let more = (last - ITERATIONS_SHOWN) as usize;
        let noun = if more == 1 { "iteration" } else { "iterations" };
        writeln!(out, "  ... and {} more {noun} (--all-phases lists them)", crate::units::count(more))?;
    }
    // Where the phase the sentence leads with changed.
    if let Some(p) = &d.headline.phase
        && let Some(r) = d.phases.iter().find(|r| r.phase == Some(p.kind) && r.iteration.is_none())
        && !r.sites.is_empty()
    {
        writeln!(
            out,
            "allocation sites that changed most at the high point of {} (A -> B):",
            crate::words::phase_phrase(p.kind)
        )?;
        for s in r.sites.iter().take(5) {
            write_site(s, out)?;
        }
    }
    Ok(())
}

fn pct_text(p: Option<f64>) -> String {
    crate::units::percent(p)
}

fn write_text(
    d: &Diff,
    gates: &[GateResult],
    all_phases: bool,
    range: Option<TraceRange>,
    out: &mut dyn Write,
) -> Result<()> {
    writeln!(out, "A  {}", d.a.file)?;
    writeln!(out, "B  {}", d.b.file)?;
    if let Some(range) = range {
        writeln!(out, "   {}", crate::words::range_note(range))?;
    }
    writeln!(out)?;
    writeln!(out, "{}", crate::words::diff_summary(d))?;
    // Memory that grows every iteration, in either run: said before the peaks (it decides them).
    if [&d.a, &d.b].iter().any(|r| r.growth.as_ref().is_some_and(|g| g.alarms())) {
        for (name, run) in [("A", &d.a), ("B", &d.b)] {
            match &run.growth {
                Some(g) => {
                    let lines = crate::words::growth_lines(g, &run.label);
                    writeln!(out, "{name}: {}", lines.first().map_or("", String::as_str))?;
                    if g.grows
                        && let Some(site) = lines.get(1)
                    {
                        writeln!(out, "   {site}")?;
                    }
                }
                None => writeln!(out, "{name}: fewer than three iterations: growth cannot be told")?,
            }
        }
    }
    writeln!(out)?;
    writeln!(out, "{:<28}{:>12}{:>12}{:>13}{:>10}", "", "A", "B", "B - A", "")?;
    let rows = [
        ("peak allocated", d.a.peak_allocated_bytes, d.b.peak_allocated_bytes),
        ("peak reserved", d.a.peak_reserved_bytes, d.b.peak_reserved_bytes),
    ];
    for (name, a, b) in rows {
        let delta = b as i64 - a as i64;
        writeln!(
            out,
            "{name:<28}{:>12}{:>12}{:>13}{:>10}",
            bytes(a),
            bytes(b),
            signed_bytes(delta),
            if a == 0 && b == 0 { String::new() } else { pct_text(percent(a, b)) }
        )?;
    }
    writeln!(out, "at the peak, by category:")?;
    for c in &d.categories {
        writeln!(
            out,
            "  {:<26}{:>12}{:>12}{:>13}{:>10}",
            c.category.name(),
            bytes(c.a),
            bytes(c.b),
            signed_bytes(c.delta),
            pct_text(c.percent)
        )?;
    }
    write_phases(d, all_phases, out)?;
    for (title, list) in
        [("that grew", &d.grown), ("that shrank", &d.shrunk), ("only in A", &d.only_in_a), ("only in B", &d.only_in_b)]
    {
        if list.is_empty() {
            continue;
        }
        writeln!(out, "allocation sites {title} (live bytes at each peak, A -> B, matched by whole call path):")?;
        for s in top(list) {
            write_site(s, out)?;
        }
        if list.len() > TOP {
            writeln!(out, "  ... and {} more", list.len() - TOP)?;
        }
    }
    if let Some(names) = d.names.as_deref().filter(|n| !n.is_empty()) {
        writeln!(out, "by tag or module name (live bytes at each peak, A -> B):")?;
        for n in names.iter().take(TOP) {
            writeln!(out, "  {:>12} -> {:>12} {:>13}  {}", bytes(n.a), bytes(n.b), signed_bytes(n.delta), n.name)?;
        }
        if names.len() > TOP {
            writeln!(out, "  ... and {} more", names.len() - TOP)?;
        }
    }
    for g in gates {
        let verdict = if g.passed { "ok" } else { "FAILED" };
        let actual = crate::words::gate_change(g.actual_percent);
        writeln!(out, "gate {}: {actual}, limit +{}%: {verdict}", g.gate, g.limit_percent)?;
    }
    Ok(())
}
