//! The advisor: what each remedy would do to the peak, projected from what the trace measured.
//!
//! Three steps ([`advise`]): the breakdown (`breakdown`: the memory of a device taken apart,
//! `parts.rs`, at a few instants: the peak, and the highest point of each recorded phase), the
//! projections (`project.rs`: each [`Remedy`] of `remedy.rs` applied to the event stream and
//! replayed, `simulate.rs`, where the stream can show it, else changing those parts by its rule,
//! `rules.rs`; each carries an uncertainty: the share of the projected bytes it can be wrong by),
//! and the search for the smallest change that fits and the plan. Fragmentation is said apart,
//! from the allocator's segments at the peak and at the first OOM. What it returns is data
//! (bytes, shares, ids and the numbers each reason rests on); the front ends word it.

mod model;
mod padding;
mod parts;
mod project;
mod remedy;
mod rules;
pub mod scaling;
mod settings;
pub mod simulate;
mod stack_blocks;

use std::collections::BTreeMap;

use serde::Serialize;
use vramscope_trace_format::{AnnotationKind, Category, DeviceId, Trace};

pub use self::parts::EvidenceBytes;
use self::parts::{Parts, Sides, parts_at, phase_at};
pub use self::project::PlanStep;
use self::project::{Projector, pairs, plan, selective_checkpointing, singles, smallest_that_fits, triples};
use self::remedy::{Context, quantised_weight_bytes};
pub use self::remedy::{LeftOut, Reason, Remedy, SplitProjection};
pub use self::rules::PIPELINE_MICRO_BATCHES_PER_STAGE;
use self::settings::{best_max_split, expandable_model, fragmentation};
pub use self::simulate::Method;
use self::simulate::{Replayer, RuleParts};
use super::allocator::AllocatorSettings;
use super::attribution::Attributor;
use super::instant;
use super::peak;
use super::replay;

/// Where in the step an instant is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Forward (and the loss after it).
    Forward,
    /// Backward.
    Backward,
    /// The optimizer step.
    OptimizerStep,
    /// None recorded.
    Unknown,
}

/// What the advisor starts from.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Baseline {
    /// The device.
    pub device: DeviceId,
    /// Peak of allocated bytes.
    pub peak_allocated_bytes: u64,
    /// Peak of reserved bytes, as `info` gives it (0 where the trace does not record reserved
    /// memory).
    pub peak_reserved_bytes: u64,
    /// Whether the trace records reserved memory (segments, or reserved totals). Where it does
    /// not, the projections take the reserved peak to be the allocated one.
    pub reserved_recorded: bool,
    /// Bytes by category at the peak, as `info` gives them.
    pub categories_at_peak: BTreeMap<Category, u64>,
    /// Where in the step the peak is.
    pub peak_phase: Phase,
    /// Repeated blocks found in the model (by the module spans).
    pub repeated_blocks: usize,
}

/// One remedy (or a combination) and what it would do.
#[derive(Clone, Debug)]
pub struct Projection {
    /// E.g. `amp_bf16`, or `amp_bf16+activation_checkpointing`.
    pub id: String,
    /// The remedies applied (one, or a pair).
    pub remedies: Vec<Remedy>,
    /// The projected peak of allocated bytes.
    pub projected_peak_allocated_bytes: u64,
    /// The projected peak of reserved bytes.
    pub projected_peak_reserved_bytes: u64,
    /// Baseline peak allocated minus projected.
    pub saving_bytes: i64,
    /// The share of the projected bytes the rule may be off by.
    pub uncertainty: f64,
    /// How it was projected: the changed event stream replayed, or rules.
    pub method: Method,
    /// Where in the step the projected peak is, when the replay tells (a remedy can move it).
    pub projected_peak_phase: Option<Phase>,
    /// The numbers from the trace its reasoning rests on.
    pub reason: Reason,
    /// Whether it fits under the target.
    pub fits: bool,
    rank: u32,
}

