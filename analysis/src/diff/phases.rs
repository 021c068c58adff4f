//! Two runs' phases paired: each kind's highest point (forward, backward, optimizer step), each
//! iteration, and each phase of each iteration, side by side with their categories; and the
//! phase whose high point changed much more than the peak, which the sentence on top then leads
//! with (a longer context grows activations by gigabytes while both runs peak, a few megabytes
//! apart, in the optimizer step).

use std::collections::BTreeMap;

use serde::Serialize;
use vramscope_trace_format::Category;

use super::sites::{self, SiteDelta};
use super::{CategoryDelta, RunPeak, category_deltas, percent, signed};
use crate::phases::{PhaseHigh, PhaseKind};

/// One run's side of a phase.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema, PartialEq)]
pub struct PhaseSide {
    /// The iteration it is in (its highest, for a kind's row).
    pub iteration: u32,
    /// Its high point: the most allocated in it.
    pub high_bytes: u64,
    /// When that was, ns on the run's clock (µs in the JSON).
    #[serde(rename = "high_time_us", serialize_with = "crate::micros::ns_as_us")]
    pub high_time_ns: i64,
    /// Its first event's time (ns on the run's clock).
    #[serde(skip)]
    pub start_ns: i64,
    /// Its last event's time.
    #[serde(skip)]
    pub end_ns: i64,
}

impl PhaseSide {
    fn of(h: &PhaseHigh) -> Self {
        Self {
            iteration: h.iteration,
            high_bytes: h.high_bytes,
            start_ns: h.start_ns,
            end_ns: h.end_ns,
            high_time_ns: h.high_time_ns,
        }
    }
}

/// A phase in both runs.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema, PartialEq)]
pub struct PhaseDelta {
    /// The phase; none for a whole iteration.
    pub phase: Option<PhaseKind>,
    /// The iteration; none for a kind's highest over every iteration.
    pub iteration: Option<u32>,
    /// A's side, if A has it.
    pub a: Option<PhaseSide>,
    /// B's side, if B has it.
    pub b: Option<PhaseSide>,
    /// B's high point minus A's, when both have it.
    pub delta: Option<i64>,
    /// The change as a percentage of A's.
    pub percent: Option<f64>,
    /// Bytes by category at each high point, largest change first (when both have them).
    pub categories: Vec<CategoryDelta>,
    /// For a kind's row: the sites that changed most at the two high points (at most
    /// `SITES_PER_PHASE`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sites: Vec<SiteDelta>,
}

/// Sites kept for each phase kind's row.
pub const SITES_PER_PHASE: usize = 10;

/// The phase the sentence on top leads with, and why.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct PhaseChange {
    /// The phase.
    pub kind: PhaseKind,
    /// A's high point in it.
    pub a_bytes: u64,
    /// B's.
    pub b_bytes: u64,
    /// B - A.
    pub delta: i64,
    /// As a percentage of A's.
    pub percent: Option<f64>,
    /// The category that moved most the same way, and by how much.
    pub mostly: Option<(Category, i64)>,
    /// Whether that category is nearly all of the change (90% or more).
    pub nearly_all: bool,
    /// The allocation site that moved most the same way.
    pub site: Option<String>,
    /// The phase both runs peak in, when they peak in the same one (and it is another).
    pub both_peak_in: Option<PhaseKind>,
}

fn row(phase: Option<PhaseKind>, iteration: Option<u32>, a: Option<&PhaseHigh>, b: Option<&PhaseHigh>) -> PhaseDelta {
    let delta = a.zip(b).map(|(x, y)| signed(x.high_bytes, y.high_bytes));
    let percent = a.zip(b).and_then(|(x, y)| percent(x.high_bytes, y.high_bytes));
    let categories = match (a.and_then(|x| x.categories.as_ref()), b.and_then(|y| y.categories.as_ref())) {
        (Some(x), Some(y)) => category_deltas(x, y),
        _ => Vec::new(),
    };
    PhaseDelta {
        phase,
        iteration,
        a: a.map(PhaseSide::of),
        b: b.map(PhaseSide::of),
        delta,
        percent,
        categories,
        sites: Vec::new(),
    }
}

