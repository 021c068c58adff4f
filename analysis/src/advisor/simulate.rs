//! Remedies applied to the recorded event stream, then replayed: the projected peak, its time
//! and so its phase come out of the same replay that measures the baseline, where a rule that
//! scales the memory of a few instants cannot follow what a remedy does over time.
//!
//! Each block of the stream (those alive from before the trace too) carries its category, the
//! repeated block of the model it was allocated in, whether autocast would keep it in 32 bits,
//! and whether it was allocated in the optimizer step. A remedy changes blocks' sizes or when
//! they are allocated:
//!
//! - half the micro-batch or the sequence: what scales with them (activations, temporaries,
//!   inputs, outside the optimizer step) halves; with the micro-batch halved over two, the
//!   gradients are allocated by the first micro-batch's backward, so they are alive from the
//!   start of the second's forward: each gradient's allocation moves to the start of the forward
//!   it followed;
//! - another optimizer: its state shrinks to its new form (8-bit Adam a quarter, Adafactor's
//!   factored moments 2%, SGD none);
//! - ZeRO over N: optimizer state (stage 1), gradients (2) and parameters (3) divided by N;
//! - autocast: the activations it would cast halve, those it keeps in 32 bits stay;
//! - activation checkpointing (`torch.utils.checkpoint`, `use_reentrant=False`, of each repeated
//!   block): in forward, a checkpointed block keeps only what it hands on (its output, the input
//!   of the next block); what it would have saved for backward is freed as soon as it is used,
//!   so it is not held at all. In backward, the block's forward runs again just before its own
//!   backward needs those activations: they are allocated again then, all at once, and freed
//!   when the recorded run freed them. So at most one block's activations are live again at a
//!   time, at the point backward reaches it.
//!
//! What the stream cannot show stays a rule, added to the replay as memory alive over a span
//! and said as such ([`Method::ReplayAndRule`]): autocast's 16-bit copies of the weights, alive
//! from each forward to the end of its backward, and the block of parameters ZeRO-3 gathers at a
//! time. Tensor and pipeline parallelism are rules only ([`Method::Rule`]).

use rustc_hash::FxHashMap as HashMap;
use serde::Serialize;
use vramscope_trace_format::{AnnotationKind, Category, DeviceId, EventKind, StackId, Trace};

use super::Phase;
use super::parts::{is_loss, phase_at, repeated_block, stays_fp32, upcasts_its_input};
use super::remedy::Remedy;
use crate::attribution::{Attribution, Attributor, Evidence};
use crate::replay;

/// How a projection was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// The changed event stream, replayed.
    Replay,
    /// The changed event stream replayed, with memory the stream cannot show added by a rule.
    ReplayAndRule,
    /// Rules applied to the memory taken apart at a few instants.
    Rule,
}

/// The peak of allocated bytes of a replayed stream, and when it was reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimulatedPeak {
    /// Bytes.
    pub bytes: u64,
    /// Time of the peak.
    pub time_ns: i64,
}

/// An allocation (or a free) in the stream: when, where it was in the trace (ties keep the
/// trace's order), and the block it allocates or frees.
#[derive(Clone, Copy, Debug)]
struct Change {
    time_ns: i64,
    order: usize,
    block: usize,
    alloc: bool,
}

/// What the remedies ask of a block.
#[derive(Clone, Copy, Debug)]
struct Block {
    size_bytes: u64,
    category: Category,
    /// Autocast would keep it in 32 bits.
    fp32: bool,
    /// The loss's: 32-bit whatever the model's dtype.
    loss: bool,
    /// Its operator keeps its input's size in 32 bits: on a 16-bit input, a 32-bit copy of it.
    upcast: bool,
    /// Allocated in the optimizer step.
    in_step: bool,
    /// The start of the forward it was allocated after (the gradients' move under accumulation).
    forward_ns: Option<i64>,
    /// A dataset the program holds whole: input no smaller batch shrinks.
    resident: bool,
}