/// The advice for one device.
#[derive(Clone, Debug)]
pub struct Advice {
    /// Where it starts.
    pub baseline: Baseline,
    /// The memory to fit under (the device's less what other processes held on it at the peak,
    /// or the one asked for).
    pub target_bytes: Option<u64>,
    /// What other processes held on the device at the peak, left out of the target (the
    /// driver's account; 0 where the recording did not sample it, or a target was given).
    pub held_by_others_bytes: u64,
    /// Whether the baseline's reserved peak fits under the target already.
    pub baseline_fits: bool,
    /// Single remedies, lowest projected peak first (a fine-tune's LoRA first, where it fits).
    pub remedies: Vec<Projection>,
    /// Pairs of remedies that do better than either alone, and the best pairs with a third that
    /// does better than the pair, lowest projected peak first.
    pub combinations: Vec<Projection>,
    /// Remedies that apply but would not lower the peak (allocated or reserved, by `NO_CHANGE`
    /// of it or more): what they shrink is not alive at the peak, or they add more elsewhere.
    pub without_effect: Vec<Projection>,
    /// The cheapest change that fits under the target, if one does.
    pub smallest_change_that_fits: Option<String>,
    /// Fragmentation: reserved but not allocated at the peak, and what `expandable_segments`
    /// would give back (none when it is small).
    pub fragmentation: Option<Unused>,
    /// The autocast the run already used (`cuda:bfloat16`), when the recorder saw one; the
    /// mixed-precision remedies are left out then.
    pub autocast: Option<String>,
    /// The share of the parameters' bytes stored in 32 bits, when the recorder saw their dtypes
    /// (16-bit weights are proposed for inference only then).
    pub fp32_parameter_share: Option<f64>,
    /// The GPUs the sharding remedies shard over, and how that count was chosen (none: the
    /// trace shows one GPU and none was given, so sharding is not projected).
    pub gpus: Option<Gpus>,
    /// Whether the run trained (went backward); an inference run gets no checkpointing or
    /// gradient advice.
    pub training: bool,
    /// Whether the model works on sequences (attention seen): a shorter sequence is projected.
    pub sequence: bool,
    /// The allocator's settings as the trace tells them; what is on is not proposed.
    pub allocator: AllocatorSettings,
    /// How the categories at the peak were known: the uncertainties count what is guessed.
    pub evidence: EvidenceBytes,
    /// The largest multiple of the recorded batch that fits under the target (below 1: how far
    /// it must shrink), when there is a target: what is alive scales with the batch where it
    /// is activations, temporaries or inputs, and stays where it is model state.
    pub batch_scale_that_fits: Option<f64>,
    /// The best `max_split_size` the allocator's model found, when it was tried.
    pub max_split: Option<SplitProjection>,
    /// The order to try the remedies in to fit under the target (empty when the baseline fits
    /// or there is no target): each step with what it and those before it project.
    pub plan: Vec<PlanStep>,
    /// Selective checkpointing, replayed: only the model's first k repeated blocks checkpointed,
    /// for some k below all of them (empty when checkpointing is not replayed).
    pub checkpointing_by_blocks: Vec<SomeBlocksCheckpointed>,
    /// The embedding's weight and the output head's that could share it, when the recorder saw
    /// an untied head.
    pub tied: Option<(String, String)>,
    /// LoRA's adapters: the linear layers adapted and the rank.
    pub lora: Option<(usize, u64)>,
    /// The remedies not projected, each with why.
    pub left_out: Vec<(Remedy, LeftOut)>,
    /// Where the model was loaded from, when the run fine-tunes a checkpoint.
    pub fine_tuning: Option<String>,
}

/// Checkpointing only the first `blocks` of the model's repeated blocks, replayed.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct SomeBlocksCheckpointed {
    /// Blocks checkpointed, the first of the model's.
    pub blocks: usize,
    /// The repeated blocks there are.
    pub of: usize,
    /// The projected allocated peak.
    pub projected_peak_allocated_bytes: u64,
    /// The projected reserved peak (the baseline's ratio).
    pub projected_peak_reserved_bytes: u64,
    /// Whether it fits under the target.
    pub fits: bool,
}

/// How many GPUs to shard over, and where that number came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Gpus {
    /// The count.
    pub count: u32,
    /// Where it came from.
    pub from: GpusFrom,
}

