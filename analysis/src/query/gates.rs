//! Gates on a comparison: limits on how much memory may grow from run A to run B (`diff
//! --fail-if-...`, the pytest plugin's baseline), what each limits, and how each comes out.

use serde::Serialize;
use vramscope_trace_format::Category;

use crate::diff::{CategoryDelta, Diff, percent};
use crate::phases::{PhaseKind, PhasesFrom};

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

/// A limit on a phase's growth: `--fail-if-phase-grows PHASE[:CAT]=PCT`.
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
    Category::from_name(name.trim()).ok_or_else(|| {
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
#[derive(Clone, Debug, Serialize, schemars::JsonSchema, PartialEq)]
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

/// Why a gate could not be checked.
#[derive(Clone, Debug, PartialEq)]
pub enum Unchecked {
    /// A run (or both) shows no phase of the kind gated.
    NoPhase {
        /// The phase gated.
        phase: PhaseKind,
        /// Which runs lack it: A, B.
        missing: [bool; 2],
        /// Where each run told its phases from (A's, B's).
        from: [Option<PhasesFrom>; 2],
    },
    /// The categories at the phase's high points were not worked out (past the first phases).
    NoCategories {
        /// The phase gated.
        phase: PhaseKind,
        /// The category gated.
        category: Category,
    },
}

/// How `gate` comes out on `d`, or why it cannot be checked (a run without the phase).
pub fn check(gate: &Gate, d: &Diff) -> Result<GateResult, Unchecked> {
    let (name, a, b, limit) = match gate {
        Gate::PeakGrows(limit) => {
            ("peak_allocated_bytes".to_owned(), d.a.peak_allocated_bytes, d.b.peak_allocated_bytes, *limit)
        }
        Gate::CategoryGrows(category, limit) => (
            format!("category:{}", category.name()),
            d.a.categories_at_peak.get(category).copied().unwrap_or(0),
            d.b.categories_at_peak.get(category).copied().unwrap_or(0),
            *limit,
        ),
        Gate::PhaseGrows(g) => {
            let row = d.phases.iter().find(|r| r.phase == Some(g.phase) && r.iteration.is_none());
            let Some((sa, sb)) = row.and_then(|r| r.a.as_ref().zip(r.b.as_ref())) else {
                let missing = [&d.a, &d.b].map(|run| run.phases.highest(g.phase).is_none());
                return Err(Unchecked::NoPhase { phase: g.phase, missing, from: [d.a.phases.from, d.b.phases.from] });
            };
            match g.category {
                None => (format!("phase:{}", g.phase.name()), sa.high_bytes, sb.high_bytes, g.limit),
                Some(category) => {
                    if row.is_some_and(|r| r.categories.is_empty()) {
                        return Err(Unchecked::NoCategories { phase: g.phase, category });
                    }
                    let of = |pick: fn(&CategoryDelta) -> u64| {
                        row.and_then(|r| r.categories.iter().find(|c| c.category == category)).map_or(0, pick)
                    };
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
