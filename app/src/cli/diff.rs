//! `vramscope diff A B`: two runs compared at their peaks, as text or JSON, with gates that turn
//! a memory regression into a failing exit status.

use std::io::Write;
use std::path::Path;

use anyhow::{Result, bail};
use serde::Serialize;
use vramscope_trace_format::{Category, DeviceId};

use crate::analysis::diff::{self, Diff, SiteDelta, percent};
use crate::units::{bytes, signed_bytes};

/// A limit on growth from A to B.
#[derive(Clone, Debug, PartialEq)]
pub enum Gate {
    /// The allocated peak may grow by at most this many percent.
    PeakGrows(f64),
    /// A category's bytes at the peak may grow by at most this many percent.
    CategoryGrows(Category, f64),
}

/// Parses `CATEGORY=PCT` (e.g. `activation=5`).
pub fn parse_category_gate(text: &str) -> Result<(Category, f64), String> {
    let (name, pct) = text.split_once('=').ok_or("expected CATEGORY=PERCENT, e.g. activation=5")?;
    let category = Category::ALL.iter().copied().find(|c| c.name() == name.trim()).ok_or_else(|| {
        let names: Vec<&str> = Category::ALL.iter().map(|c| c.name()).collect();
        format!("unknown category {name:?}; one of {}", names.join(", "))
    })?;
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

fn check(gate: &Gate, d: &Diff) -> GateResult {
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
    };
    let actual = percent(a, b);
    let passed = match actual {
        Some(p) => p <= limit,
        // From nothing to something is unbounded growth; nothing to nothing is none.
        None => b == 0,
    };
    GateResult { gate: name, limit_percent: limit, actual_percent: actual.or((b == 0).then_some(0.0)), passed }
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
    top_grown: &'a [SiteDelta],
    top_shrunk: &'a [SiteDelta],
    only_in_a: &'a [SiteDelta],
    only_in_b: &'a [SiteDelta],
    gates: &'a [GateResult],
    /// The part of both read (`--range`), if only a part.
    #[serde(skip_serializing_if = "Option::is_none")]
    range: Option<String>,
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
    let results: Vec<GateResult> = gates.iter().map(|g| check(g, &d)).collect();
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
            top_grown: top(&d.grown),
            top_shrunk: top(&d.shrunk),
            only_in_a: top(&d.only_in_a),
            only_in_b: top(&d.only_in_b),
            gates: &results,
            range: crate::load::cli_range().map(|r| r.to_string()),
        };
        serde_json::to_writer_pretty(&mut *out, &doc)?;
        writeln!(out)?;
    } else {
        write_text(&d, &results, out)?;
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
        (fits, diff::run_peak(trace, source, device))
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
    let results: Vec<(GateResult, u32)> = gates
        .iter()
        .filter_map(|g| {
            pairs.iter().map(|(rank, d)| (check(g, d), *rank)).min_by(|x, y| {
                let key = |r: &GateResult| (r.passed, r.actual_percent.map_or(f64::NEG_INFINITY, |p| -p));
                key(&x.0).partial_cmp(&key(&y.0)).unwrap_or(std::cmp::Ordering::Equal)
            })
        })
        .collect();
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
        write_text(worst, &[], out)?;
        for (g, rank) in &results {
            let verdict = if g.passed { "ok" } else { "FAILED" };
            let actual = g.actual_percent.map_or_else(|| "from none".to_owned(), |p| format!("{p:+.1}%"));
            writeln!(
                out,
                "gate {} (on every rank; worst: rank {rank}): grew {actual}, limit +{}%: {verdict}",
                g.gate, g.limit_percent
            )?;
        }
    }
    Ok(results.iter().all(|(r, _)| r.passed))
}

fn pct_text(p: Option<f64>) -> String {
    p.map_or_else(|| "new".to_owned(), |p| format!("{p:+.1}%"))
}

fn write_text(d: &Diff, gates: &[GateResult], out: &mut dyn Write) -> Result<()> {
    writeln!(out, "A  {}", d.a.file)?;
    writeln!(out, "B  {}", d.b.file)?;
    if let Some(range) = crate::load::cli_range() {
        writeln!(out, "   {}", crate::words::range_note(range))?;
    }
    writeln!(out)?;
    writeln!(out, "{}", crate::words::diff_summary(d))?;
    // Memory that grows every iteration, in either run: said before the peaks (it decides them).
    if [&d.a, &d.b].iter().any(|r| r.growth.as_ref().is_some_and(|g| g.grows)) {
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
            pct_text(percent(a, b))
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
    for (title, list) in
        [("that grew", &d.grown), ("that shrank", &d.shrunk), ("only in A", &d.only_in_a), ("only in B", &d.only_in_b)]
    {
        if list.is_empty() {
            continue;
        }
        writeln!(out, "allocation sites {title} (live bytes at each peak, A -> B):")?;
        for s in top(list) {
            writeln!(out, "  {:>12} -> {:>12} {:>13}  {}", bytes(s.a), bytes(s.b), signed_bytes(s.delta), s.site)?;
        }
        if list.len() > TOP {
            writeln!(out, "  ... and {} more", list.len() - TOP)?;
        }
    }
    for g in gates {
        let verdict = if g.passed { "ok" } else { "FAILED" };
        let actual = g.actual_percent.map_or_else(|| "from none".to_owned(), |p| format!("{p:+.1}%"));
        writeln!(out, "gate {}: grew {actual}, limit +{}%: {verdict}", g.gate, g.limit_percent)?;
    }
    Ok(())
}
