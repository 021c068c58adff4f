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

use self::step::{StepKnobs, kept_gradients, no_grad_frees, owner_of};
use super::Phase;
use super::parts::{is_loss, phase_at, repeated_block, stays_fp32, upcasts_its_input};
use super::remedy::Remedy;
use super::stack_blocks::StackBlocks;

mod lora;
pub use self::lora::nf4_bytes;
mod step;
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
    /// The parameter it is, or is the gradient or optimizer state of, by the recorder's tag
    /// (an index into [`Replayer::owners`]).
    owner: Option<u32>,
    /// Its allocation's stack.
    stack: StackId,
    /// What the model's call returned (tagged by the recorder): the program holds it after the
    /// call, as long as it did.
    returned: bool,
    /// When it was allocated (`i64::MIN`: before the trace).
    at_ns: i64,
    /// The linear layers' calls that take it as their input.
    consumers: u32,
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
    /// The output head's weight that tied embeddings remove (with its gradient and state).
    pub untied_head: Option<u32>,
    /// LoRA's adapters, in bytes: their parameters (and as much again of gradients).
    pub adapter_bytes: f64,
    /// The adapters' optimizer state: as many bytes per adapter byte as the run's optimizer
    /// keeps per trained parameter byte.
    pub adapter_state_bytes: f64,
    /// What QLoRA's NF4 takes off the adapted layers' weights, in bytes.
    pub nf4_saving_bytes: f64,
    /// The largest gradient: a loop over the parameters holds temporaries of one at a time.
    pub largest_gradient_bytes: f64,
    /// The gradients of all the trained parameters (what the optimizer's step runs over).
    pub gradient_bytes: f64,
}

/// A device's event stream made ready to replay with remedies applied.
pub struct Replayer {
    /// Sorted by (time, order).
    changes: Vec<Change>,
    blocks: Vec<Block>,
    /// Each forward's start and the end of the backward after it (or of the forward itself).
    passes: Vec<(i64, i64)>,
    /// The optimizer steps: start and end.
    steps: Vec<(i64, i64)>,
    /// Activation checkpointing's moves for each repeated block of the model, in the model's
    /// order: (block, when it is allocated again); `None` when the stream does not show the
    /// blocks' activations.
    checkpointing: Option<Vec<Moves>>,
    /// The baseline's peak by this replay.
    pub baseline: SimulatedPeak,
    /// The parameters the blocks belong to, by the recorder's names, and their indices.
    owners: HashMap<String, u32>,
    /// Gradients kept through a later forward (zeroed, not freed): each block with when it
    /// would be freed (the end of the optimizer step before that forward) and allocated again
    /// (as far into that iteration's backward as it was into its own).
    kept_gradients: Vec<(usize, Vec<(i64, i64)>)>,
    /// The optimizer's state as Adam's (`exp_avg`, `exp_avg_sq`): the optimizers whose
    /// multi-tensor step holds temporaries of every parameter's size.
    pub adam: bool,
    /// When each block was allocated (by block).
    allocated_at: Vec<i64>,
    /// The linear layers' weights by owner: (elements, outputs), for weight-only quantisation.
    linear_weights: HashMap<u32, (u64, u64)>,
    /// What grows from one iteration to the next, freed as the iteration after its own begins:
    /// blocks freed later (block -> when), and blocks never freed (block, when).
    kept_frees: HashMap<usize, i64>,
    kept_never_freed: Vec<(usize, i64)>,
    /// Under `no_grad`, when each block made in forward would be freed: as its module returns,
    /// as the module call it is the input of returns, or (what a module returns) as its
    /// caller's next call returns ([`step::no_grad_frees`]).
    no_grad_frees: HashMap<usize, i64>,
    /// The calls of the layers LoRA would adapt, by when they returned.
    adapted_calls: Vec<lora::AdaptedCall>,
    /// The linear layers' calls (start, weight) and each weight's elements, for autocast's
    /// copies of them.
    weight_uses: Vec<(i64, usize)>,
    weight_elements: Vec<u64>,
    /// Under LoRA, when the inputs of the linear layers it leaves out (frozen then) are freed.
    frozen_input_frees: HashMap<usize, i64>,
    /// How the batches were padded, where the recorder saw it.
    pub padding: Option<crate::advisor::padding::Padding>,
}

/// A block's activations to allocate again: (block, when).
type Moves = Vec<(usize, i64)>;

/// Where a change is in the stream: (time, order).
pub(super) type Place = (i64, usize);

/// Traces with more allocations than this on the device are not replayed: the rules stand.
pub const MAX_REPLAYED_ALLOCATIONS: usize = 2_000_000;

