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
use super::stack_blocks::StackBlocks;
use crate::attribution::{Attribution, Attributor, Evidence};
use crate::instant::allocation_site;
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
}

/// How the remedies that change the step or the model set the replay.
#[derive(Clone, Copy, Debug, Default)]
struct StepKnobs {
    /// What the optimizer step's temporaries are multiplied by.
    step_temporaries: f64,
    /// Kept gradients freed after each step.
    set_to_none: bool,
    /// The parameter whose blocks go (tied embeddings' head).
    drop_owner: Option<u32>,
    /// Forward's blocks freed as `no_grad` would free them.
    no_grad: bool,
    /// Gradients freed as the step after them begins (taken to the host).
    offload: bool,
    /// The linear layers' weights in int8.
    int8: bool,
    /// What the program kept from one iteration to the next freed as the next begins.
    drop_kept: bool,
    /// What scales with the batch is multiplied by this (data parallelism's share).
    batch: f64,
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
    /// unless it is what the module returns (its last allocation), then as the module that
    /// called it returns, and so on.
    no_grad_frees: HashMap<usize, i64>,
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

    /// What the remedies that change a part of the step or of the model do to the replay;
    /// `None` where the stream cannot show it.
    fn step_and_model(
        &self,
        remedy: Remedy,
        rules: RuleParts,
        knobs: &mut StepKnobs,
        factor: &mut [f64; Category::ALL.len()],
        extra: &mut Vec<(i64, usize, i64)>,
    ) -> Option<()> {
        match remedy {
            Remedy::SetToNone => knobs.set_to_none = true,
            Remedy::DropKept => {
                if !self.replays_kept() {
                    return None;
                }
                knobs.drop_kept = true;
            }
            Remedy::DataParallel => {
                knobs.batch /= f64::from(rules.gpus.max(1));
                // DDP's buckets: the gradients' size, from its construction on.
                if rules.training {
                    extra.push((i64::MIN, 0, rules.gradient_bytes.round() as i64));
                }
            }
            Remedy::Int8Weights => {
                if self.linear_weights.is_empty() {
                    return None;
                }
                knobs.int8 = true;
            }
            Remedy::CpuOffload => {
                factor[Category::OptimizerState as usize] = 0.0;
                knobs.step_temporaries = 0.0;
                knobs.offload = true;
            }
            Remedy::FusedStep => knobs.step_temporaries = 0.0,
            Remedy::ForeachOff => {
                knobs.step_temporaries = 0.0;
                // One parameter at a time: `exp_avg_sq.sqrt()` and its quotient by the bias
                // correction, alive together, of the largest parameter, through each step.
                let loop_bytes = (2.0 * rules.largest_gradient_bytes).round() as i64;
                for &(start, end) in &self.steps {
                    extra.push((start, 0, loop_bytes));
                    extra.push((end, usize::MAX, -loop_bytes));
                }
            }
            Remedy::TiedEmbeddings => knobs.drop_owner = Some(rules.untied_head?),
            Remedy::NoGrad => {
                if self.no_grad_frees.is_empty() {
                    return None;
                }
                knobs.no_grad = true;
            }
            Remedy::Lora => {
                // Every weight frozen: no optimizer state but the adapters', alive
                // throughout with their parameters. Their gradients come as backward reaches
                // them, as the weights' did: each gradient shrinks to the adapters' share of
                // them. The step runs over the adapters alone: its temporaries, per trained
                // parameter, shrink as much.
                let share = if rules.gradient_bytes > 0.0 {
                    (rules.adapter_bytes / rules.gradient_bytes).min(1.0)
                } else {
                    0.0
                };
                factor[Category::Gradient as usize] *= share;
                factor[Category::OptimizerState as usize] = 0.0;
                knobs.step_temporaries *= share;
                let adapters = (rules.adapter_bytes + rules.adapter_state_bytes).round() as i64;
                extra.push((i64::MIN, 0, adapters));
            }
            _ => {}
        }
        Some(())
    }