/// Where a GPU count came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GpusFrom {
    /// The user gave it (`--gpus`).
    Given,
    /// The ranks recorded in the trace.
    Ranks,
    /// The run's world size as the trace records it (a rank's own trace).
    WorldSize,
    /// The GPUs in the trace.
    Devices,
}

impl Gpus {
    /// `given`, else the ranks of the trace, else the world size it records, else its GPUs, when
    /// more than one.
    pub fn of(trace: &Trace, given: Option<u32>) -> Option<Self> {
        if let Some(count) = given {
            return Some(Self { count, from: GpusFrom::Given });
        }
        let mut ranks: Vec<u32> = trace.metadata.processes.iter().filter_map(|p| p.rank).collect();
        ranks.sort_unstable();
        ranks.dedup();
        if ranks.len() > 1 {
            return Some(Self { count: ranks.len() as u32, from: GpusFrom::Ranks });
        }
        let world = trace.metadata.extra.get("world_size").and_then(serde_json::Value::as_u64);
        if let Some(count) = world.and_then(|w| u32::try_from(w).ok()).filter(|&w| w > 1) {
            return Some(Self { count, from: GpusFrom::WorldSize });
        }
        let gpus = trace.devices().iter().filter(|d| !d.is_host()).count() as u32;
        (gpus > 1).then_some(Self { count: gpus, from: GpusFrom::Devices })
    }
}

/// Reserved memory not allocated at the peak, from the allocator's segments, and at the first
/// OOM. Expandable segments map memory in 2 MiB pages as blocks need it, so what stays reserved
/// is the allocated bytes, their rounding and part of a page.
#[derive(Clone, Debug, PartialEq)]
pub struct Unused {
    /// Reserved but not allocated at the peak.
    pub unused_bytes: u64,
    /// Its share of the reserved peak (0 to 1).
    pub share_of_reserved: f64,
    /// Rounding inside allocated blocks.
    pub rounding_bytes: u64,
    /// The largest free range inside segments.
    pub largest_free_bytes: u64,
    /// About what expandable segments would not reserve.
    pub expandable_gives_back_bytes: u64,
    /// At the first OOM, if any.
    pub at_oom: Option<FreeAtOom>,
}

/// What the allocator had free when an allocation failed.
#[derive(Clone, Debug, PartialEq)]
pub struct FreeAtOom {
    /// Bytes asked for.
    pub requested_bytes: u64,
    /// Free inside segments.
    pub free_bytes: u64,
    /// The largest free range.
    pub largest_free_bytes: u64,
}

impl FreeAtOom {
    /// Whether fragmentation failed it: enough was free, but in no range large enough.
    pub fn fragmentation_failed_it(&self) -> bool {
        self.free_bytes >= self.requested_bytes && self.largest_free_bytes < self.requested_bytes
    }
}

/// The memory of a device taken apart at the instants that matter: the peak first, then the
/// highest point of each recorded phase.
struct Breakdown {
    instants: Vec<Parts>,
    /// The recorded phases ([`phase_spans`]).
    spans: Vec<(i64, i64, AnnotationKind)>,
    peak_phase: Option<Phase>,
    peaks: peak::Peaks,
    /// The repeated blocks by the stacks, where no module spans say them.
    stacks: Option<stack_blocks::StackBlocks>,
}

impl Breakdown {
    fn base(&self) -> &Parts {
        // `breakdown` always puts the peak first.
        &self.instants[0]
    }
}

/// The recorded phases as spans, sorted; the forward phase runs on to backward (the loss is
/// computed between them).
pub(super) fn phase_spans(trace: &Trace) -> Vec<(i64, i64, AnnotationKind)> {
    let mut spans: Vec<(i64, i64, AnnotationKind)> = trace
        .annotations
        .iter()
        .filter(|a| {
            matches!(a.kind, AnnotationKind::Forward | AnnotationKind::Backward | AnnotationKind::OptimizerStep)
        })
        .map(|a| (a.start_ns, a.end_ns, a.kind))
        .collect();
    spans.sort_unstable_by_key(|s| s.0);
    for i in 1..spans.len() {
        if let [(_, end, AnnotationKind::Forward), (start, _, AnnotationKind::Backward)] = spans[i - 1..=i] {
            spans[i - 1].1 = end.max(start - 1);
        }
    }
    spans
}

