//! LoRA's adapters in the replay: what their forward and backward add beside each adapted
//! layer, as peft computes them. Forward: `base(x) + lora_B(lora_A(dropout(x))) * scaling`, so
//! as the layer returns, `lora_B`'s output and its scaled copy (each of the output's size) are
//! alive with the base output while their sum is made, and `lora_A`'s output (`rank` columns)
//! is saved for backward. Backward, where the base weight's gradient was computed: the scaled
//! gradient of `lora_B`'s output (the output's size) and the gradient `lora_A` passes to the
//! input (the input's size), before autograd adds it to the base layer's. And a linear layer
//! left out of the adapters (the output head) is frozen: autograd does not save its input for
//! it (a weight's gradient is what needs it), which dies as the layer returns.
//!
//! QLoRA: the adapted layers' weights in NF4 (bitsandbytes: two weights per byte and a 32-bit
//! scale per 64), each dequantised whole for its matrix product, in forward and again in
//! backward for the input's gradient: a transient of the weight's size at each.
//!
//! The linear layers' calls found here serve autocast's replay too: which block each call takes
//! as its input (cast once per call), and when each weight is first used in a pass (where its
//! 16-bit copy is made).

use rustc_hash::FxHashMap as HashMap;
use vramscope_trace_format::{AnnotationKind, Category, Trace};

use super::{Block, Change, Replayer};
use crate::advisor::model::{LORA_RANK, Layer};
use crate::advisor::parts::repeated_block;

/// A call of a layer LoRA would adapt, in the stream.
#[derive(Clone, Copy, Debug)]
pub(super) struct AdaptedCall {
    /// The base layer's output block.
    output: usize,
    /// When the call returned.
    end_ns: i64,
    /// The layer's inputs and outputs (features).
    inputs: u64,
    outputs: u64,
    /// Its weight's parameter (an index into the replay's owners).
    owner: Option<u32>,
    /// Its weight's bytes (what QLoRA dequantises).
    weight_bytes: i64,
}

/// NF4's block: the weights that share a 32-bit scale (bitsandbytes' default for 4 bits).
const NF4_BLOCK: u64 = 64;

/// A weight of `elements` in NF4: half a byte each, and a 32-bit scale per block.
pub fn nf4_bytes(elements: u64) -> u64 {
    elements / 2 + elements.div_ceil(NF4_BLOCK) * 4
}

impl Replayer {
    /// Learns the linear layers' calls from the module spans: those LoRA would adapt
    /// ([`Replayer::learn_adapted_layers`]) and what each call takes as its input
    /// ([`Replayer::learn_linear_inputs`]). `element_bytes`: the weights' bytes per element.
    pub fn learn_layer_calls(&mut self, trace: &Trace, layers: &[Layer], element_bytes: u64) {
        if layers.is_empty() {
            return;
        }
        // When each block is freed, for both.
        let mut freed: HashMap<usize, i64> = HashMap::default();
        for c in self.changes.iter().filter(|c| !c.alloc) {
            freed.insert(c.block, c.time_ns);
        }
        self.learn_adapted_layers(trace, layers, element_bytes, &freed);
        self.learn_linear_inputs(trace, layers, &freed);
    }

    /// Learns the calls of the layers LoRA would adapt (the trainable linear layers of the
    /// repeated blocks, as [`crate::advisor::model::adapters`] picks them), by the module spans.
    fn learn_adapted_layers(
        &mut self,
        trace: &Trace,
        layers: &[Layer],
        element_bytes: u64,
        freed: &HashMap<usize, i64>,
    ) {
        let trained: Vec<&Layer> = layers.iter().filter(|l| !l.embedding && l.trainable).collect();
        let targets: HashMap<&str, &Layer> =
            trained.iter().filter(|l| repeated_block(&l.module).is_some()).map(|l| (l.module.as_str(), *l)).collect();
        if targets.is_empty() {
            return;
        }
        let frozen: HashMap<&str, &Layer> = trained
            .iter()
            .filter(|l| !targets.contains_key(l.module.as_str()))
            .map(|l| (l.module.as_str(), *l))
            .collect();
        let computed = |c: &&Change| computes(&self.blocks, c);
        let mut frozen_inputs = Vec::new();
        let mut calls = Vec::new();
        for a in trace.annotations.iter().filter(|a| a.kind == AnnotationKind::Module) {
            let name = trace.interner.resolve(a.name);
            if let Some(layer) = frozen.get(name) {
                frozen_inputs.extend(self.frozen_input(layer, (a.start_ns, a.end_ns), freed));
                continue;
            }
            let Some(layer) = targets.get(name) else { continue };
            // The call's output: its last allocation of what forward computes.
            let from = self.changes.partition_point(|c| c.time_ns < a.start_ns);
            let to = self.changes.partition_point(|c| c.time_ns <= a.end_ns);
            let output = self.changes[from..to].iter().rev().find(computed);
            if let Some(c) = output {
                calls.push(AdaptedCall {
                    output: c.block,
                    end_ns: a.end_ns,
                    inputs: layer.rows,
                    outputs: layer.columns.max(1),
                    owner: self.owner(&layer.weight),
                    weight_bytes: (layer.rows * layer.columns * element_bytes) as i64,
                });
            }
        }
        calls.sort_unstable_by_key(|c| c.end_ns);
        self.adapted_calls = calls;
        self.frozen_input_frees.extend(frozen_inputs);
    }