/// What the rules add to a replay: autocast's weight copies, ZeRO-3's gathered block.
#[derive(Clone, Copy, Debug, Default)]
pub struct RuleParts {
    /// The weights matrix products read, in bytes (autocast keeps 16-bit copies, half of them).
    pub matmul_parameter_bytes: f64,
    /// The largest repeated block's parameters (ZeRO-3 gathers one block at a time).
    pub block_parameter_bytes: f64,
    /// GPUs to shard over.
    pub gpus: u32,
    /// The share of the parameters' bytes in 32 bits (what 16-bit weights halve).
    pub fp32_parameter_share: f64,
    /// Whether the run was under autocast (its activations 16-bit already).
    pub autocast: bool,
    /// Whether the run trained (under autocast an inference run's temporaries are what it
    /// computes, and are cast too).
    pub training: bool,
}

/// A device's event stream made ready to replay with remedies applied.
pub struct Replayer {
    /// Sorted by (time, order).
    changes: Vec<Change>,
    blocks: Vec<Block>,
    /// Each forward's start and the end of the backward after it (or of the forward itself).
    passes: Vec<(i64, i64)>,
    /// Activation checkpointing's moves for each repeated block of the model, in the model's
    /// order: (block, when it is allocated again); `None` when the stream does not show the
    /// blocks' activations.
    checkpointing: Option<Vec<Moves>>,
    /// The baseline's peak by this replay.
    pub baseline: SimulatedPeak,
}

/// A block's activations to allocate again: (block, when).
type Moves = Vec<(usize, i64)>;

/// Where a change is in the stream: (time, order).
type Place = (i64, usize);

/// Traces with more allocations than this on the device are not replayed: the rules stand.
pub const MAX_REPLAYED_ALLOCATIONS: usize = 2_000_000;

impl Replayer {
    /// The stream of `device`, each block attributed; `None` when it is too long to replay
    /// for every remedy ([`MAX_REPLAYED_ALLOCATIONS`]).
    pub fn new(trace: &Trace, device: DeviceId, spans: &[(i64, i64, AnnotationKind)]) -> Option<Self> {
        let events = replay::device_events(trace, device);
        let allocations =
            events.iter().filter(|&i| trace.events.get(i as usize).is_some_and(|e| e.kind == EventKind::Alloc));
        if allocations.count() > MAX_REPLAYED_ALLOCATIONS {
            return None;
        }
        let mut forwards: Vec<i64> =
            trace.annotations.iter().filter(|a| a.kind == AnnotationKind::Forward).map(|a| a.start_ns).collect();
        forwards.sort_unstable();
        let mut attributor = Attributor::new(trace, device);
        let mut r = Self {
            changes: Vec::new(),
            blocks: Vec::new(),
            passes: passes(spans),
            checkpointing: None,
            baseline: SimulatedPeak::default(),
        };
        // The activations of each repeated block in each forward: (forward, block) -> blocks.
        let mut groups: HashMap<(usize, String), Vec<usize>> = HashMap::default();
        let mut add = |r: &mut Self, address: u64, size_bytes: u64, time_ns: i64, stack: StackId, freed: bool| {
            let attribution = attributor.block(address, time_ns, i64::MAX, stack);
            let Attribution { category, evidence } = attribution;
            let forward = forwards.partition_point(|&f| f <= time_ns);
            let b = r.blocks.len();
            r.blocks.push(Block {
                size_bytes,
                category,
                fp32: matches!(category, Category::Activation | Category::Temporary)
                    && stays_fp32(trace, device, stack),
                loss: is_loss(trace, stack),
                upcast: upcasts_its_input(trace, device, stack),
                in_step: time_ns != i64::MIN && in_step(spans, time_ns),
                forward_ns: forward.checked_sub(1).map(|f| forwards[f]),
                resident: attribution.is_resident_input(trace),
            });
            if let Evidence::Phase { module: Some(module), .. } = evidence
                && category == Category::Activation
                && freed
                && let Some(repeated) = repeated_block(trace.interner.resolve(module))
            {
                groups.entry((forward, repeated.to_owned())).or_default().push(b);
            }
            b
        };
        let initial = replay::initial_state(trace, device, &events);
        let two_step = trace.frees_in_two_steps(device);
        let mut before: HashMap<u64, usize> = HashMap::default();
        // Blocks waiting for their streams at the start are not allocated.
        for p in initial.blocks.iter().filter(|p| !p.awaiting) {
            let b = add(&mut r, p.address, p.size_bytes, i64::MIN, p.stack(trace), false);
            r.changes.push(Change { time_ns: i64::MIN, order: 0, block: b, alloc: true });
            if p.address != 0 {
                before.insert(p.address, b);
            }
        }
        // Whether each allocation is freed, to know which activations backward frees.
        let mut freed: HashMap<u64, usize> = HashMap::default();
        let mut is_freed = vec![false; events.len()];
        for (order, i) in events.iter().map(|i| i as usize).enumerate() {
            let Some(e) = trace.events.get(i) else { continue };
            match e.kind {
                EventKind::Alloc => {
                    freed.insert(e.address, order);
                }
                EventKind::FreeRequested | EventKind::FreeCompleted if e.ends_allocation(two_step) => {
                    if let Some(at) = freed.remove(&e.address) {
                        is_freed[at] = true;
                    }
                }
                _ => {}
            }
        }
        let mut live: HashMap<u64, usize> = HashMap::default();
        for (order, i) in events.iter().map(|i| i as usize).enumerate() {
            let Some(e) = trace.events.get(i) else { continue };
            match e.kind {
                EventKind::Alloc => {
                    let b = add(&mut r, e.address, e.size_bytes, e.time_ns, e.stack, is_freed[order]);
                    r.changes.push(Change { time_ns: e.time_ns, order, block: b, alloc: true });
                    live.insert(e.address, b);
                }
                EventKind::FreeRequested | EventKind::FreeCompleted if e.ends_allocation(two_step) => {
                    if let Some(b) = live.remove(&e.address).or_else(|| before.remove(&e.address)) {
                        r.changes.push(Change { time_ns: e.time_ns, order, block: b, alloc: false });
                    }
                }
                _ => {}
            }
        }
        r.checkpointing = checkpoint_moves(&r, &groups);
        r.baseline = r.project(&[], RuleParts::default()).map(|(p, _)| p).unwrap_or_default();
        Some(r)
    }