impl Replayer {
    /// The stream of `device`, each block attributed; `None` when it is too long to replay
    /// for every remedy ([`MAX_REPLAYED_ALLOCATIONS`]).
    pub fn new(
        trace: &Trace,
        device: DeviceId,
        spans: &[(i64, i64, AnnotationKind)],
        stacks: Option<&StackBlocks>,
    ) -> Option<Self> {
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
            steps: spans.iter().filter(|s| s.2 == AnnotationKind::OptimizerStep).map(|s| (s.0, s.1)).collect(),
            checkpointing: None,
            baseline: SimulatedPeak::default(),
            owners: HashMap::default(),
            kept_gradients: Vec::new(),
            adam: false,
            no_grad_frees: HashMap::default(),
            adapted_calls: Vec::new(),
            frozen_input_frees: HashMap::default(),
            weight_uses: Vec::new(),
            weight_elements: Vec::new(),
            padding: None,
            allocated_at: Vec::new(),
            linear_weights: HashMap::default(),
            kept_frees: HashMap::default(),
            kept_never_freed: Vec::new(),
        };
        // The activations of each repeated block in each forward: (forward, block) -> blocks.
        let mut groups: HashMap<(usize, String), Vec<usize>> = HashMap::default();
        let mut add = |r: &mut Self,
                       (address, size_bytes, time_ns): (u64, u64, i64),
                       stack: StackId,
                       event: Option<usize>,
                       freed: Option<i64>| {
            let attribution = attributor.block(address, time_ns, i64::MAX, stack);
            let Attribution { category, evidence } = attribution;
            let forward = forwards.partition_point(|&f| f <= time_ns);
            let returned = matches!(evidence, Evidence::Tag(name)
                if category == Category::Activation && trace.interner.resolve(name).starts_with("output"));
            let owner = match evidence {
                Evidence::Tag(name) => owner_of(trace.interner.resolve(name), category).map(|(owner, part)| {
                    r.adam |= category == Category::OptimizerState && part == "exp_avg_sq";
                    let next = r.owners.len() as u32;
                    *r.owners.entry(owner.to_owned()).or_insert(next)
                }),
                _ => None,
            };
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
                owner,
                stack,
                returned,
                at_ns: time_ns,
                consumers: 0,
            });
            if let Evidence::Phase { module: Some(module), .. } = evidence
                && category == Category::Activation
                && freed.is_some()
                && let Some(repeated) = repeated_block(trace.interner.resolve(module))
            {
                groups.entry((forward, repeated.to_owned())).or_default().push(b);
            } else if category == Category::Activation
                && let Some((stacks, (pass, repeated), freed_ns)) =
                    stacks.zip(event).and_then(|(s, e)| Some((s, s.block_of(e)?, freed?)))
                && stacks.outlives_pass(pass, freed_ns)
            {
                // By the stacks: their pass through the blocks' loop stands for the forward.
                groups.entry((pass as usize, repeated)).or_default().push(b);
            }
            b
        };
        let initial = replay::initial_state(trace, device, &events);
        let two_step = trace.frees_in_two_steps(device);
        let mut before: HashMap<u64, usize> = HashMap::default();
        // Blocks waiting for their streams at the start are not allocated.
        for p in initial.blocks.iter().filter(|p| !p.awaiting) {
            let b = add(&mut r, (p.address, p.size_bytes, i64::MIN), p.stack(trace), None, None);
            r.changes.push(Change { time_ns: i64::MIN, order: 0, block: b, alloc: true });
            if p.address != 0 {
                before.insert(p.address, b);
            }
        }
        // Whether each allocation is freed, to know which activations backward frees.
        let mut freed: HashMap<u64, usize> = HashMap::default();
        let mut is_freed: Vec<Option<i64>> = vec![None; events.len()];
        for (order, i) in events.iter().map(|i| i as usize).enumerate() {
            let Some(e) = trace.events.get(i) else { continue };
            match e.kind {
                EventKind::Alloc => {
                    freed.insert(e.address, order);
                }
                EventKind::FreeRequested | EventKind::FreeCompleted if e.ends_allocation(two_step) => {
                    if let Some(at) = freed.remove(&e.address) {
                        is_freed[at] = Some(e.time_ns);
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
                    let b = add(&mut r, (e.address, e.size_bytes, e.time_ns), e.stack, Some(i), is_freed[order]);
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
        r.kept_gradients = kept_gradients(&r, spans);
        r.allocated_at = vec![i64::MIN; r.blocks.len()];
        for c in r.changes.iter().filter(|c| c.alloc) {
            if let Some(at) = r.allocated_at.get_mut(c.block) {
                *at = c.time_ns;
            }
        }
        if !spans.iter().any(|s| s.2 == AnnotationKind::Backward) {
            r.no_grad_frees = no_grad_frees(&r, trace, spans);
        }
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
        let mut knobs = StepKnobs { step_temporaries: 1.0, batch: 1.0, ..StepKnobs::default() };
        let mut computed = 1.0;
        let mut extra: Vec<(i64, usize, i64)> = Vec::new();
        for &remedy in applied {
            match remedy {
                Remedy::MicroBatchHalf => {
                    batch *= 0.5;
                    accumulate = true;
                }
                Remedy::SequenceHalf => batch *= 0.5,
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
                    extra.extend(self.weight_copies(rules));
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
                Remedy::Adam8bit
                | Remedy::Adafactor
                | Remedy::Sgd
                | Remedy::SetToNone
                | Remedy::FusedStep
                | Remedy::ForeachOff
                | Remedy::TiedEmbeddings
                | Remedy::NoGrad
                | Remedy::Lora
                | Remedy::Qlora
                | Remedy::CpuOffload
                | Remedy::Int8Weights
                | Remedy::Int4Weights
                | Remedy::DropKept
                | Remedy::DynamicPadding
                | Remedy::DataParallel => {
                    self.step_and_model(remedy, rules, &mut knobs, &mut factor, &mut extra)?;
                    if matches!(remedy, Remedy::ForeachOff | Remedy::Lora | Remedy::Qlora)
                        || (remedy == Remedy::DataParallel && rules.training)
                    {
                        method = Method::ReplayAndRule;
                    }
                }
                Remedy::ExpandableSegments | Remedy::MaxSplitSize => {}
            }
        }
        batch *= knobs.batch;
        let computes = |b: &Block| matches!(b.category, Category::Activation | Category::Temporary);
        let cast_here = |b: &Block| {
            cast && !b.fp32 && !b.in_step && (b.category == Category::Activation || (!rules.training && computes(b)))
        };
        let size = |b: &Block| -> i64 {
            if knobs.drop_owner.is_some() && b.owner == knobs.drop_owner {
                return 0;
            }
            if let Some(bytes) = self.quantised_bytes(b, knobs.quantised_bits) {
                return bytes;
            }
            if knobs.adam8bit && b.category == Category::OptimizerState {
                return adam8bit_bytes(b.size_bytes);
            }
            let mut f = factor[b.category as usize];
            if b.in_step && b.category == Category::Temporary {
                f *= knobs.step_temporaries;
            }
            let scales =
                matches!(b.category, Category::Activation | Category::Temporary | Category::Input) && !b.resident;
            if scales && !b.in_step {
                f *= batch;
                if knobs.padding {
                    f *= self.padding.as_ref().map_or(1.0, |p| p.filled_at(b.at_ns));
                }
            }
            if cast_here(b) {
                f *= 0.5;
            } else if cast && rules.training {
                f *= b.copies_for_layers();
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
                let (at, order) = self.freed_at(b, c, &knobs);
                changes.push((at, order, -bytes));
            }
        }
        self.moved_lifetimes(&knobs, &size, &mut changes);
        if knobs.lora {
            self.lora_transients(&size, &moved, knobs.nf4, &mut changes);
        }
        changes.extend(extra);
        Some((peak_of(changes), method))
    }
}

impl Block {
    /// Under autocast, training: what a block kept in 32 bits by its operator (a norm) becomes
    /// where it feeds linear layers: each casts it to 16 bits and saves its copy for backward,
    /// and the 32-bit one goes with the casts (1 where it feeds none).
    fn copies_for_layers(&self) -> f64 {
        if self.fp32 && self.consumers > 0 && self.category == Category::Activation && !self.in_step {
            0.5 * f64::from(self.consumers)
        } else {
            1.0
        }
    }
}

/// A 32-bit Adam moment of `bytes` in bitsandbytes' 8-bit Adam: a byte per element and a 32-bit
/// scale per 256 where it has 4096 elements or more, else as it is.
fn adam8bit_bytes(bytes: u64) -> i64 {
    let elements = bytes / 4;
    if elements >= 4096 { (elements + elements.div_ceil(256) * 4) as i64 } else { bytes as i64 }
}

/// The highest running total of `changes` (time, order, bytes), and when it was reached.
fn peak_of(mut changes: Vec<(i64, usize, i64)>) -> SimulatedPeak {
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
    best
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
mod tests;