    /// The changes of the remedies that end blocks' lives elsewhere: what a program kept, freed
    /// as the next iteration begins; kept gradients, freed after each step and allocated again.
    fn moved_lifetimes(&self, knobs: &StepKnobs, size: &dyn Fn(&Block) -> i64, changes: &mut Vec<(i64, usize, i64)>) {
        if knobs.drop_kept {
            // Kept to the end: freed as the iteration after theirs begins.
            for &(block, at) in &self.kept_never_freed {
                if let Some(b) = self.blocks.get(block) {
                    changes.push((at, usize::MAX, -size(b)));
                }
            }
        }
        if knobs.set_to_none {
            // Freed after each step and allocated again by the next backward.
            for (block, splits) in &self.kept_gradients {
                let Some(b) = self.blocks.get(*block) else { continue };
                let bytes = size(b);
                for &(free, again) in splits {
                    changes.push((free, usize::MAX, -bytes));
                    changes.push((again, 0, bytes));
                }
            }
        }
    }

    /// When a block freed by `c` is freed with the remedies' knobs: earlier under `no_grad`, with
    /// an offloading optimizer, or when what a program kept is not kept; else when it was.
    fn freed_at(&self, b: &Block, c: &Change, knobs: &StepKnobs) -> (i64, usize) {
        let earlier =
            |map: &HashMap<usize, i64>, on: bool| map.get(&c.block).copied().filter(|&at| on && at < c.time_ns);
        if let Some(at) =
            earlier(&self.no_grad_frees, knobs.no_grad).or_else(|| earlier(&self.kept_frees, knobs.drop_kept))
        {
            return (at, usize::MAX);
        }
        if let Some(at) = knobs.offload.then(|| self.step_start_after(b, c)).flatten() {
            return (at, 0);
        }
        (c.time_ns, c.order)
    }

    /// Learns what grows from one iteration to the next ([`crate::growth`]): the blocks of its
    /// sites that outlive the iteration after theirs, and when that iteration begins (where
    /// they would be freed if the program did not keep them).
    pub fn learn_growth(&mut self, trace: &Trace, growth: &crate::growth::Growth) {
        if !growth.grows || growth.nature != crate::growth::Nature::Kept {
            return;
        }
        let sites: rustc_hash::FxHashSet<&str> =
            growth.sites.iter().filter(|s| !s.kv_cache).map(|s| s.site.as_str()).collect();
        let boundaries = &growth.boundary_ns;
        let mut freed: HashMap<usize, i64> = HashMap::default();
        for c in self.changes.iter().filter(|c| !c.alloc) {
            freed.insert(c.block, c.time_ns);
        }
        let mut by_stack: HashMap<StackId, bool> = HashMap::default();
        for (block, b) in self.blocks.iter().enumerate() {
            let Some(&at) = self.allocated_at.get(block).filter(|&&at| at != i64::MIN) else { continue };
            let k = boundaries.partition_point(|&t| t <= at);
            // After the first iteration (warm-up), and with an iteration after it.
            let Some(&next) = boundaries.get(k).filter(|_| k >= 2) else { continue };
            let end = freed.get(&block).copied();
            if end.is_some_and(|end| end <= next) {
                continue;
            }
            let grows = *by_stack
                .entry(b.stack)
                .or_insert_with(|| sites.contains(allocation_site(trace, b.stack, true).as_str()));
            if !grows {
                continue;
            }
            match end {
                Some(_) => {
                    self.kept_frees.insert(block, next);
                }
                None => self.kept_never_freed.push((block, next)),
            }
        }
    }

    /// Whether the replay knows what a program keeps from one iteration to the next.
    pub fn replays_kept(&self) -> bool {
        !self.kept_frees.is_empty() || !self.kept_never_freed.is_empty()
    }