    /// The input of a call of a linear layer LoRA leaves out, freed as the call returns under
    /// LoRA (see [`Replayer::input_of_call`]).
    fn frozen_input(
        &self,
        layer: &Layer,
        (start, end): (i64, i64),
        freed: &HashMap<usize, i64>,
    ) -> Option<(usize, i64)> {
        self.input_of_call(layer, (start, end), freed, &rustc_hash::FxHashSet::default()).map(|block| (block, end))
    }

    /// The input of a linear layer's call: the block computed last before the call (among the
    /// last few thousand allocations), alive after it, of the input's size (the call's
    /// output's, times inputs over outputs), and not in `outputs` (other linear layers'
    /// outputs: `q_proj`'s is not `k_proj`'s input, though they are the same size).
    pub(super) fn input_of_call(
        &self,
        layer: &Layer,
        (start, end): (i64, i64),
        freed: &HashMap<usize, i64>,
        outputs: &rustc_hash::FxHashSet<usize>,
    ) -> Option<usize> {
        const LOOK_BACK: usize = 4096;
        let computed = |c: &&Change| computes(&self.blocks, c);
        let from = self.changes.partition_point(|c| c.time_ns < start);
        let to = self.changes.partition_point(|c| c.time_ns <= end);
        let output = self.changes[from..to].iter().rev().find(computed).and_then(|c| self.blocks.get(c.block))?;
        let bytes = output.size_bytes as f64 * layer.rows as f64 / layer.columns.max(1) as f64;
        let input = self.changes[from.saturating_sub(LOOK_BACK)..from].iter().rev().find(|c| {
            computed(c)
                && !outputs.contains(&c.block)
                && freed.get(&c.block).is_none_or(|&at| at > end)
                && self.blocks.get(c.block).is_some_and(|b| (b.size_bytes as f64 - bytes).abs() < 1.0)
        });
        input.map(|c| c.block)
    }

    /// Learns how many linear layers' calls take each block as their input: autocast casts it
    /// to 16 bits once per call (it caches the weights' casts, not the activations'), and each
    /// copy is saved for backward by its layer.
    fn learn_linear_inputs(&mut self, trace: &Trace, layers: &[Layer], freed: &HashMap<usize, i64>) {
        let linear: HashMap<&str, &Layer> =
            layers.iter().filter(|l| !l.embedding).map(|l| (l.module.as_str(), l)).collect();
        if linear.is_empty() {
            return;
        }
        let calls: Vec<(&Layer, (i64, i64))> = trace
            .annotations
            .iter()
            .filter(|a| a.kind == AnnotationKind::Module)
            .filter_map(|a| Some((*linear.get(trace.interner.resolve(a.name))?, (a.start_ns, a.end_ns))))
            .collect();
        // Each call's output: its last allocation of what forward computes.
        let outputs: rustc_hash::FxHashSet<usize> = calls
            .iter()
            .filter_map(|&(_, (start, end))| {
                let from = self.changes.partition_point(|c| c.time_ns < start);
                let to = self.changes.partition_point(|c| c.time_ns <= end);
                self.changes[from..to].iter().rev().find(|c| computes(&self.blocks, c)).map(|c| c.block)
            })
            .collect();
        // When each weight is first used: where autocast makes (and caches) its 16-bit copy.
        let mut weights: HashMap<&str, usize> = HashMap::default();
        let mut uses = Vec::new();
        for &(layer, (start, _)) in &calls {
            let next = weights.len();
            let w = *weights.entry(layer.weight.as_str()).or_insert(next);
            if w == self.weight_elements.len() {
                self.weight_elements.push(layer.rows * layer.columns);
            }
            uses.push((start, w));
        }
        uses.sort_unstable();
        self.weight_uses = uses;
        let mut consumers: HashMap<usize, u32> = HashMap::default();
        for &(layer, span) in &calls {
            if let Some(block) = self.input_of_call(layer, span, freed, &outputs) {
                *consumers.entry(block).or_default() += 1;
            }
        }
        for (block, k) in consumers {
            if let Some(b) = self.blocks.get_mut(block) {
                b.consumers = k;
            }
        }
    }