/// Step one: the breakdown of `device`.
fn breakdown(trace: &Trace, device: DeviceId) -> Breakdown {
    let peaks = peak::peaks(trace, device);
    let spans = phase_spans(trace);
    // The highest point of each phase, and the peak.
    let mut highest: BTreeMap<u8, (u64, Option<usize>, i64)> = BTreeMap::new();
    replay::replay(trace, device, |event, p| {
        if let Some(phase) = phase_at(&spans, p.time_ns).filter(|ph| *ph != Phase::Unknown) {
            let entry = highest.entry(phase as u8).or_insert((0, None, 0));
            if p.allocated_bytes > entry.0 {
                *entry = (p.allocated_bytes, event, p.time_ns);
            }
        }
    });
    let peak_phase = phase_at(&spans, peaks.allocated.time_ns);
    let mut attributor = Attributor::new(trace, device);
    let sides = Sides::of(trace, device);
    let at = (peaks.allocated.event, peaks.allocated.time_ns);
    let mut instants = vec![parts_at(trace, device, &mut attributor, &sides, at, peak_phase)];
    for (_, event, time) in highest.values() {
        instants.push(parts_at(trace, device, &mut attributor, &sides, (*event, *time), phase_at(&spans, *time)));
    }
    Breakdown { instants, spans, peak_phase, peaks, stacks: sides.stacks }
}

/// A projected peak within this share of another is the same peak.
pub const NO_CHANGE: f64 = 0.005;

/// The memory to fit under: `target` where given, else the device's memory less what other
/// processes held on it at `peak_ns` (the driver's account, where the recording sampled it: not
/// the program's to have); and what they held.
fn fit_target(trace: &Trace, device: DeviceId, target: Option<u64>, peak_ns: i64) -> (Option<u64>, u64) {
    if target.is_some() {
        return (target, 0);
    }
    let held_by_others = crate::whole::others_at(trace, device, peak_ns);
    let total = trace.metadata.devices.iter().find(|d| d.device == device).and_then(|d| d.total_memory_bytes);
    (total.map(|t| t.saturating_sub(held_by_others)), held_by_others)
}