    /// Whether checkpointing can be replayed (the stream shows two repeated blocks' activations).
    pub fn replays_checkpointing(&self) -> bool {
        self.checkpointing.is_some()
    }

    /// The repeated blocks checkpointing can be replayed for (0 when it cannot).
    pub fn checkpointable_blocks(&self) -> usize {
        self.checkpointing.as_ref().map_or(0, Vec::len)
    }

    /// The peak with `applied` (and how it was made), or `None` when one of them is a rule only
    /// or cannot be replayed on this stream.
    pub fn project(&self, applied: &[Remedy], rules: RuleParts) -> Option<(SimulatedPeak, Method)> {
        self.project_checkpointing(applied, rules, usize::MAX)
    }

    /// [`Self::project`], with checkpointing (if applied) of only the model's first `blocks`
    /// repeated blocks: selective checkpointing.
    pub fn project_checkpointing(
        &self,
        applied: &[Remedy],
        rules: RuleParts,
        blocks: usize,
    ) -> Option<(SimulatedPeak, Method)> {
        let n = f64::from(rules.gpus.max(1));
        let mut method = Method::Replay;
        let mut factor: [f64; Category::ALL.len()] = [1.0; Category::ALL.len()];
        let (mut batch, mut cast, mut accumulate, mut checkpoint) = (1.0, false, false, false);
        let mut computed = 1.0;
        let mut extra: Vec<(i64, usize, i64)> = Vec::new();
        for &remedy in applied {
            match remedy {
                Remedy::MicroBatchHalf => {
                    batch *= 0.5;
                    accumulate = true;
                }
                Remedy::SequenceHalf => batch *= 0.5,
                Remedy::Adam8bit => factor[Category::OptimizerState as usize] *= 0.25,
                Remedy::Adafactor => factor[Category::OptimizerState as usize] *= 0.02,
                Remedy::Sgd => factor[Category::OptimizerState as usize] = 0.0,
                Remedy::Zero1 | Remedy::Zero2 | Remedy::Zero3 => {
                    factor[Category::OptimizerState as usize] /= n;
                    if remedy.zero_stage() >= 2 {
                        factor[Category::Gradient as usize] /= n;
                    }
                    if remedy.zero_stage() >= 3 {
                        factor[Category::Parameter as usize] /= n;
                        let gathered = rules.block_parameter_bytes.round() as i64;
                        extra.push((i64::MIN, 0, gathered));
                        method = Method::ReplayAndRule;
                    }
                }
                Remedy::AmpBf16 | Remedy::AmpFp16 => {
                    cast = true;
                    // The weights' 16-bit copies, from each forward to the end of its backward.
                    let copies = (rules.matmul_parameter_bytes / 2.0).round() as i64;
                    for &(start, end) in &self.passes {
                        extra.push((start, 0, copies));
                        extra.push((end, usize::MAX, -copies));
                    }
                    method = Method::ReplayAndRule;
                }
                Remedy::Bf16Weights => {
                    factor[Category::Parameter as usize] *= 1.0 - rules.fp32_parameter_share / 2.0;
                    if !rules.autocast {
                        computed = 0.5;
                        method = Method::ReplayAndRule;
                    }
                }
                Remedy::ActivationCheckpointing => {
                    self.checkpointing.as_ref()?;
                    checkpoint = true;
                }
                Remedy::TensorParallel | Remedy::PipelineParallel => return None,
                Remedy::ExpandableSegments | Remedy::MaxSplitSize => {}
            }
        }
        let computes = |b: &Block| matches!(b.category, Category::Activation | Category::Temporary);
        let cast_here = |b: &Block| {
            cast && !b.fp32 && !b.in_step && (b.category == Category::Activation || (!rules.training && computes(b)))
        };
        let size = |b: &Block| -> i64 {
            let mut f = factor[b.category as usize];
            let scales =
                matches!(b.category, Category::Activation | Category::Temporary | Category::Input) && !b.resident;
            if scales && !b.in_step {
                f *= batch;
            }
            if cast_here(b) {
                f *= 0.5;
            }
            if computes(b) && !b.loss {
                f *= computed;
            }
            (b.size_bytes as f64 * f).round() as i64
        };
        // A 32-bit operator on what is 16-bit now: a 32-bit copy of its input while it runs.
        let upcast = |b: &Block| b.upcast && !b.in_step && (cast || computed < 1.0);
        let mut moved: HashMap<usize, i64> = HashMap::default();
        if checkpoint && let Some(moves) = &self.checkpointing {
            moved.extend(moves.iter().take(blocks).flatten().copied());
        }
        if accumulate {
            for (i, b) in self.blocks.iter().enumerate() {
                if b.category == Category::Gradient
                    && !b.in_step
                    && let Some(forward) = b.forward_ns
                {
                    moved.entry(i).or_insert(forward);
                }
            }
        }
        let mut changes: Vec<(i64, usize, i64)> = Vec::with_capacity(self.changes.len() + extra.len());
        for c in &self.changes {
            let Some(b) = self.blocks.get(c.block) else { continue };
            let bytes = size(b);
            if c.alloc {
                let copy = if upcast(b) { (b.size_bytes as f64 * batch).round() as i64 } else { 0 };
                match moved.get(&c.block) {
                    // Allocated again before what else happens then.
                    Some(&at) => changes.push((at, 0, bytes)),
                    None if copy > 0 => {
                        changes.push((c.time_ns, c.order, copy));
                        changes.push((c.time_ns, c.order, bytes));
                        changes.push((c.time_ns, c.order, -copy));
                    }
                    None => changes.push((c.time_ns, c.order, bytes)),
                }
            } else {
                changes.push((c.time_ns, c.order, -bytes));
            }
        }
        changes.extend(extra);
        // Nearly sorted already: the moves and the rules' spans are what sorting places.
        changes.sort_by_key(|c| (c.0, c.1));
        let mut bytes = 0i64;
        let first = changes.iter().map(|c| c.0).find(|&t| t != i64::MIN).unwrap_or(0);
        let mut best = SimulatedPeak { bytes: 0, time_ns: first };
        for &(time_ns, _, delta) in &changes {
            bytes += delta;
            if bytes > best.bytes as i64 {
                best = SimulatedPeak { bytes: bytes as u64, time_ns: time_ns.max(first) };
            }
        }
        Some((best, method))
    }
}