    /// What the adapters add to the replay: each call's forward transients (again where
    /// checkpointing computes its output again, at `moved`), the `rank`-column output saved
    /// until backward reaches the layer, and backward's transients there. `size` is a block's
    /// bytes with the other remedies applied.
    pub(super) fn lora_transients(
        &self,
        size: &dyn Fn(&Block) -> i64,
        moved: &HashMap<usize, i64>,
        nf4: bool,
        changes: &mut Vec<(i64, usize, i64)>,
    ) {
        // Where backward computed each weight's gradient: (time, order), by owner.
        let mut gradients: HashMap<u32, Vec<(i64, usize)>> = HashMap::default();
        for c in self.changes.iter().filter(|c| c.alloc && c.time_ns != i64::MIN) {
            let Some(b) = self.blocks.get(c.block) else { continue };
            if b.category == Category::Gradient
                && !b.in_step
                && let Some(owner) = b.owner
            {
                gradients.entry(owner).or_default().push((c.time_ns, c.order));
            }
        }
        let spikes = |changes: &mut Vec<(i64, usize, i64)>, at: (i64, usize), bytes: i64| {
            changes.push((at.0, at.1, bytes));
            changes.push((at.0, at.1, -bytes));
        };
        for call in &self.adapted_calls {
            let Some(b) = self.blocks.get(call.output) else { continue };
            let output = size(b);
            let per_column = output as f64 / call.outputs as f64;
            let input = (per_column * call.inputs as f64).round() as i64;
            let saved = (per_column * LORA_RANK as f64).round() as i64;
            // QLoRA's dequantised weight, before the output is made (apart from the adapters').
            let dequantised = if nf4 { call.weight_bytes } else { 0 };
            spikes(changes, (call.end_ns, 0), 2 * output);
            spikes(changes, (call.end_ns, 0), dequantised);
            if let Some(&again) = moved.get(&call.output) {
                spikes(changes, (again, usize::MAX), 2 * output);
                spikes(changes, (again, usize::MAX), dequantised);
            }
            // Backward reaches the layer where its weight's gradient is computed.
            let backward = call.owner.and_then(|o| gradients.get(&o)).and_then(|g| {
                let i = g.partition_point(|&(t, _)| t <= call.end_ns);
                g.get(i).copied().filter(|&(t, _)| t <= self.pass_end(call.end_ns))
            });
            changes.push((call.end_ns, 0, saved));
            match backward {
                Some(at) => {
                    spikes(changes, at, output + input);
                    spikes(changes, at, dequantised);
                    changes.push((at.0, at.1, -saved));
                }
                None => changes.push((self.pass_end(call.end_ns), usize::MAX, -saved)),
            }
        }
    }

    /// Autocast's 16-bit copies of the linear layers' weights, by the layers' calls: each from
    /// its weight's first use in a pass to the pass's end (kept for backward, cached until the
    /// autocast region ends); where the calls are not known, the rule's.
    pub(super) fn weight_copies(&self, rules: super::RuleParts) -> Vec<(i64, usize, i64)> {
        let mut out = Vec::new();
        if self.weight_uses.is_empty() {
            // From each forward to the end of its backward, the weights matrix products read.
            let copies = (rules.matmul_parameter_bytes / 2.0).round() as i64;
            for &(start, end) in &self.passes {
                out.push((start, 0, copies));
                out.push((end, usize::MAX, -copies));
            }
            return out;
        }
        for &(start, end) in &self.passes {
            let mut seen = rustc_hash::FxHashSet::default();
            let from = self.weight_uses.partition_point(|u| u.0 < start);
            for &(at, w) in self.weight_uses[from..].iter().take_while(|u| u.0 <= end) {
                if seen.insert(w) {
                    // 16-bit copies of the 32-bit weights (a 16-bit weight is used as it is).
                    let bytes = (self.weight_elements[w] as f64 * 2.0 * rules.fp32_parameter_share).round() as i64;
                    out.push((at, 0, bytes));
                    out.push((end, usize::MAX, -bytes));
                }
            }
        }
        out
    }

    /// The end of the pass (a forward and the backward after it) around `t`.
    fn pass_end(&self, t: i64) -> i64 {
        let i = self.passes.partition_point(|p| p.0 <= t);
        i.checked_sub(1).map_or(t, |i| self.passes[i].1.max(t))
    }
}

/// Whether `c` allocates what forward (or backward) computes.
fn computes(blocks: &[Block], c: &Change) -> bool {
    c.alloc && blocks.get(c.block).is_some_and(|b| matches!(b.category, Category::Activation | Category::Temporary))
}
