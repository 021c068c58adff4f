//! `vramscope diff A B`: two runs compared at their peaks, as text or JSON, with gates that turn
//! a memory regression into a failing exit status.

use std::io::Write;
use std::path::Path;

use anyhow::{Result, bail};
use serde::Serialize;
use vramscope_trace_format::{Category, DeviceId};

use crate::analysis::diff::{self, Diff, SiteDelta, percent};
use crate::load;
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
}

fn side(run: &diff::RunPeak) -> Side<'_> {
    Side {
        file: &run.file,
        device: run.device,
        peak_allocated_bytes: run.peak_allocated_bytes,
        peak_allocated_time_us: run.peak_allocated_time_us,
        peak_reserved_bytes: run.peak_reserved_bytes,
        categories_at_peak: &run.categories_at_peak,
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
    let load_run = |path: &Path| -> Result<diff::RunPeak> {
        let loaded = load::load(path)?;
        for warning in &loaded.warnings {
            eprintln!("warning: {}: {warning}", path.display());
        }
        super::check_device(path, &loaded.trace, device)?;
        Ok(diff::run_peak(&loaded.trace, &path.display().to_string(), device))
    };
    let d = diff::diff(load_run(a)?, load_run(b)?);
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
        };
        serde_json::to_writer_pretty(&mut *out, &doc)?;
        writeln!(out)?;
    } else {
        write_text(&d, &results, out)?;
    }
    Ok(results.iter().all(|r| r.passed))
}

fn pct_text(p: Option<f64>) -> String {
    p.map_or_else(|| "new".to_owned(), |p| format!("{p:+.1}%"))
}

fn write_text(d: &Diff, gates: &[GateResult], out: &mut dyn Write) -> Result<()> {
    writeln!(out, "A  {}", d.a.file)?;
    writeln!(out, "B  {}", d.b.file)?;
    writeln!(out)?;
    writeln!(out, "{}", crate::words::diff_summary(d))?;
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
