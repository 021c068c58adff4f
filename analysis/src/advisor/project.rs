//! Step two and three of the advice: each remedy (or several together) projected, by replaying
//! the changed event stream where it can ([`Replayer`]) and else by the rules; the rows of the
//! singles and the pairs, the plan for a target, the smallest change that fits, and selective
//! checkpointing.

use super::parts::{Parts, phase_at};
use super::remedy::{self, Context, PAGE_BYTES, Reason, Remedy};
use super::simulate::{Method, Replayer, RuleParts};
use super::{Breakdown, Phase, Projection, SomeBlocksCheckpointed};

/// At most this many counts of blocks are replayed for selective checkpointing.
const SELECTIVE_COUNTS: usize = 8;

/// Selective checkpointing: for counts of blocks below all of them (every one up to
/// [`SELECTIVE_COUNTS`], else that many spread evenly), the replayed peak.
pub(super) fn selective_checkpointing(p: &Projector<'_>, target: Option<u64>) -> Vec<SomeBlocksCheckpointed> {
    let Some(replayer) = p.replayer.as_ref().filter(|_| p.ctx.training) else { return Vec::new() };
    let n = replayer.checkpointable_blocks();
    if n < 2 {
        return Vec::new();
    }
    let mut counts: Vec<usize> = if n - 1 <= SELECTIVE_COUNTS {
        (1..n).collect()
    } else {
        (1..=SELECTIVE_COUNTS).map(|i| (i * n / (SELECTIVE_COUNTS + 1)).max(1)).collect()
    };
    counts.dedup();
    counts
        .into_iter()
        .filter_map(|blocks| {
            let (peak, _) = replayer.project_checkpointing(&[Remedy::ActivationCheckpointing], p.rules, blocks)?;
            let reserved = (peak.bytes as f64 * remedy::reserve_ratio(p.ctx)).round() as u64;
            Some(SomeBlocksCheckpointed {
                blocks,
                of: n,
                projected_peak_allocated_bytes: peak.bytes,
                projected_peak_reserved_bytes: reserved,
                fits: target.is_some_and(|t| reserved <= t),
            })
        })
        .collect()
}

/// What a projection replayed from the changed event stream may be off by: what the replay
/// does not change (temporaries of the recomputation, the allocator's rounding of new sizes).
const SIMULATED_UNCERTAINTY: f64 = 0.05;

/// The highest total of the instants with `applied`'s rules changing each.
fn rule_peak(instants: &[Parts], applied: &[Remedy], ctx: &Context) -> f64 {
    let mut worst = 0.0f64;
    for instant in instants {
        let mut p = instant.clone();
        for remedy in applied {
            remedy.apply(&mut p, ctx);
        }
        worst = worst.max(p.total());
    }
    worst
}

/// What a remedy (or several together) projects for the allocated peak.
#[derive(Clone, Copy, Debug)]
struct Projected {
    bytes: f64,
    uncertainty: f64,
    method: Method,
    phase: Option<Phase>,
}

/// Projects remedies: by replaying the changed event stream where it can, else by the rules.
pub(super) struct Projector<'a> {
    pub(super) b: &'a Breakdown,
    pub(super) ctx: &'a Context,
    /// `None`: the stream is too long, or its replay does not count what the trace counts.
    pub(super) replayer: Option<Replayer>,
    pub(super) rules: RuleParts,
}

impl Projector<'_> {
    /// The combined uncertainty: each rule's own error (a replayed checkpointing's is smaller),
    /// and the bytes whose category is a guess: each could belong to what the remedies change,
    /// or not, and move the projection by as much as they reach.
    fn uncertainty(&self, applied: &[Remedy], projected: f64, replayed: bool) -> f64 {
        let own = |r: &Remedy| match r {
            Remedy::ActivationCheckpointing if replayed => SIMULATED_UNCERTAINTY,
            _ => r.uncertainty(),
        };
        let rules = applied.iter().map(|r| own(r) * own(r)).sum::<f64>();
        let reach = 1.0 - applied.iter().map(|r| 1.0 - r.reach(self.ctx)).product::<f64>();
        let guessed = self.b.base().evidence.guessed();
        let evidence = if projected > 0.0 { guessed * reach / projected } else { 0.0 };
        (rules + evidence * evidence).sqrt()
    }

    /// The allocated peak with `applied`.
    fn project(&self, applied: &[Remedy]) -> Projected {
        let ctx = self.ctx;
        if applied.iter().all(|r| !r.changes_allocated()) {
            // Allocator settings change nothing allocated: the baseline's, and their own error.
            let split = ctx.max_split.filter(|_| applied.contains(&Remedy::MaxSplitSize));
            let expandable = ctx.expandable_model.filter(|_| applied.contains(&Remedy::ExpandableSegments));
            let model = split.or(expandable).map(|m| m.model_error());
            let method = if model.is_some() { Method::Replay } else { Method::Rule };
            // Replayed through the allocator's model: its own error on this trace, and what it
            // does not model; else the rule's.
            let uncertainty = match model {
                Some(error) => Remedy::MaxSplitSize.uncertainty() + error,
                None => applied.iter().map(|r| r.uncertainty()).fold(0.0, f64::max),
            };
            return Projected { bytes: ctx.peak_allocated_bytes as f64, uncertainty, method, phase: self.b.peak_phase };
        }
        if let Some((peak, method)) = self.replayer.as_ref().and_then(|r| r.project(applied, self.rules)) {
            let bytes = peak.bytes as f64;
            return Projected {
                bytes,
                uncertainty: self.uncertainty(applied, bytes, true),
                method,
                phase: phase_at(&self.b.spans, peak.time_ns),
            };
        }
        // Rules; with checkpointing among them and replayable alone, corrected by as much as
        // the replay corrected checkpointing's own rule.
        let mut bytes = rule_peak(&self.b.instants, applied, ctx);
        let checkpointing = [Remedy::ActivationCheckpointing];
        let replayed = applied
            .contains(&Remedy::ActivationCheckpointing)
            .then(|| self.replayer.as_ref().and_then(|r| r.project(&checkpointing, self.rules)))
            .flatten();
        if let Some((peak, _)) = replayed {
            let rule = rule_peak(&self.b.instants, &checkpointing, ctx);
            if rule > 0.0 {
                bytes *= peak.bytes as f64 / rule;
            }
        }
        Projected {
            bytes,
            uncertainty: self.uncertainty(applied, bytes, replayed.is_some()),
            method: Method::Rule,
            phase: None,
        }
    }
}