/// Works out the advice for `device` (the one with the highest peak when `None`); `gpus` for the
/// sharding remedies (else the trace's ranks or GPUs, when more than one); `target` to fit under
/// (else the device's memory, when known).
pub fn advise(trace: &Trace, device: Option<DeviceId>, gpus: Option<u32>, target: Option<u64>) -> Option<Advice> {
    let device = match device {
        Some(d) => d,
        None => crate::summary::highest_peak(
            trace.devices().into_iter().map(|d| (d, peak::peaks(trace, d).allocated.bytes)),
        )?,
    };
    let b = breakdown(trace, device);
    let base = b.instants.first()?;
    let peak_allocated = b.peaks.allocated.bytes;
    // Where the trace does not record reserved memory, the projections take it as allocated.
    let reserved_recorded = peak::reserved_recorded(trace, device, &b.peaks);
    let peak_reserved = b.peaks.reserved.bytes.max(peak_allocated);
    let (target, held_by_others) = fit_target(trace, device, target, b.peaks.reserved.time_ns);
    // A run already under autocast gains nothing from it.
    let autocast = trace.metadata.extra.get("autocast").and_then(|v| v.as_str()).map(str::to_owned);
    let at_peak = instant::instant(trace, device, b.peaks.allocated.event, b.peaks.allocated.time_ns);
    let allocator = AllocatorSettings::of(trace, device);
    let gpus = Gpus::of(trace, gpus);
    // Backward told by a recorded span, autograd's frames, gradients at a high point, or the
    // phases found as `info` finds them (a profiler trace's backward operators).
    // Found once, when first needed (here or for the peak's phase below).
    let found = std::cell::OnceCell::new();
    let found_phases = || found.get_or_init(|| crate::phases::phases(trace, device));
    let training = crate::phases::ran_backward(trace)
        || b.instants.iter().any(|p| p.gradient > 0.0)
        || found_phases().kinds().contains(&crate::phases::PhaseKind::Backward);
    let ctx = Context {
        gpus: gpus.map_or(1, |g| g.count),
        // At the peak, or at the highest point of a phase (a peak in the optimizer step holds no
        // block's activations).
        blocks: b.instants.iter().map(|p| p.blocks.len()).max().unwrap_or(0),
        autocast: autocast.is_some(),
        fp32_parameter_share: fp32_parameter_share(trace),
        peak_allocated_bytes: peak_allocated,
        peak_reserved_bytes: peak_reserved,
        internal_bytes: at_peak.total.free_internal_bytes,
        training,
        optimizer_state: b.instants.iter().any(|p| p.optimizer_state > 0.0),
        sequence: works_on_sequences(trace),
        expandable: allocator.expandable() || allocator.is_async(),
        // The allocator's model is checked against the reserved memory the trace recorded.
        max_split: reserved_recorded.then(|| best_max_split(trace, device, &allocator, peak_reserved)).flatten(),
        expandable_model: reserved_recorded
            .then(|| expandable_model(trace, device, &allocator, peak_reserved))
            .flatten(),
        gradient_bytes: b.instants.iter().map(|p| p.gradient).fold(0.0, f64::max),
        checkpoint_replayed: false,
        // The model's parts: filled in by `with_the_models_parts`.
        trainable_share: 1.0,
        fine_tuning: trace.metadata.extra.get("pretrained").and_then(|v| v.as_str()).map(str::to_owned),
        padding: padding::Padding::of(trace),
        state_8bit: state_is_8bit(trace),
        forward_with_grad: trace.metadata.extra.get("forward_with_grad").and_then(serde_json::Value::as_bool)
            == Some(true),
        distributed: distributed(trace),
        host: device.is_host(),
        ..Context::default()
    };
    // The replay counts what the trace's own replay counts: where they differ, the stream is
    // not the whole story and the rules stand.
    let mut replayer =
        Replayer::new(trace, device, &b.spans, b.stacks.as_ref()).filter(|r| r.baseline.bytes == peak_allocated);
    let growth = crate::growth::growth(trace, device).filter(|g| g.grows);
    if let Some(r) = replayer.as_mut() {
        let layers = model::layers(trace);
        r.learn_linear_layers(&layers);
        // The weights' bytes per element, from the trained parameters' dtypes.
        let element_bytes = fp32_parameter_share(trace).map_or(4, |share| if share > 0.5 { 4 } else { 2 });
        r.learn_layer_calls(trace, &layers, element_bytes);
        r.padding = padding::Padding::of(trace);
        if let Some(g) = &growth {
            r.learn_growth(trace, g);
        }
    }
    let ctx = Context {
        checkpoint_replayed: replayer.as_ref().is_some_and(Replayer::replays_checkpointing),
        // The blocks the replay found in the stream count too (a peak outside forward holds none).
        blocks: ctx.blocks.max(replayer.as_ref().map_or(0, Replayer::checkpointable_blocks)),
        ..ctx
    };
    let ctx = with_the_models_parts(trace, replayer.as_ref(), ctx);
    let ctx = Context {
        kept_replayed: replayer.as_ref().is_some_and(Replayer::replays_kept),
        kept_bytes_per_iteration: growth.as_ref().map_or(0, |g| g.bytes_per_iteration),
        ..ctx
    };
    let rules = RuleParts {
        matmul_parameter_bytes: base.matmul_parameter,
        block_parameter_bytes: base.block_parameter,
        gpus: ctx.gpus,
        fp32_parameter_share: ctx.fp32_parameter_share.unwrap_or(0.0),
        autocast: ctx.autocast,
        training: ctx.training,
        untied_head: ctx.untied.as_ref().and_then(|u| replayer.as_ref()?.owner(&u.head)),
        adapter_bytes: ctx.adapter_bytes,
        adapter_state_bytes: ctx.adapter_state_bytes,
        nf4_saving_bytes: ctx.adapted_weight_bytes - ctx.nf4_weight_bytes,
        largest_gradient_bytes: ctx.largest_gradient_bytes,
        gradient_bytes: ctx.gradient_bytes,
    };
    let projector = Projector { b: &b, ctx: &ctx, replayer, rules };
    let remedies: Vec<Remedy> = Remedy::ALL.iter().copied().filter(|r| r.applies(&ctx)).collect();
    let left_out: Vec<(Remedy, LeftOut)> = Remedy::ALL.iter().filter_map(|&r| Some((r, r.left_out(&ctx)?))).collect();
    let singles = singles(&projector, &remedies, target);
    let combinations = combined(&projector, &remedies, &singles, target);
    let (mut singles, without_effect): (Vec<Projection>, Vec<Projection>) =
        singles.into_iter().partition(|p| lowers(p, (peak_allocated, peak_reserved)));
    lora_first(&mut singles, &ctx, target);
    let smallest_change_that_fits = smallest_that_fits(&singles, &combinations, target);
    let plan = target.map_or_else(Vec::new, |t| plan(&projector, &remedies, t));
    // Only where checkpointing every block lowers the peak: some of them would not either.
    let checkpointing_by_blocks = if singles.iter().any(|p| p.remedies == [Remedy::ActivationCheckpointing]) {
        selective_checkpointing(&projector, target)
    } else {
        Vec::new()
    };
    // The categories as `info` finds them (its counters, for a memory timeline).
    let live = peak::live_at(trace, device, b.peaks.allocated.event);
    let categories_at_peak: BTreeMap<Category, u64> =
        peak::categories_at(trace, device, b.peaks.allocated.time_ns, &live);
    Some(Advice {
        baseline: Baseline {
            device,
            peak_allocated_bytes: peak_allocated,
            peak_reserved_bytes: b.peaks.reserved.bytes,
            reserved_recorded,
            categories_at_peak,
            // Recorded spans first; else the phase as `info` finds it (named ranges, stacks).
            peak_phase: b.peak_phase.filter(|p| *p != Phase::Unknown).unwrap_or_else(|| {
                match found_phases().phase_of_event(b.peaks.allocated.event).and_then(|p| p.kind) {
                    Some(crate::phases::PhaseKind::Forward) => Phase::Forward,
                    Some(crate::phases::PhaseKind::Backward) => Phase::Backward,
                    Some(crate::phases::PhaseKind::OptimizerStep) => Phase::OptimizerStep,
                    None => Phase::Unknown,
                }
            }),
            repeated_blocks: ctx.blocks,
        },
        target_bytes: target,
        held_by_others_bytes: held_by_others,
        // A run that failed an allocation did not fit, whatever its peak says.
        baseline_fits: target.is_some_and(|t| peak_reserved <= t) && !trace.ooms.iter().any(|o| o.device == device),
        remedies: singles,
        combinations,
        without_effect,
        smallest_change_that_fits,
        fragmentation: fragmentation(trace, device, &ctx, &at_peak),
        autocast,
        fp32_parameter_share: ctx.fp32_parameter_share,
        gpus,
        training,
        sequence: ctx.sequence,
        allocator,
        evidence: b.base().evidence,
        batch_scale_that_fits: target.and_then(|t| batch_scale(&b.instants, &ctx, t)),
        max_split: ctx.max_split,
        plan,
        checkpointing_by_blocks,
        tied: ctx.untied.as_ref().map(|u| (u.embedding.clone(), u.head.clone())),
        lora: ctx.adapters.as_ref().map(|a| (a.layers, a.rank)),
        left_out,
        fine_tuning: ctx.fine_tuning.clone(),
    })
}