    /// The start of the first optimizer step after a gradient was allocated, when the gradient
    /// (freed by `c`) lives into it: where an offloading optimizer takes it to the host.
    fn step_start_after(&self, b: &Block, c: &Change) -> Option<i64> {
        if b.category != Category::Gradient || b.in_step {
            return None;
        }
        let allocated = self.allocated_at.get(c.block).copied()?;
        let step = self.steps.get(self.steps.partition_point(|s| s.0 < allocated))?;
        (c.time_ns > step.0).then_some(step.0)
    }

    /// Learns the model's linear layers (from the layers the recorder wrote), the weights that
    /// int8 quantisation shrinks.
    pub fn learn_linear_layers(&mut self, layers: &[super::model::Layer]) {
        for l in layers.iter().filter(|l| !l.embedding) {
            if let Some(owner) = self.owner(&l.weight) {
                self.linear_weights.insert(owner, (l.rows * l.columns, l.columns));
            }
        }
    }

    /// A linear layer's weight in int8: one byte per element, and a scale per output in the
    /// weight's own dtype; `None` for any other block.
    fn int8_bytes(&self, b: &Block) -> Option<i64> {
        if b.category != Category::Parameter {
            return None;
        }
        let &(elements, outputs) = self.linear_weights.get(&b.owner?).filter(|w| w.0 > 0)?;
        let element_bytes = (b.size_bytes / elements).max(1);
        Some((elements + outputs * element_bytes) as i64)
    }

    /// The parameter named `name` (its weight, gradient and state), when the trace tags it.
    pub fn owner(&self, name: &str) -> Option<u32> {
        self.owners.get(name).copied()
    }

    /// The most gradient bytes kept through a forward (zeroed after a step, not freed).
    pub fn kept_gradient_bytes(&self) -> u64 {
        let mut at: HashMap<i64, u64> = HashMap::default();
        for (block, splits) in &self.kept_gradients {
            let size = self.blocks.get(*block).map_or(0, |b| b.size_bytes);
            for &(free, _) in splits {
                *at.entry(free).or_default() += size;
            }
        }
        at.into_values().max().unwrap_or(0)
    }

    /// The most bytes of temporaries alive at once in an optimizer step, and the largest
    /// gradient.
    pub fn step_temporaries(&self) -> (u64, u64) {
        let largest =
            self.blocks.iter().filter(|b| b.category == Category::Gradient).map(|b| b.size_bytes).max().unwrap_or(0);
        let (mut live, mut most) = (0i64, 0i64);
        for c in &self.changes {
            let Some(b) = self.blocks.get(c.block).filter(|b| b.in_step && b.category == Category::Temporary) else {
                continue;
            };
            live += if c.alloc { b.size_bytes as i64 } else { -(b.size_bytes as i64) };
            most = most.max(live);
        }
        (most.max(0) as u64, largest)
    }

    /// Bytes of optimizer state per byte of the parameters it is kept for (by the tags' names),
    /// when the trace tags both.
    pub fn state_per_parameter_byte(&self) -> Option<f64> {
        let mut of_parameter: HashMap<u32, (u64, u64)> = HashMap::default();
        for b in &self.blocks {
            let Some(owner) = b.owner else { continue };
            let entry = of_parameter.entry(owner).or_default();
            match b.category {
                Category::Parameter => entry.0 = entry.0.max(b.size_bytes),
                Category::OptimizerState => entry.1 += b.size_bytes,
                _ => {}
            }
        }
        // Each state tensor is tagged once per address it took: the largest per parameter is
        // what one step holds, counted from parameters that have state.
        let (parameters, state) = of_parameter
            .values()
            .filter(|(p, s)| *p > 0 && *s > 0)
            .fold((0u64, 0u64), |(p, s), (pp, ss)| (p + pp, s + ss));
        (parameters > 0).then(|| state as f64 / parameters as f64)
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
                Remedy::SetToNone
                | Remedy::FusedStep
                | Remedy::ForeachOff
                | Remedy::TiedEmbeddings
                | Remedy::NoGrad
                | Remedy::Lora
                | Remedy::CpuOffload
                | Remedy::Int8Weights
                | Remedy::DropKept
                | Remedy::DataParallel => {
                    self.step_and_model(remedy, rules, &mut knobs, &mut factor, &mut extra)?;
                    if matches!(remedy, Remedy::ForeachOff | Remedy::Lora)
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
            if let Some(bytes) = self.int8_bytes(b).filter(|_| knobs.int8) {
                return bytes;
            }
            let mut f = factor[b.category as usize];
            if b.in_step && b.category == Category::Temporary {
                f *= knobs.step_temporaries;
            }
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
                let (at, order) = self.freed_at(b, c, &knobs);
                changes.push((at, order, -bytes));
            }
        }
        self.moved_lifetimes(&knobs, &size, &mut changes);
        changes.extend(extra);
        Some((peak_of(changes), method))
    }
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