/// The phases of two runs paired: each kind's highest, then each iteration and its phases.
/// Empty when either run shows no phase.
pub fn pair(a: &RunPeak, b: &RunPeak) -> Vec<PhaseDelta> {
    if a.phases.is_empty() || b.phases.is_empty() {
        return Vec::new();
    }
    let mut rows = Vec::new();
    for kind in PhaseKind::ALL {
        let (ha, hb) = (a.phases.highest(kind), b.phases.highest(kind));
        if ha.is_none() && hb.is_none() {
            continue;
        }
        let mut r = row(Some(kind), None, ha, hb);
        let (sa, sb) = (a.at_phase.get(&kind), b.at_phase.get(&kind));
        if let (Some(sa), Some(sb)) = (sa, sb) {
            let mut all = sites::match_sites(&sa.stacks, &sb.stacks, &a.lines, &b.lines);
            all.retain(|s| s.delta != 0);
            all.sort_by(|x, y| y.delta.unsigned_abs().cmp(&x.delta.unsigned_abs()).then(x.site.cmp(&y.site)));
            all.truncate(SITES_PER_PHASE);
            r.sites = all;
        }
        rows.push(r);
    }
    // Each run's phases and iterations by (iteration, kind), for pairing without a search.
    let index = |r: &RunPeak| -> BTreeMap<(u32, Option<PhaseKind>), PhaseHigh> {
        r.phases.phases.iter().chain(&r.phases.iterations).map(|p| ((p.iteration, p.kind), p.clone())).collect()
    };
    let (ia, ib) = (index(a), index(b));
    let iterations: std::collections::BTreeSet<u32> = ia.keys().chain(ib.keys()).map(|k| k.0).collect();
    for iteration in iterations {
        for kind in std::iter::once(None).chain(PhaseKind::ALL.map(Some)) {
            let (pa, pb) = (ia.get(&(iteration, kind)), ib.get(&(iteration, kind)));
            if pa.is_some() || pb.is_some() {
                rows.push(row(kind, Some(iteration), pa, pb));
            }
        }
    }
    rows
}

/// The phase kind whose highest point changed most, when that is much more than the peak did
/// (more than twice, and at least 1 MiB and 1% of A's peak).
pub fn biggest_change(a: &RunPeak, b: &RunPeak, rows: &[PhaseDelta], peak_delta: i64) -> Option<PhaseChange> {
    let best = rows
        .iter()
        .filter(|r| r.iteration.is_none())
        .filter_map(|r| Some((r, r.phase?, r.delta?, r.a.as_ref()?, r.b.as_ref()?)))
        .max_by_key(|(_, kind, d, _, _)| (d.unsigned_abs(), std::cmp::Reverse(*kind)))?;
    let (r, kind, delta, sa, sb) = best;
    let floor = (1u64 << 20).max(a.peak_allocated_bytes / 100);
    if delta.unsigned_abs() <= 2 * peak_delta.unsigned_abs() || delta.unsigned_abs() < floor {
        return None;
    }
    let same_way = |d: i64| d != 0 && (d < 0) == (delta < 0);
    let mostly = r.categories.iter().find(|c| same_way(c.delta));
    let site = r
        .sites
        .iter()
        .filter(|s| same_way(s.delta) && s.site != sites::NO_STACK)
        .max_by_key(|s| s.delta.unsigned_abs());
    let both_peak_in = a.peak_phase.filter(|p| Some(*p) == b.peak_phase && *p != kind);
    Some(PhaseChange {
        kind,
        a_bytes: sa.high_bytes,
        b_bytes: sb.high_bytes,
        delta,
        percent: r.percent,
        mostly: mostly.map(|c| (c.category, c.delta)),
        nearly_all: mostly.is_some_and(|c| c.delta.unsigned_abs() * 10 >= delta.unsigned_abs() * 9),
        site: site.map(|s| s.site.clone()),
        both_peak_in,
    })
}