/// Whether a projection's peaks are apart from `than` (allocated, reserved) by more than
/// [`NO_CHANGE`] of them.
fn changes(p: &Projection, than: (u64, u64)) -> bool {
    let apart = |a: u64, b: u64| a.abs_diff(b) as f64 > NO_CHANGE * b.max(1) as f64;
    apart(p.projected_peak_allocated_bytes, than.0) || apart(p.projected_peak_reserved_bytes, than.1)
}

/// Whether the run is distributed already: several ranks, or a rank's world size above 1.
fn distributed(trace: &Trace) -> bool {
    let ranks: std::collections::BTreeSet<u32> = trace.metadata.processes.iter().filter_map(|p| p.rank).collect();
    ranks.len() > 1 || trace.metadata.extra.get("world_size").and_then(serde_json::Value::as_u64).is_some_and(|w| w > 1)
}

/// Whether a projection lowers the peak (allocated or reserved) by more than [`NO_CHANGE`] of it:
/// one that would not, or would raise it, is considered and left out.
fn lowers(p: &Projection, than: (u64, u64)) -> bool {
    let lower = |a: u64, b: u64| (a as f64) < b as f64 * (1.0 - NO_CHANGE);
    lower(p.projected_peak_allocated_bytes, than.0) || lower(p.projected_peak_reserved_bytes, than.1)
}

