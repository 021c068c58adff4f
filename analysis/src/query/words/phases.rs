//! Phases in words: their names, where they came from, and the sentence on top of a comparison
//! when a phase changed much more than the peak.

use crate::diff::{Headline, PhaseChange, PhaseDelta};
use crate::phases::{PhaseKind, Phases, PhasesFrom};
use crate::query::units::{bytes, count, duration_ns, signed_bytes};

/// A phase as a sentence names it: `the forward pass`, `the optimizer step`.
pub fn phase_phrase(kind: PhaseKind) -> &'static str {
    match kind {
        PhaseKind::Forward => "the forward pass",
        PhaseKind::Backward => "the backward pass",
        PhaseKind::OptimizerStep => "the optimizer step",
    }
}

/// A phase as a table row names it: `forward`, `optimizer step`.
pub fn phase_label(kind: PhaseKind) -> &'static str {
    match kind {
        PhaseKind::Forward => "forward",
        PhaseKind::Backward => "backward",
        PhaseKind::OptimizerStep => "optimizer step",
    }
}

/// Every iteration's high points, a line each: the iteration, each phase kind found and the
/// iteration as a whole (`-` where an iteration lacks a kind), headed by the columns.
pub fn phase_table(phases: &Phases) -> Vec<String> {
    use std::collections::BTreeMap;
    let kinds = phases.kinds();
    let mut rows: BTreeMap<u32, (Vec<Option<u64>>, Option<u64>)> = BTreeMap::new();
    for p in &phases.phases {
        let Some(column) = kinds.iter().position(|k| Some(*k) == p.kind) else { continue };
        rows.entry(p.iteration).or_insert_with(|| (vec![None; kinds.len()], None)).0[column] = Some(p.high_bytes);
    }
    for p in &phases.iterations {
        rows.entry(p.iteration).or_insert_with(|| (vec![None; kinds.len()], None)).1 = Some(p.high_bytes);
    }
    let cell = |v: Option<u64>| v.map_or_else(|| "-".to_owned(), bytes);
    let mut header = format!("{:>9}", "iteration");
    for kind in &kinds {
        header.push_str(&format!("  {:>14}", phase_label(*kind)));
    }
    header.push_str(&format!("  {:>14}", "whole"));
    let mut lines = vec![header];
    for (iteration, (cells, whole)) in rows {
        let mut line = format!("{iteration:>9}");
        for v in cells {
            line.push_str(&format!("  {:>14}", cell(v)));
        }
        line.push_str(&format!("  {:>14}", cell(whole)));
        lines.push(line);
    }
    lines
}

/// A row of a phase comparison: `forward (highest)`, `iteration 2`, `iteration 2 backward`.
pub fn phase_row_label(row: &PhaseDelta) -> String {
    match (row.phase, row.iteration) {
        (Some(kind), None) => format!("{} (highest)", phase_label(kind)),
        (None, Some(i)) => format!("iteration {i}"),
        (Some(kind), Some(i)) => format!("iteration {i} {}", phase_label(kind)),
        (None, None) => "the run".to_owned(),
    }
}

/// Where a run's phases came from, or that it has none.
pub fn phases_from(from: Option<PhasesFrom>) -> &'static str {
    match from {
        Some(PhasesFrom::Recorded) => "recorded",
        Some(PhasesFrom::Annotations) => "from phase-named ranges (record_function, Optimizer.step, ProfilerStep)",
        Some(PhasesFrom::Stacks) => {
            "from the allocations' stacks and the operators around them (boundaries approximate)"
        }
        None => {
            "no recorded phases, no ranges named like a phase, and no stacks that tell forward, backward and the \
             optimizer step apart"
        }
    }
}