/// Under `no_grad`, when each block forward makes would be freed (see
/// [`Replayer::no_grad_frees`]), by the module spans: a module's locals die as it returns, what
/// it returns lives on in its caller.
fn no_grad_frees(r: &Replayer, trace: &Trace, spans: &[(i64, i64, AnnotationKind)]) -> HashMap<usize, i64> {
    let mut modules: Vec<(i64, i64)> =
        trace.annotations.iter().filter(|a| a.kind == AnnotationKind::Module).map(|a| (a.start_ns, a.end_ns)).collect();
    if modules.is_empty() {
        return HashMap::default();
    }
    modules.sort_unstable_by_key(|m| (m.0, std::cmp::Reverse(m.1)));
    // Each module's caller: the innermost span around it.
    let mut parents: Vec<Option<usize>> = vec![None; modules.len()];
    let mut open: Vec<usize> = Vec::new();
    for (i, m) in modules.iter().enumerate() {
        while open.last().is_some_and(|&o| modules[o].1 < m.0) {
            open.pop();
        }
        parents[i] = open.last().copied();
        open.push(i);
    }
    let innermost = |t: i64| {
        let mut i = modules.partition_point(|m| m.0 <= t).checked_sub(1)?;
        loop {
            if modules[i].1 >= t {
                return Some(i);
            }
            i = parents[i]?;
        }
    };
    let in_forward = |t: i64| phase_at(spans, t) == Some(Phase::Forward);
    // What each module made in forward, in order; its last is what it returns.
    let mut made: Vec<(usize, usize)> = Vec::new();
    let mut last: HashMap<usize, usize> = HashMap::default();
    for c in r.changes.iter().filter(|c| c.alloc && c.time_ns != i64::MIN && in_forward(c.time_ns)) {
        let Some(b) = r.blocks.get(c.block) else { continue };
        if !matches!(b.category, Category::Activation | Category::Temporary) {
            continue;
        }
        let Some(m) = innermost(c.time_ns) else { continue };
        made.push((c.block, m));
        // The last allocation of this module and of every module around it so far.
        let mut at = Some(m);
        while let Some(i) = at {
            last.insert(i, c.block);
            at = parents[i];
        }
    }
    let mut frees = HashMap::default();
    for (block, m) in made {
        let mut at = Some(m);
        while let Some(i) = at {
            if last.get(&i) != Some(&block) {
                frees.insert(block, modules[i].1);
                break;
            }
            at = parents[i];
        }
    }
    frees
}

/// The parameter a tagged block is or belongs to, and the part it is (`exp_avg`, `grad`): a
/// gradient's tag is its parameter's name and `.grad`, optimizer state's the parameter's and
/// what the optimizer calls it (`.exp_avg`, `.momentum_buffer`, `.step`).
fn owner_of(name: &str, category: Category) -> Option<(&str, &str)> {
    match category {
        Category::Parameter if !name.ends_with(" (buffer)") => Some((name, "")),
        Category::Gradient => name.strip_suffix(".grad").map(|owner| (owner, "grad")),
        Category::OptimizerState => {
            let whole = name.split('[').next().unwrap_or(name);
            whole.rsplit_once('.')
        }
        _ => None,
    }
}