/// The best pairs extended by a third remedy.
const PAIRS_EXTENDED: usize = 6;

/// The combinations worth naming, lowest first: pairs lower than both of their parts alone, and
/// the best pairs with a third remedy where that is lower than the pair.
fn combined(
    projector: &Projector<'_>,
    remedies: &[Remedy],
    singles: &[Projection],
    target: Option<u64>,
) -> Vec<Projection> {
    let alone: BTreeMap<&str, (u64, u64)> = singles
        .iter()
        .map(|p| (p.id.as_str(), (p.projected_peak_allocated_bytes, p.projected_peak_reserved_bytes)))
        .collect();
    let all = pairs(projector, remedies, target);
    let mut combinations: Vec<Projection> = all
        .iter()
        .filter(|pair| {
            pair.remedies.iter().all(|r| {
                alone.get(r.id()).is_none_or(|&part| {
                    changes(pair, part)
                        && (pair.projected_peak_allocated_bytes < part.0 || pair.projected_peak_reserved_bytes < part.1)
                })
            })
        })
        .cloned()
        .collect();
    let best = &combinations[..combinations.len().min(PAIRS_EXTENDED)];
    let threes = triples(projector, best, &all, remedies, target);
    combinations.extend(threes);
    combinations.sort_by_key(|p| p.projected_peak_allocated_bytes);
    combinations
}

/// A fine-tune of a checkpoint lists LoRA first, where it fits: what such a run tries first.
fn lora_first(singles: &mut Vec<Projection>, ctx: &Context, target: Option<u64>) {
    if ctx.fine_tuning.is_some()
        && let Some(i) = singles.iter().position(|p| p.remedies == [Remedy::Lora] && (target.is_none() || p.fits))
    {
        let lora = singles.remove(i);
        singles.insert(0, lora);
    }
}

/// What the remedies that change particular parts of the model and its step need: the gradients
/// kept through a forward, the optimizer step's temporaries (from the replayed stream), the
/// untied head and LoRA's adapters (from the layers the recorder saw, sized by the tags).
fn with_the_models_parts(trace: &Trace, replayer: Option<&Replayer>, ctx: Context) -> Context {
    let layers = model::layers(trace);
    let (step_temporaries, largest_gradient) = replayer.map_or((0, 0), Replayer::step_temporaries);
    let state_per_byte = replayer.and_then(Replayer::state_per_parameter_byte);
    // The head's bytes and the adapters' dtype: from the trained parameters' bytes per element.
    let bytes_per_element = fp32_parameter_share(trace).map_or(4.0, |share| if share > 0.5 { 4.0 } else { 2.0 });
    let untied = model::untied_head(&layers).filter(|u| replayer.is_some_and(|r| r.owner(&u.head).is_some()));
    let adapters = model::adapters(&layers);
    // The linear layers' weights of their own (a tied head's is the embedding's), and the same
    // in int8 with a scale per output in the weights' dtype.
    let linear: Vec<&model::Layer> = layers.iter().filter(|l| !l.embedding).collect();
    let own = |l: &&&model::Layer| !layers.iter().any(|e| e.embedding && e.weight == l.weight);
    let linear_weight_bytes: f64 =
        linear.iter().filter(own).map(|l| (l.rows * l.columns) as f64 * bytes_per_element).sum();
    let quantised = |bits: u32| -> f64 {
        let element_bytes = bytes_per_element as u64;
        linear.iter().filter(own).map(|l| quantised_weight_bytes(l.rows, l.columns, element_bytes, bits) as f64).sum()
    };
    let adapter_bytes = adapters.as_ref().map_or(0.0, |a| a.elements as f64 * bytes_per_element);
    // The weights LoRA adapts (the repeated blocks' trained linear layers), and in NF4 (QLoRA).
    let adapted: Vec<u64> = linear
        .iter()
        .filter(|l| l.trainable && parts::repeated_block(&l.module).is_some())
        .map(|l| l.rows * l.columns)
        .collect();
    Context {
        kept_gradient_bytes: replayer.map_or(0, Replayer::kept_gradient_bytes) as f64,
        step_temporary_bytes: step_temporaries as f64,
        largest_gradient_bytes: largest_gradient as f64,
        adam: replayer.is_some_and(|r| r.adam),
        untied_bytes: untied.as_ref().map_or(0.0, |u| u.elements as f64 * bytes_per_element),
        untied,
        adapter_state_bytes: adapter_bytes * state_per_byte.unwrap_or(2.0),
        adapter_bytes,
        adapters,
        trainable_share: model::trainable_share(&layers),
        linear_weight_bytes,
        int8_weight_bytes: quantised(8),
        int4_weight_bytes: quantised(4),
        adapted_weight_bytes: adapted.iter().map(|&e| e as f64 * bytes_per_element).sum(),
        nf4_weight_bytes: adapted.iter().map(|&e| simulate::nf4_bytes(e) as f64).sum(),
        layers_seen: !layers.is_empty(),
        ..ctx
    }
}

