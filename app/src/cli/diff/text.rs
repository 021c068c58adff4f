//! `diff`'s text: the sentence, the peaks, the categories, the phases and the sites.

use std::io::Write;

use anyhow::Result;
use vramscope_trace_format::TraceRange;

use crate::query::diff::{self, Diff, SiteDelta, percent};
use crate::units::{bytes, signed_bytes};

use super::GateResult;
use crate::query::documents::{ITERATIONS_SHOWN, TOP_SITES as TOP};

fn top(list: &[SiteDelta]) -> &[SiteDelta] {
    list.get(..TOP.min(list.len())).unwrap_or_default()
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

pub(super) fn pct_text(p: Option<f64>) -> String {
    crate::units::percent(p)
}

pub(super) fn write_text(
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
        writeln!(out, "{}", crate::words::gate_line(g, None))?;
    }
    Ok(())
}