fn in_step(spans: &[(i64, i64, AnnotationKind)], time_ns: i64) -> bool {
    phase_at(spans, time_ns) == Some(Phase::OptimizerStep)
}

/// Each forward's start, and the end of the backward that follows it before the next forward
/// (the forward's own end when none does: inference).
fn passes(spans: &[(i64, i64, AnnotationKind)]) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    for (i, &(start, end, kind)) in spans.iter().enumerate() {
        if kind != AnnotationKind::Forward {
            continue;
        }
        let backward = spans[i + 1..]
            .iter()
            .take_while(|s| s.2 != AnnotationKind::Forward)
            .find(|s| s.2 == AnnotationKind::Backward)
            .map(|s| s.1);
        out.push((start, backward.unwrap_or(end).max(end)));
    }
    out
}

/// Checkpointing's moves, by repeated block in the model's order (of their first activation):
/// of each block's activations in each forward, all but its output (the last allocated, what it
/// hands on) are allocated again just before the first of them is freed in backward (the
/// block's recomputation). `None` with fewer than two blocks.
fn checkpoint_moves(r: &Replayer, groups: &HashMap<(usize, String), Vec<usize>>) -> Option<Vec<Vec<(usize, i64)>>> {
    let mut allocated: HashMap<usize, (i64, usize)> = HashMap::default();
    let mut freed: HashMap<usize, i64> = HashMap::default();
    for c in &r.changes {
        if c.alloc {
            allocated.insert(c.block, (c.time_ns, c.order));
        } else {
            freed.insert(c.block, c.time_ns);
        }
    }
    let mut by_block: HashMap<&str, (Place, Moves)> = HashMap::default();
    for ((_, block), members) in groups {
        let first = members.iter().filter_map(|b| allocated.get(b).copied()).min().unwrap_or_default();
        let entry = by_block.entry(block.as_str()).or_insert((first, Vec::new()));
        entry.0 = entry.0.min(first);
        let moves = &mut entry.1;
        let Some(&output) = members.iter().max_by_key(|b| allocated.get(b).copied().unwrap_or_default()) else {
            continue;
        };
        let others = || members.iter().copied().filter(|&b| b != output);
        let Some(recompute) = others().filter_map(|b| freed.get(&b).copied()).min() else { continue };
        moves.extend(others().map(|b| (b, recompute)));
    }
    if by_block.len() < 2 {
        return None;
    }
    let mut blocks: Vec<(Place, Moves)> = by_block.into_values().collect();
    blocks.sort_by_key(|b| b.0);
    Some(blocks.into_iter().map(|(_, moves)| moves).collect())
}

