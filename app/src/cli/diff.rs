//! `vramscope diff A B`: two runs compared at their peaks and phase by phase, as text or JSON,
//! with gates that turn a memory regression into a failing exit status.

use std::io::Write;
use std::path::Path;

use anyhow::{Result, bail};
use serde::Serialize;
use vramscope_trace_format::{Category, DeviceId};

use crate::analysis::diff::{self, Diff, PhaseDelta, SiteDelta, percent};
use crate::analysis::phases::PhaseKind;
use crate::units::{bytes, signed_bytes};

/// A limit on growth from A to B.
#[derive(Clone, Debug, PartialEq)]
pub enum Gate {
    /// The allocated peak may grow by at most this many percent.
    PeakGrows(f64),
    /// A category's bytes at the peak may grow by at most this many percent.
    CategoryGrows(Category, f64),
    /// A phase's high point (or a category at it) may grow by at most this many percent.
    PhaseGrows(PhaseGate),
}

/// `--fail-if-phase-grows PHASE[:CAT]=PCT`.
#[derive(Clone, Debug, PartialEq)]
pub struct PhaseGate {
    /// The phase, compared at its highest over the iterations.
    pub phase: PhaseKind,
    /// One category at the phase's high point, or all of it.
    pub category: Option<Category>,
    /// The growth allowed, in percent.
    pub limit: f64,
}

fn category_named(name: &str) -> Result<Category, String> {
    Category::ALL.iter().copied().find(|c| c.name() == name.trim()).ok_or_else(|| {
        let names: Vec<&str> = Category::ALL.iter().map(|c| c.name()).collect();
        format!("unknown category {name:?}; one of {}", names.join(", "))
    })
}

/// Parses `PHASE=PCT` or `PHASE:CATEGORY=PCT` (e.g. `forward=5`, `backward:activation=10`).
pub fn parse_phase_gate(text: &str) -> Result<PhaseGate, String> {
    let (what, pct) = text.split_once('=').ok_or("expected PHASE=PERCENT or PHASE:CATEGORY=PERCENT, e.g. forward=5")?;
    let (phase, category) = match what.split_once(':') {
        Some((phase, category)) => (phase, Some(category_named(category)?)),
        None => (what, None),
    };
    let phase = PhaseKind::from_name(phase)
        .ok_or_else(|| format!("unknown phase {:?}; one of forward, backward, optimizer_step", phase.trim()))?;
    let limit = pct.trim().parse::<f64>().map_err(|_| format!("{pct:?} is not a number of percent"))?;
    Ok(PhaseGate { phase, category, limit })
}

/// Parses `CATEGORY=PCT` (e.g. `activation=5`).
pub fn parse_category_gate(text: &str) -> Result<(Category, f64), String> {
    let (name, pct) = text.split_once('=').ok_or("expected CATEGORY=PERCENT, e.g. activation=5")?;
    let category = category_named(name)?;
    let pct = pct.trim().parse::<f64>().map_err(|_| format!("{pct:?} is not a number of percent"))?;
    Ok((category, pct))
}

/// How a gate came out.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct GateResult {
    /// What was checked, e.g. `peak_allocated_bytes` or `category:activation`.
    pub gate: String,
    /// The growth allowed, in percent.
    pub limit_percent: f64,
    /// The growth measured, in percent (null when A had none and B has some: unbounded).
    pub actual_percent: Option<f64>,
    /// Whether the growth is within the limit.
    pub passed: bool,
}