/// The sentence on top when a phase changed much more than the peak.
pub fn phase_headline(p: &PhaseChange, h: &Headline) -> String {
    let direction = if p.delta < 0 { "lower" } else { "higher" };
    let pct = p.percent.map_or_else(String::new, |x| format!(" ({x:+.0}%)"));
    let mut text =
        format!("B's high point in {} is {} {direction}{pct}", phase_phrase(p.kind), bytes(p.delta.unsigned_abs()));
    if let Some((category, delta)) = p.mostly {
        let name = super::plural(category);
        let how = if p.nearly_all { "nearly all" } else { "mostly" };
        text.push_str(&format!(", {how} {name} ({})", signed_bytes(delta)));
        if let Some(site) = &p.site {
            text.push_str(&format!(" at {site}"));
        }
    }
    let peak = match h.delta_bytes {
        0 => "the peak is unchanged".to_owned(),
        d => {
            let way = if d < 0 { "lower" } else { "higher" };
            let pct = h.percent.map_or_else(String::new, |x| format!(" ({x:+.0}%)"));
            format!("the peak is only {} {way}{pct}", bytes(d.unsigned_abs()))
        }
    };
    text.push_str(&format!("; {peak}"));
    if let Some(both) = p.both_peak_in {
        text.push_str(&format!(" because both runs peak in {}", phase_phrase(both)));
    }
    text.push('.');
    text
}

/// One line on a device's phases for `info`: each kind's high point and where they came from.
pub fn phases_line(phases: &Phases) -> Option<String> {
    let from = phases.from?;
    let highs: Vec<String> = PhaseKind::ALL
        .into_iter()
        .filter_map(|kind| phases.highest(kind).map(|h| format!("{} {}", phase_label(kind), bytes(h.high_bytes))))
        .collect();
    let iterations = phases.iterations.len();
    let over =
        if iterations > 1 { format!(" (the highest of {} iterations)", count(iterations)) } else { String::new() };
    let source = match from {
        PhasesFrom::Recorded => "recorded",
        PhasesFrom::Annotations => "from phase-named ranges",
        PhasesFrom::Stacks => "from the allocations' stacks and the operators around them",
    };
    Some(format!("high points {}{over}; {source}", highs.join(", ")))
}

/// Why a gate could not be checked.
pub fn gate_unchecked(why: &crate::query::gates::Unchecked) -> String {
    use crate::query::gates::Unchecked;
    match *why {
        Unchecked::NoPhase { phase, missing, from } => {
            let sides: Vec<(&str, Option<PhasesFrom>)> =
                [("A", from[0]), ("B", from[1])].into_iter().zip(missing).filter(|(_, m)| *m).map(|(s, _)| s).collect();
            let names: Vec<&str> = sides.iter().map(|(name, _)| *name).collect();
            format!(
                "the gate on {} cannot be checked: {} {} no {} phase ({})",
                phase.name(),
                names.join(" and "),
                if sides.len() == 1 { "shows" } else { "show" },
                phase_label(phase),
                match sides.as_slice() {
                    [(_, from)] => phases_from(*from),
                    _ => "neither run tells its phases",
                }
            )
        }
        Unchecked::NoCategories { phase, category } => format!(
            "the gate on {}:{} cannot be checked: the categories at the phase's high points were not worked out",
            phase.name(),
            category.name()
        ),
    }
}

/// Why the instant named `text` is not in the trace, in words.
pub fn not_in_trace(text: &str, why: &crate::query::instant::NotInTrace) -> String {
    use crate::query::instant::NotInTrace;
    let what = |kind: Option<PhaseKind>| kind.map_or("iteration", PhaseKind::name);
    match *why {
        NotInTrace::NoEvents => format!(
            "{text}: the trace has no allocator events (its categories are sampled totals), so what was alive at an \
             instant is not known"
        ),
        NotInTrace::AfterEnd { length_ns } => {
            format!(
                "{text} is after the trace's last event (at +{}): give an instant inside it",
                duration_ns(length_ns)
            )
        }
        NotInTrace::NotInIteration { kind, iterations: (first, last) } if first == last => {
            format!("{text}: the trace shows {} in iteration {first} only (numbered from 1)", what(kind))
        }
        NotInTrace::NotInIteration { kind, iterations: (first, last) } => {
            format!("{text}: the trace shows {} in iterations {first} to {last} (numbered from 1)", what(kind))
        }
        NotInTrace::NoPhase { kind } => format!(
            "{text}: the trace shows no {} phase (none recorded, none in ranges named like phases, none told by the \
             allocations' stacks); give +DURATION instead",
            what(kind)
        ),
    }
}