#[cfg(test)]
mod tests {
    use vramscope_trace_format::{Event, ProcessId, Tag};

    use super::*;
    use crate::advisor::phase_spans;
    use crate::testing::span;

    /// Two blocks, each saving 10 + 10 bytes and handing on 5, then a backward that frees
    /// block 1's, then block 0's. Without checkpointing: 50 live when backward starts. With it:
    /// the outputs (5 + 5), then block 1's 20 again (30), freed, then block 0's (30).
    #[test]
    fn checkpointed_blocks_hold_their_outputs_and_one_block_at_a_time() {
        let mut trace = Trace::default();
        span(&mut trace, AnnotationKind::Forward, "forward", 0, 100);
        span(&mut trace, AnnotationKind::Module, "blocks.0", 0, 49);
        span(&mut trace, AnnotationKind::Module, "blocks.1", 50, 99);
        span(&mut trace, AnnotationKind::Backward, "backward", 110, 200);
        let alloc = |trace: &mut Trace, at: i64, address: u64, size: u64| {
            trace.events.push(Event::new(EventKind::Alloc, at, 0, address, size));
        };
        for (base, at) in [(0x100u64, 10i64), (0x200, 60)] {
            alloc(&mut trace, at, base, 10);
            alloc(&mut trace, at + 1, base + 0x10, 10);
            alloc(&mut trace, at + 2, base + 0x20, 5);
        }
        let mut free =
            |at: i64, address: u64| trace.events.push(Event::new(EventKind::FreeCompleted, at, 0, address, 0));
        for (at, address) in [(120, 0x200), (121, 0x210), (122, 0x220), (150, 0x100), (151, 0x110), (152, 0x120)] {
            free(at, address);
        }
        let replayer = Replayer::new(&trace, DeviceId(0), &phase_spans(&trace)).expect("replayable");
        assert_eq!(replayer.baseline.bytes, 50);
        let (checkpointed, method) =
            replayer.project(&[Remedy::ActivationCheckpointing], RuleParts::default()).expect("two blocks");
        assert_eq!(checkpointed, SimulatedPeak { bytes: 30, time_ns: 120 });
        assert_eq!(method, Method::Replay);
        // Only the first block: its output (5) and all of the second (25) at the end of forward.
        assert_eq!(replayer.checkpointable_blocks(), 2);
        let (first_only, _) = replayer
            .project_checkpointing(&[Remedy::ActivationCheckpointing], RuleParts::default(), 1)
            .expect("two blocks");
        assert_eq!(first_only, SimulatedPeak { bytes: 30, time_ns: 62 });
    }

