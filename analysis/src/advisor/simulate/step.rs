//! The replay's remedies that change a part of the step or of the model (the optimizer's step,
//! the gradients' lifetimes, a head tied, LoRA, int8 weights, what a program keeps), and what
//! the replay learns for them: which blocks they reach, and when those would be freed.

use rustc_hash::FxHashMap as HashMap;
use vramscope_trace_format::{AnnotationKind, Category, StackId, Trace};

use super::{Block, Change, Place, Replayer, RuleParts};
use crate::advisor::Phase;
use crate::advisor::parts::phase_at;
use crate::advisor::remedy::{Remedy, quantised_weight_bytes};
use crate::instant::allocation_site;

/// How the remedies that change the step or the model set the replay.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct StepKnobs {
    /// What the optimizer step's temporaries are multiplied by.
    pub(super) step_temporaries: f64,
    /// Kept gradients freed after each step.
    pub(super) set_to_none: bool,
    /// The parameter whose blocks go (tied embeddings' head).
    pub(super) drop_owner: Option<u32>,
    /// Forward's blocks freed as `no_grad` would free them.
    pub(super) no_grad: bool,
    /// Gradients freed as the step after them begins (taken to the host).
    pub(super) offload: bool,
    /// The linear layers' weights in this many bits (8 or 4; 0: as they are).
    pub(super) quantised_bits: u32,
    /// What the program kept from one iteration to the next freed as the next begins.
    pub(super) drop_kept: bool,
    /// What scales with the batch is multiplied by this (data parallelism's share).
    pub(super) batch: f64,
    /// LoRA's adapters beside each adapted layer's call.
    pub(super) lora: bool,
    /// QLoRA: the adapted layers' weights in NF4, dequantised at each call.
    pub(super) nf4: bool,
    /// Adam's moments in 8 bits (bitsandbytes).
    pub(super) adam8bit: bool,
    /// What scales with the batch shrunk, in each iteration, to its batch's longest row.
    pub(super) padding: bool,
}