/// A projection's row.
fn projection(
    remedies: Vec<Remedy>,
    projected: Projected,
    reserved: u64,
    reason: Reason,
    ctx: &Context,
    target: Option<u64>,
) -> Projection {
    let allocated = projected.bytes.round() as u64;
    let id = remedies.iter().map(|r| r.id()).collect::<Vec<_>>().join("+");
    Projection {
        id,
        rank: remedies.iter().map(|r| r.rank(ctx)).sum(),
        remedies,
        projected_peak_allocated_bytes: allocated,
        projected_peak_reserved_bytes: reserved,
        saving_bytes: ctx.peak_allocated_bytes as i64 - allocated as i64,
        uncertainty: (projected.uncertainty * 100.0).round() / 100.0,
        method: projected.method,
        projected_peak_phase: projected.phase,
        reason,
        fits: target.is_some_and(|t| reserved <= t),
    }
}

/// Step two: every applicable remedy alone, lowest projected peak first.
pub(super) fn singles(p: &Projector<'_>, remedies: &[Remedy], target: Option<u64>) -> Vec<Projection> {
    let mut out: Vec<Projection> = remedies
        .iter()
        .map(|&r| {
            let projected = p.project(&[r]);
            projection(
                vec![r],
                projected,
                r.reserved_bytes(projected.bytes, p.ctx),
                r.reason(p.b.base(), p.ctx, projected.bytes),
                p.ctx,
                target,
            )
        })
        .collect();
    out.sort_by_key(|p| p.projected_peak_allocated_bytes);
    out
}

/// Step two, in pairs: the remedies that can go together and change what is allocated.
pub(super) fn pairs(p: &Projector<'_>, remedies: &[Remedy], target: Option<u64>) -> Vec<Projection> {
    let combinable: Vec<Remedy> = remedies.iter().copied().filter(|r| r.changes_allocated()).collect();
    let mut out = Vec::new();
    for (i, &a) in combinable.iter().enumerate() {
        for &b in combinable.iter().skip(i + 1) {
            if a.excludes(b) {
                continue;
            }
            let projected = p.project(&[a, b]);
            out.push(projection(
                vec![a, b],
                projected,
                a.reserved_bytes(projected.bytes, p.ctx),
                Reason::Together(vec![a, b]),
                p.ctx,
                target,
            ));
        }
    }
    out.sort_by_key(|p| p.projected_peak_allocated_bytes);
    out
}

/// Step two, in threes: each of the best pairs with a third remedy that goes with both; those
/// lower than each pair among the three (by [`super::NO_CHANGE`] of it), lowest first, one per
/// set.
pub(super) fn triples(
    p: &Projector<'_>,
    best_pairs: &[Projection],
    all_pairs: &[Projection],
    remedies: &[Remedy],
    target: Option<u64>,
) -> Vec<Projection> {
    // Every pair was projected already: its peak by its remedies, in `Remedy::ALL`'s order.
    let order = |set: &mut Vec<Remedy>| set.sort_by_key(|r| Remedy::ALL.iter().position(|a| a == r));
    let known: std::collections::HashMap<Vec<Remedy>, f64> = all_pairs
        .iter()
        .map(|pair| {
            let mut set = pair.remedies.clone();
            order(&mut set);
            (set, pair.projected_peak_allocated_bytes as f64)
        })
        .collect();
    let mut out: Vec<Projection> = Vec::new();
    for pair in best_pairs {
        for &c in remedies.iter().filter(|r| r.changes_allocated()) {
            if pair.remedies.iter().any(|&r| r == c || r.excludes(c)) {
                continue;
            }
            let mut set = pair.remedies.clone();
            set.push(c);
            order(&mut set);
            if out.iter().any(|t| t.remedies == set) {
                continue;
            }
            let projected = p.project(&set);
            // Lower than each pair in it: the third adds something whichever two it joins.
            let lower = (0..3).all(|skip| {
                let two: Vec<Remedy> = set.iter().enumerate().filter(|(i, _)| *i != skip).map(|(_, &r)| r).collect();
                known.get(&two).is_some_and(|&bytes| projected.bytes < bytes * (1.0 - super::NO_CHANGE))
            });
            if lower {
                let reserved = reserved_together(&set, projected.bytes, p.ctx);
                out.push(projection(set.clone(), projected, reserved, Reason::Together(set), p.ctx, target));
            }
        }
    }
    out.sort_by_key(|p| p.projected_peak_allocated_bytes);
    out
}