/// The gradients kept through a later forward, as `zero_grad(set_to_none=False)` keeps them:
/// each allocated in a backward and alive at the start of a forward after it, with where
/// `set_to_none=True` would free it (the end of the last optimizer step before that forward,
/// else the forward's start) and allocate it again: where the next backward makes as many
/// allocations as its own had made before it (each backward computes the gradients in the same
/// order; times differ from one iteration to the next, the order does not).
fn kept_gradients(r: &Replayer, spans: &[(i64, i64, AnnotationKind)]) -> Vec<(usize, Vec<(i64, i64)>)> {
    let backwards: Vec<(i64, i64)> =
        spans.iter().filter(|s| s.2 == AnnotationKind::Backward).map(|s| (s.0, s.1)).collect();
    let forwards: Vec<i64> = spans.iter().filter(|s| s.2 == AnnotationKind::Forward).map(|s| s.0).collect();
    if backwards.is_empty() || forwards.len() < 2 {
        return Vec::new();
    }
    // Each backward's allocations, in order: (time, order).
    let mut allocations: Vec<Vec<Place>> = vec![Vec::new(); backwards.len()];
    let mut allocated: HashMap<usize, Place> = HashMap::default();
    let mut lifetimes: Vec<(usize, Place, i64)> = Vec::new();
    for c in &r.changes {
        if c.alloc {
            let i = backwards.partition_point(|b| b.0 <= c.time_ns);
            if let Some(i) = i.checked_sub(1).filter(|&i| c.time_ns <= backwards[i].1) {
                allocations[i].push((c.time_ns, c.order));
            }
        }
        let Some(b) = r.blocks.get(c.block) else { continue };
        if b.category != Category::Gradient || b.in_step {
            continue;
        }
        if c.alloc {
            allocated.insert(c.block, (c.time_ns, c.order));
        } else if let Some(at) = allocated.remove(&c.block) {
            lifetimes.push((c.block, at, c.time_ns));
        }
    }
    lifetimes.extend(allocated.into_iter().map(|(block, at)| (block, at, i64::MAX)));
    let mut kept = Vec::new();
    for (block, from, to) in lifetimes {
        // Its own backward, and how many allocations that backward had made before it.
        // Spans are sorted and do not overlap: searched, not scanned (a long run has thousands).
        let Some(own) =
            backwards.partition_point(|b| b.0 <= from.0).checked_sub(1).filter(|&i| from.0 <= backwards[i].1)
        else {
            continue;
        };
        let before = allocations[own].partition_point(|&a| a < from);
        let mut splits = Vec::new();
        let first = forwards.partition_point(|&f| f <= from.0);
        for &forward in forwards[first..].iter().take_while(|&&f| f < to) {
            let next = backwards.partition_point(|b| b.0 <= forward);
            if next >= backwards.len() {
                continue;
            }
            if backwards[next].0 >= to {
                continue;
            }
            let again = allocations[next].get(before).map_or(backwards[next].1, |a| a.0);
            // The last step to end before that forward, if it ended after the gradient came.
            let ended = r.steps.partition_point(|s| s.1 <= forward);
            let freed = ended.checked_sub(1).map(|i| r.steps[i].1).filter(|&end| end > from.0).unwrap_or(forward);
            splits.push((freed, again));
        }
        if !splits.is_empty() {
            kept.push((block, splits));
        }
    }
    kept.sort_unstable_by_key(|k| k.0);
    kept
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
        let replayer = Replayer::new(&trace, DeviceId(0), &phase_spans(&trace), None).expect("replayable");
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
        let replayer = Replayer::new(&trace, DeviceId(0), &spans, None).expect("replayable");
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