/// The largest multiple of the batch whose reserved peak fits under `target`: at each instant
/// taken apart, what stays (model state and the rest) plus what scales times the multiple, with
/// the baseline's reserved-to-allocated ratio; the lowest over the instants. `None` when nothing
/// scales.
fn batch_scale(instants: &[Parts], ctx: &Context, target: u64) -> Option<f64> {
    let allowed = target as f64 / remedy::reserve_ratio(ctx);
    instants
        .iter()
        .filter(|p| p.activation + p.temporary + p.input > 0.0)
        .map(|p| {
            let scales = p.activation + p.temporary + p.input;
            ((allowed - (p.total() - scales)) / scales).max(0.0)
        })
        .min_by(f64::total_cmp)
        .map(|scale| (scale * 100.0).floor() / 100.0)
}

/// Whether the model works on sequences: attention in a module's name (`attn`, `attention`) or
/// in a frame's function (`scaled_dot_product_attention`, a module's `forward` in a file named
/// for it).
fn works_on_sequences(trace: &Trace) -> bool {
    let interner = &trace.interner;
    let attention = |name: &str| {
        let name = name.to_ascii_lowercase();
        name.contains("attn") || name.contains("attention")
    };
    trace.annotations.iter().any(|a| a.kind == AnnotationKind::Module && attention(interner.resolve(a.name)))
        || interner.frames().iter().any(|f| attention(interner.resolve(f.function)))
}

/// Whether the optimizer's state is 8-bit already, by the recorder's tags (bitsandbytes names
/// its moments `state1`, `state2` and their scales `absmax1`, `absmax2`).
fn state_is_8bit(trace: &Trace) -> bool {
    trace.tags.iter().any(|t| {
        t.category == Category::OptimizerState && {
            let name = trace.interner.resolve(t.name);
            name.ends_with(".state1") || name.ends_with(".absmax1")
        }
    })
}

/// The share of the parameters' bytes in 32 bits, from the dtypes the recorder saw
/// (`metadata.extra.parameter_dtypes`: bytes by dtype).
fn fp32_parameter_share(trace: &Trace) -> Option<f64> {
    let dtypes = trace.metadata.extra.get("parameter_dtypes")?.as_object()?;
    let bytes = |v: &serde_json::Value| v.as_f64().filter(|b| b.is_finite() && *b >= 0.0).unwrap_or(0.0);
    let total: f64 = dtypes.values().map(bytes).sum();
    let fp32: f64 = dtypes.iter().filter(|(k, _)| k.as_str() == "float32").map(|(_, v)| bytes(v)).sum();
    (total > 0.0).then(|| fp32 / total)
}