/// The reserved peak of remedies applied together, from their allocated peak: with expandable
/// segments what is allocated, its rounding and part of a page; with a `max_split_size` the
/// allocator model's ratio of reserved to allocated; else the baseline's ratio.
fn reserved_together(applied: &[Remedy], allocated: f64, ctx: &Context) -> u64 {
    let ratio = remedy::reserve_ratio(ctx);
    if applied.contains(&Remedy::ExpandableSegments) {
        if let Some(m) = ctx.expandable_model {
            return (allocated * m.projected_bytes() as f64 / ctx.peak_allocated_bytes.max(1) as f64).round() as u64;
        }
        let expandable = allocated + ctx.internal_bytes as f64 + PAGE_BYTES as f64;
        return expandable.min(allocated * ratio).round() as u64;
    }
    if let Some(m) = ctx.max_split.filter(|_| applied.contains(&Remedy::MaxSplitSize)) {
        return (allocated * m.projected_bytes() as f64 / ctx.peak_allocated_bytes.max(1) as f64).round() as u64;
    }
    (allocated * ratio).round() as u64
}

/// One step of the plan: a remedy added to those before it, and what they project together.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanStep {
    /// The remedy added.
    pub remedy: Remedy,
    /// The allocated peak with it and those before it.
    pub projected_peak_allocated_bytes: u64,
    /// The reserved peak with them.
    pub projected_peak_reserved_bytes: u64,
    /// The share of the projected bytes the rules may be off by.
    pub uncertainty: f64,
    /// Whether the reserved peak fits under the target now.
    pub fits: bool,
}

/// A remedy that could be the plan's next step: its rank, the reserved peak with it (for the
/// order), itself, the allocated peak and uncertainty with it, and the reserved peak.
type Candidate = (u32, i64, Remedy, Projected, u64);

/// The order to try the remedies in to reach `target`: each step adds, of the remedies left that
/// go with those taken, the one that asks least of the user (the most saving first among equals),
/// while it still saves; it stops at the first step that fits. Empty when the baseline fits.
pub(super) fn plan(p: &Projector<'_>, remedies: &[Remedy], target: u64) -> Vec<PlanStep> {
    let ctx = p.ctx;
    let mut taken: Vec<Remedy> = Vec::new();
    let mut steps = Vec::new();
    let mut reserved = ctx.peak_reserved_bytes;
    while reserved > target {
        let candidates =
            remedies.iter().copied().filter(|r| !taken.contains(r) && !taken.iter().any(|t| t.excludes(*r)));
        let mut best: Option<Candidate> = None;
        for r in candidates {
            let mut with = taken.clone();
            with.push(r);
            let projected = p.project(&with);
            let with_reserved = reserved_together(&with, projected.bytes, ctx);
            // A step must take away at least half a percent of what is reserved.
            if with_reserved as f64 > reserved as f64 * 0.995 {
                continue;
            }
            let key = (r.rank(ctx), with_reserved as i64);
            if best.as_ref().is_none_or(|(rank, bytes, ..)| key < (*rank, *bytes)) {
                best = Some((key.0, key.1, r, projected, with_reserved));
            }
        }
        let Some((_, _, r, projected, with_reserved)) = best else { break };
        taken.push(r);
        reserved = with_reserved;
        steps.push(PlanStep {
            remedy: r,
            projected_peak_allocated_bytes: projected.bytes.round() as u64,
            projected_peak_reserved_bytes: reserved,
            uncertainty: (projected.uncertainty * 100.0).round() / 100.0,
            fits: reserved <= target,
        });
    }
    steps
}

/// Step three: the change that asks least of the user and fits under the target.
pub(super) fn smallest_that_fits(singles: &[Projection], pairs: &[Projection], target: Option<u64>) -> Option<String> {
    target?;
    let mut fitting: Vec<&Projection> = singles.iter().chain(pairs).filter(|p| p.fits).collect();
    fitting.sort_by_key(|p| (p.rank, p.projected_peak_reserved_bytes));
    fitting.first().map(|p| p.id.clone())
}