/// How a gate comes out on `d`; an error when it cannot be checked (a run without the phase).
fn check(gate: &Gate, d: &Diff) -> Result<GateResult> {
    let (name, a, b, limit) = match gate {
        Gate::PeakGrows(limit) => {
            ("peak_allocated_bytes".to_owned(), d.a.peak_allocated_bytes, d.b.peak_allocated_bytes, *limit)
        }
        Gate::CategoryGrows(category, limit) => (
            format!("category:{}", category.name()),
            d.a.categories_at_peak.get(category.name()).copied().unwrap_or(0),
            d.b.categories_at_peak.get(category.name()).copied().unwrap_or(0),
            *limit,
        ),
        Gate::PhaseGrows(g) => {
            let row = d.phases.iter().find(|r| r.phase == Some(g.phase) && r.iteration.is_none());
            let sides = row.and_then(|r| r.a.as_ref().zip(r.b.as_ref()));
            let Some((sa, sb)) = sides else {
                let missing: Vec<&str> = [("A", &d.a), ("B", &d.b)]
                    .into_iter()
                    .filter(|(_, run)| run.phases.highest(g.phase).is_none())
                    .map(|(side, _)| side)
                    .collect();
                bail!(
                    "the gate on {} cannot be checked: {} {} no {} phase ({})",
                    g.phase.name(),
                    missing.join(" and "),
                    if missing.len() == 1 { "shows" } else { "show" },
                    crate::words::phase_label(g.phase),
                    if missing.len() == 1 {
                        let run = if missing == ["A"] { &d.a } else { &d.b };
                        crate::words::phases_from(run.phases.from)
                    } else {
                        "neither run tells its phases"
                    }
                );
            };
            match g.category {
                None => (format!("phase:{}", g.phase.name()), sa.high_bytes, sb.high_bytes, g.limit),
                Some(category) => {
                    let of = |pick: fn(&diff::CategoryDelta) -> u64| {
                        row.and_then(|r| r.categories.iter().find(|c| c.category == category.name())).map_or(0, pick)
                    };
                    if row.is_some_and(|r| r.categories.is_empty()) {
                        bail!(
                            "the gate on {}:{} cannot be checked: the categories at the phase's high points \
                             were not worked out",
                            g.phase.name(),
                            category.name()
                        );
                    }
                    (format!("phase:{}:{}", g.phase.name(), category.name()), of(|c| c.a), of(|c| c.b), g.limit)
                }
            }
        }
    };
    let actual = percent(a, b);
    let passed = match actual {
        Some(p) => p <= limit,
        // From nothing to something is unbounded growth; nothing to nothing is none.
        None => b == 0,
    };
    Ok(GateResult { gate: name, limit_percent: limit, actual_percent: actual.or((b == 0).then_some(0.0)), passed })
}

#[derive(Serialize)]
struct Side<'a> {
    file: &'a str,
    device: DeviceId,
    peak_allocated_bytes: u64,
    peak_allocated_time_us: Option<i64>,
    peak_reserved_bytes: u64,
    categories_at_peak: &'a std::collections::BTreeMap<&'static str, u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    growth: Option<&'a crate::analysis::growth::Growth>,
}

#[derive(Serialize)]
struct Delta {
    peak_allocated_bytes: i64,
    peak_reserved_bytes: i64,
    peak_allocated_percent: Option<f64>,
    categories_at_peak: std::collections::BTreeMap<&'static str, i64>,
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

/// Compares the traces at `a` and `b`. Returns whether every gate held.
pub fn run(
    a: &Path,
    b: &Path,
    json: bool,
    gates: &[Gate],
    device: Option<DeviceId>,
    all_phases: bool,
    out: &mut dyn Write,
) -> Result<bool> {
    if a == b {
        bail!("{} is compared with itself: give two different traces", a.display());
    }
    let (side_a, side_b) = (open_side(a, device)?, open_side(b, device)?);
    if side_a.len() > 1 || side_b.len() > 1 {
        let peaks = |side: ByRank| side.into_iter().map(|(rank, (_, peak))| (rank, peak)).collect::<Vec<_>>();
        return ranks(a, b, &peaks(side_a), &peaks(side_b), json, gates, out);
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
            range: crate::load::cli_range().map(|r| r.to_string()),
        };
        serde_json::to_writer_pretty(&mut *out, &doc)?;
        writeln!(out)?;
    } else {
        write_text(&d, &results, all_phases, out)?;
    }
    Ok(results.iter().all(|r| r.passed))
}

/// One side of a comparison by rank: whether it holds the device asked for, and its peak.
type ByRank = Vec<(u32, (Result<()>, diff::RunPeak))>;