impl Replayer {
    /// What the remedies that change a part of the step or of the model do to the replay;
    /// `None` where the stream cannot show it.
    pub(super) fn step_and_model(
        &self,
        remedy: Remedy,
        rules: RuleParts,
        knobs: &mut StepKnobs,
        factor: &mut [f64; Category::ALL.len()],
        extra: &mut Vec<(i64, usize, i64)>,
    ) -> Option<()> {
        match remedy {
            // Each moment in 8 bits where the parameter has 4096 elements or more (with a 32-bit
            // scale per 256), in 32 as before under that (bitsandbytes' `min_8bit_size`); its
            // step one fused kernel per parameter, without the multi-tensor temporaries.
            Remedy::Adam8bit => {
                knobs.adam8bit = true;
                knobs.step_temporaries = 0.0;
            }
            Remedy::Adafactor => factor[Category::OptimizerState as usize] *= 0.02,
            Remedy::Sgd => factor[Category::OptimizerState as usize] = 0.0,
            Remedy::SetToNone => knobs.set_to_none = true,
            Remedy::DynamicPadding => {
                self.padding.as_ref()?;
                knobs.padding = true;
            }
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
            Remedy::Int8Weights | Remedy::Int4Weights => {
                if self.linear_weights.is_empty() {
                    return None;
                }
                knobs.quantised_bits = if remedy == Remedy::Int8Weights { 8 } else { 4 };
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
            Remedy::Lora | Remedy::Qlora => {
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
                knobs.lora = true;
                knobs.nf4 = remedy == Remedy::Qlora;
                // The adapted layers' weights in NF4, from before the trace (the model loaded):
                // by their bytes, as a checkpoint's weights may share one buffer.
                if knobs.nf4 {
                    extra.push((i64::MIN, 0, -rules.nf4_saving_bytes.round() as i64));
                }
            }
            _ => {}
        }
        Some(())
    }

    /// The changes of the remedies that end blocks' lives elsewhere: what a program kept, freed
    /// as the next iteration begins; kept gradients, freed after each step and allocated again.
    pub(super) fn moved_lifetimes(
        &self,
        knobs: &StepKnobs,
        size: &dyn Fn(&Block) -> i64,
        changes: &mut Vec<(i64, usize, i64)>,
    ) {
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
    /// an offloading optimizer, when what a program kept is not kept, or (LoRA) as the frozen
    /// layer it was saved for returns; else when it was.
    pub(super) fn freed_at(&self, b: &Block, c: &Change, knobs: &StepKnobs) -> (i64, usize) {
        let earlier =
            |map: &HashMap<usize, i64>, on: bool| map.get(&c.block).copied().filter(|&at| on && at < c.time_ns);
        if let Some(at) = earlier(&self.no_grad_frees, knobs.no_grad)
            .or_else(|| earlier(&self.kept_frees, knobs.drop_kept))
            .or_else(|| earlier(&self.frozen_input_frees, knobs.lora))
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
    pub(super) fn step_start_after(&self, b: &Block, c: &Change) -> Option<i64> {
        if b.category != Category::Gradient || b.in_step {
            return None;
        }
        let allocated = self.allocated_at.get(c.block).copied()?;
        let step = self.steps.get(self.steps.partition_point(|s| s.0 < allocated))?;
        (c.time_ns > step.0).then_some(step.0)
    }

    /// Learns the model's linear layers (from the layers the recorder wrote), the weights that
    /// int8 quantisation shrinks.
    pub fn learn_linear_layers(&mut self, layers: &[crate::advisor::model::Layer]) {
        for l in layers.iter().filter(|l| !l.embedding) {
            if let Some(owner) = self.owner(&l.weight) {
                self.linear_weights.insert(owner, (l.rows * l.columns, l.columns));
            }
        }
    }

    /// A linear layer's weight quantised to `bits` ([`quantised_weight_bytes`]), its scales in
    /// the weight's own dtype; `None` for any other block.
    pub(super) fn quantised_bytes(&self, b: &Block, bits: u32) -> Option<i64> {
        if b.category != Category::Parameter || bits == 0 {
            return None;
        }
        let &(elements, outputs) = self.linear_weights.get(&b.owner?).filter(|w| w.0 > 0 && w.1 > 0)?;
        let element_bytes = (b.size_bytes / elements).max(1);
        Some(quantised_weight_bytes(elements / outputs, outputs, element_bytes, bits) as i64)
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
}

/// Under `no_grad`, when each block forward makes would be freed (see
/// [`Replayer::no_grad_frees`]), by the module spans, as Python frees what nothing refers to:
/// a module's locals die as it returns; what it returns is its caller's, passed to the caller's
/// next module call (`x = block(x)`, `attn(ln1(x))`) and dead as that call returns, or, with no
/// call after it, returned again; and a value the caller computes itself just before a module
/// call is that call's input, dead as it returns. A value bound to a name that outlives the
/// next call (`q = q_proj(x); k = k_proj(x)`, a residual kept over a norm) dies earlier here
/// than in the program: the projection's ± says how far the rule's alternatives lie. What the
/// model returned (the recorder tags it: logits, a cache of keys and values) lives as it did.
pub(super) fn no_grad_frees(r: &Replayer, trace: &Trace, spans: &[(i64, i64, AnnotationKind)]) -> HashMap<usize, i64> {
    let mut modules: Vec<(i64, i64)> =
        trace.annotations.iter().filter(|a| a.kind == AnnotationKind::Module).map(|a| (a.start_ns, a.end_ns)).collect();
    if modules.is_empty() {
        return HashMap::default();
    }
    modules.sort_unstable_by_key(|m| (m.0, std::cmp::Reverse(m.1)));
    let tree = ModuleTree::new(modules);
    let in_forward = |t: i64| phase_at(spans, t) == Some(Phase::Forward);
    // What each module made in forward, in order (with when); its last is what it returns.
    let mut made: Vec<(usize, usize, i64)> = Vec::new();
    let mut last: HashMap<usize, usize> = HashMap::default();
    for c in r.changes.iter().filter(|c| c.alloc && c.time_ns != i64::MIN && in_forward(c.time_ns)) {
        let Some(b) = r.blocks.get(c.block) else { continue };
        if !matches!(b.category, Category::Activation | Category::Temporary) {
            continue;
        }
        let Some(m) = tree.innermost(c.time_ns) else { continue };
        made.push((c.block, m, c.time_ns));
        // The last allocation of this module and of every module around it so far.
        let mut at = Some(m);
        while let Some(i) = at {
            last.insert(i, c.block);
            at = tree.parents[i];
        }
    }
    let mut frees = HashMap::default();
    for (k, &(block, m, time)) in made.iter().enumerate() {
        if r.blocks.get(block).is_some_and(|b| b.returned) {
            continue;
        }
        let mut at = Some(m);
        while let Some(i) = at {
            if last.get(&i) != Some(&block) {
                // A local of `i`, or (made by `i` itself just before one of its calls) that
                // call's input.
                let input_of = (i == m)
                    .then(|| tree.next_child(i, time))
                    .flatten()
                    .filter(|&call| made[k + 1..].iter().take_while(|n| n.2 < tree.spans[call].0).all(|n| n.1 != m));
                frees.insert(block, input_of.map_or(tree.spans[i].1, |call| tree.spans[call].1));
                break;
            }
            // What `i` returns: the input of its caller's next call, if it makes one.
            if let Some(call) = tree.parents[i].and_then(|p| tree.next_child(p, tree.spans[i].1)) {
                frees.insert(block, tree.spans[call].1);
                break;
            }
            at = tree.parents[i];
        }
    }
    frees
}

/// The module spans as calls: each one's caller (the innermost span around it) and calls.
struct ModuleTree {
    /// (start, end), sorted by start (the outer first where two start together).
    spans: Vec<(i64, i64)>,
    parents: Vec<Option<usize>>,
    /// Each module's calls, in order (the outermost's under `None`).
    children: HashMap<Option<usize>, Vec<usize>>,
}

impl ModuleTree {
    fn new(spans: Vec<(i64, i64)>) -> Self {
        let mut parents: Vec<Option<usize>> = vec![None; spans.len()];
        let mut children: HashMap<Option<usize>, Vec<usize>> = HashMap::default();
        let mut open: Vec<usize> = Vec::new();
        for (i, m) in spans.iter().enumerate() {
            while open.last().is_some_and(|&o| spans[o].1 < m.0) {
                open.pop();
            }
            parents[i] = open.last().copied();
            children.entry(parents[i]).or_default().push(i);
            open.push(i);
        }
        Self { spans, parents, children }
    }

    /// The innermost module running at `t`.
    fn innermost(&self, t: i64) -> Option<usize> {
        let mut i = self.spans.partition_point(|m| m.0 <= t).checked_sub(1)?;
        loop {
            if self.spans[i].1 >= t {
                return Some(i);
            }
            i = self.parents[i]?;
        }
    }

    /// The first call `parent` makes after `t`.
    fn next_child(&self, parent: usize, t: i64) -> Option<usize> {
        let calls = self.children.get(&Some(parent))?;
        calls.get(calls.partition_point(|&c| self.spans[c].0 <= t)).copied()
    }
}

/// The parameter a tagged block is or belongs to, and the part it is (`exp_avg`, `grad`): a
/// gradient's tag is its parameter's name and `.grad`, optimizer state's the parameter's and
/// what the optimizer calls it (`.exp_avg`, `.momentum_buffer`, `.step`).
pub(super) fn owner_of(name: &str, category: Category) -> Option<(&str, &str)> {
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
pub(super) fn kept_gradients(r: &Replayer, spans: &[(i64, i64, AnnotationKind)]) -> Vec<(usize, Vec<(i64, i64)>)> {
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