    /// One step, each block tagged: parameters 100 and optimizer state 200 throughout; in
    /// forward two activations of 40 and a temporary of 10; in backward gradients of 100 (freed
    /// by `zero_grad` after the step); in the step a temporary of 20. Baseline: 480 when the
    /// gradients arrive in backward.
    fn one_step() -> Trace {
        let mut trace = Trace::default();
        span(&mut trace, AnnotationKind::Forward, "forward", 10, 100);
        span(&mut trace, AnnotationKind::Backward, "backward", 110, 200);
        span(&mut trace, AnnotationKind::OptimizerStep, "step", 210, 250);
        let blocks = [
            (0x100u64, 100u64, 1i64, None, Category::Parameter),
            (0x200, 200, 2, None, Category::OptimizerState),
            (0x300, 40, 20, Some(140i64), Category::Activation),
            (0x400, 40, 30, Some(130), Category::Activation),
            (0x500, 10, 40, Some(41), Category::Temporary),
            (0x600, 100, 120, Some(260), Category::Gradient),
            (0x700, 20, 220, Some(230), Category::Temporary),
        ];
        let name = trace.interner.string("");
        for (address, size, at, _, category) in blocks {
            trace.events.push(Event::new(EventKind::Alloc, at, 0, address, size));
            trace.tags.push(Tag { time_ns: at, device: DeviceId(0), process: ProcessId(0), address, category, name });
        }
        for (address, _, _, free, _) in blocks {
            if let Some(at) = free {
                trace.events.push(Event::new(EventKind::FreeCompleted, at, 0, address, 0));
            }
        }
        trace.events.sort_by_key(|e| e.time_ns);
        trace
    }

    #[test]
    fn remedies_change_the_blocks_they_reach_and_the_replay_finds_the_new_peak() {
        let trace = one_step();
        let spans = phase_spans(&trace);
        let replayer = Replayer::new(&trace, DeviceId(0), &spans).expect("replayable");
        assert_eq!(replayer.baseline, SimulatedPeak { bytes: 480, time_ns: 120 });
        let rules = RuleParts {
            matmul_parameter_bytes: 60.0,
            block_parameter_bytes: 20.0,
            gpus: 2,
            training: true,
            ..RuleParts::default()
        };
        let project = |applied: &[Remedy]| replayer.project(applied, rules).expect("replayed");
        // Half the micro-batch over two: what scales halves (40 of activations, the forward's
        // temporary 5), and the gradients of the first micro-batch are alive from the second's
        // forward: 100 + 200 + 100 + 40 + 5 at the forward's temporary.
        let (peak, method) = project(&[Remedy::MicroBatchHalf]);
        assert_eq!((peak, method), (SimulatedPeak { bytes: 445, time_ns: 40 }, Method::Replay));
        assert_eq!(phase_at(&spans, peak.time_ns), Some(Phase::Forward));
        // Half the sequence: no gradients move; 100 + 200 + 40 + 100.
        assert_eq!(project(&[Remedy::SequenceHalf]).0.bytes, 440);
        assert_eq!(project(&[Remedy::Sgd]).0.bytes, 280);
        // ZeRO-2 over 2: optimizer state 100, gradients 50.
        assert_eq!(project(&[Remedy::Zero2]).0.bytes, 330);
        // ZeRO-3: and parameters 50, plus the gathered block of 20 (a rule).
        assert_eq!(project(&[Remedy::Zero3]), (SimulatedPeak { bytes: 300, time_ns: 120 }, Method::ReplayAndRule));
        // Autocast: the activations halve; 16-bit copies of the weights (30) from forward to the
        // end of backward.
        assert_eq!(project(&[Remedy::AmpBf16]).0.bytes, 470);
        // Together: SGD with half the micro-batch: 100 + 100 + 40 + 5.
        assert_eq!(project(&[Remedy::Sgd, Remedy::MicroBatchHalf]).0.bytes, 245);
        // Rules only.
        assert!(replayer.project(&[Remedy::TensorParallel], rules).is_none());
        // No repeated blocks: checkpointing cannot be replayed.
        assert!(replayer.project(&[Remedy::ActivationCheckpointing], rules).is_none());
    }
}