/// One side of a comparison: a trace, or a run of several ranks (a directory of rank files, or a
/// recording of several ranks). Each rank's peak is taken as its file is read and the trace is
/// dropped, so a run of many ranks holds one trace per reader at a time.
fn open_side(path: &Path, device: Option<DeviceId>) -> Result<ByRank> {
    let (numbered, notes, skipped) = crate::runs::each_rank(&[path.to_path_buf()], |file, trace, source| {
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
    json: bool,
    gates: &[Gate],
    out: &mut dyn Write,
) -> Result<bool> {
    let mut pairs: Vec<(u32, Diff)> = Vec::new();
    for (rank, peak_a) in side_a {
        let Some((_, peak_b)) = side_b.iter().find(|(r, _)| r == rank) else { continue };
        pairs.push((*rank, diff::diff(peak_a.clone(), peak_b.clone())));
    }
    let only = |x: &[(u32, diff::RunPeak)], y: &[(u32, diff::RunPeak)]| -> Vec<u32> {
        x.iter().map(|r| r.0).filter(|rank| y.iter().all(|o| o.0 != *rank)).collect()
    };
    let (only_a, only_b) = (only(side_a, side_b), only(side_b, side_a));
    if pairs.is_empty() {
        bail!(
            "{} and {} have no rank in common (ranks {:?} and {:?})",
            a.display(),
            b.display(),
            side_a.iter().map(|r| r.0).collect::<Vec<_>>(),
            side_b.iter().map(|r| r.0).collect::<Vec<_>>()
        );
    }
    // Each gate on every rank: its worst rank decides.
    let mut results: Vec<(GateResult, u32)> = Vec::new();
    for g in gates {
        let mut checked = Vec::new();
        for (rank, d) in &pairs {
            let result = check(g, d).map_err(|e| anyhow::anyhow!("rank {rank}: {e}"))?;
            checked.push((result, *rank));
        }
        let worst = checked.into_iter().min_by(|x, y| {
            let key = |r: &GateResult| (r.passed, r.actual_percent.map_or(f64::NEG_INFINITY, |p| -p));
            key(&x.0).partial_cmp(&key(&y.0)).unwrap_or(std::cmp::Ordering::Equal)
        });
        results.extend(worst);
    }
    let grew = |d: &Diff| d.b.peak_allocated_bytes as i64 - d.a.peak_allocated_bytes as i64;
    let Some((worst_rank, worst)) = pairs.iter().max_by_key(|(rank, d)| (grew(d), std::cmp::Reverse(*rank))) else {
        bail!("no ranks to compare");
    };
    let rows: Vec<RankRow> = pairs
        .iter()
        .map(|(rank, d)| RankRow {
            rank: *rank,
            a_peak_allocated_bytes: d.a.peak_allocated_bytes,
            b_peak_allocated_bytes: d.b.peak_allocated_bytes,
            delta_bytes: grew(d),
            percent: percent(d.a.peak_allocated_bytes, d.b.peak_allocated_bytes),
        })
        .collect();
    let max_peak = |d: fn(&Diff) -> u64| pairs.iter().map(|(_, x)| d(x)).max().unwrap_or(0);
    let (a_max, b_max) = (max_peak(|d| d.a.peak_allocated_bytes), max_peak(|d| d.b.peak_allocated_bytes));
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
            "range": crate::load::cli_range().map(|r| r.to_string()),
        });
        serde_json::to_writer_pretty(&mut *out, &doc)?;
        writeln!(out)?;
    } else {
        writeln!(out, "A  {} ({} ranks)", a.display(), side_a.len())?;
        writeln!(out, "B  {} ({} ranks)", b.display(), side_b.len())?;
        if let Some(range) = crate::load::cli_range() {
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
        for (what, list) in [("only in A", &only_a), ("only in B", &only_b)] {
            if !list.is_empty() {
                writeln!(out, "  ranks {what}: {list:?}")?;
            }
        }
        writeln!(out, "\nrank {worst_rank}:")?;
        write_text(worst, &[], false, out)?;
        for (g, rank) in &results {
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
            .map_or_else(String::new, |c| format!("  {} {}", c.category, signed_bytes(c.delta)));
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

fn write_text(d: &Diff, gates: &[GateResult], all_phases: bool, out: &mut dyn Write) -> Result<()> {
    writeln!(out, "A  {}", d.a.file)?;
    writeln!(out, "B  {}", d.b.file)?;
    if let Some(range) = crate::load::cli_range() {
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
            c.category,
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
