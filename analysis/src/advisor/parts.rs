//! The memory of a device at one instant, taken apart for the advisor: by category (the
//! attribution's), with the activations further split by the repeated block of the model they
//! were allocated in (`blocks.3`, from the module spans), by whether autocast would keep them in
//! 32 bits, and with what a matrix product's weights and the largest block's parameters hold.

use std::collections::BTreeMap;

use vramscope_trace_format::{AnnotationKind, Category, DeviceId, StackId, Trace};

use super::Phase;
use crate::attribution::{Attribution, Attributor, Evidence};
use crate::peak;

/// Memory at one instant, taken apart.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Parts {
    pub phase: Option<Phase>,
    pub parameter: f64,
    pub gradient: f64,
    pub optimizer_state: f64,
    pub activation: f64,
    pub temporary: f64,
    pub input: f64,
    pub other: f64,
    /// Activations that stay 32-bit under autocast (residual sums, the loss's log-softmax,
    /// embeddings); the rest would be 16-bit.
    pub fp32_activation: f64,
    /// Activations per repeated block of the model, by block.
    pub blocks: BTreeMap<String, f64>,
    /// The commonest activation size inside the blocks: what a block passes to the next.
    pub boundary: f64,
    /// Parameters that matrix products read (cast to 16 bits under autocast, and kept for backward).
    pub matmul_parameter: f64,
    /// The largest block's parameters (ZeRO-3 gathers one block at a time).
    pub block_parameter: f64,
    /// The parameters of all the repeated blocks (what tensor and pipeline parallelism split).
    pub in_block_parameter: f64,
    /// Parameters outside the blocks whose module runs after them in forward (a final norm, an
    /// LM head): a pipeline's last stage holds them, the first stage the rest.
    pub after_parameter: f64,
    /// Activations outside the blocks allocated after the last block in forward (the head's,
    /// the loss's): the last stage's.
    pub after_activation: f64,
    /// How the categories were known, in bytes.
    pub evidence: EvidenceBytes,
}

/// Bytes of an instant by how their category was known.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct EvidenceBytes {
    /// Tagged by the recorder.
    pub tagged: f64,
    /// From the phase they were allocated in and their lifetime.
    pub phase: f64,
    /// Allocated before the recording, sizes matched to the gradients' or the optimizer state's.
    pub size_match: f64,
    /// Guessed from a stack frame.
    pub stack_rule: f64,
    /// Allocated before the recording, nothing else known.
    pub before_recording: f64,
    /// Not known at all.
    pub unknown: f64,
}

/// The share of the bytes a stack-frame rule attributes that is taken to be in the wrong
/// category. The rules name a frame that allocated the block (`torch/optim/`, `AccumulateGrad`, a
/// module's `forward`), right for most blocks; what the frame ran for is not always what the
/// block was (a workspace allocated under `AccumulateGrad`, a cache under `forward`).
pub const STACK_RULE_DOUBT: f64 = 0.25;

impl EvidenceBytes {
    /// The bytes that may be in the wrong category: those not known at all, those from before
    /// the recording, and a share (`STACK_RULE_DOUBT`) of those a stack-frame rule guessed.
    pub fn guessed(&self) -> f64 {
        STACK_RULE_DOUBT * self.stack_rule + self.before_recording + self.unknown
    }

    /// All of them.
    pub fn total(&self) -> f64 {
        self.tagged + self.phase + self.size_match + self.stack_rule + self.before_recording + self.unknown
    }
}

impl Parts {
    /// What scales with the batch (and, at least, with the sequence), times `factor`:
    /// activations, temporaries and inputs; model state stays.
    pub fn scale_with_batch(&mut self, factor: f64) {
        self.activation *= factor;
        self.fp32_activation *= factor;
        self.temporary *= factor;
        self.input *= factor;
        self.boundary *= factor;
        self.blocks.values_mut().for_each(|b| *b *= factor);
    }

    /// Model state (parameters, their gradients and optimizer state) as if only `kept` of the
    /// parameters were held: gradients and optimizer state mirror the parameters.
    pub fn keep_model_state(&mut self, kept: f64) {
        if self.parameter <= 0.0 {
            return;
        }
        let share = (kept / self.parameter).clamp(0.0, 1.0);
        self.parameter *= share;
        self.gradient *= share;
        self.optimizer_state *= share;
    }

    /// Everything alive.
    pub fn total(&self) -> f64 {
        self.parameter
            + self.gradient
            + self.optimizer_state
            + self.activation
            + self.temporary
            + self.input
            + self.other
    }

    /// Whether the instant is in the optimizer step.
    pub fn in_step(&self) -> bool {
        self.phase == Some(Phase::OptimizerStep)
    }
}

/// The operator (or Python function) that allocated a block: the innermost two frames' names.
fn allocated_by<'t>(trace: &'t Trace, stack: StackId) -> impl Iterator<Item = &'t str> + 't {
    let interner = &trace.interner;
    interner.frames_of(stack).iter().filter_map(|&f| interner.frame_of(f)).take(2).map(|frame| {
        let function = interner.resolve(frame.function);
        function.strip_prefix("aten::").unwrap_or(function)
    })
}

/// Whether the block is the loss's (its log-softmax, its reduction): what code computes in 32
/// bits whatever the model's dtype (`logits.float()` before the loss).
pub(super) fn is_loss(trace: &Trace, stack: StackId) -> bool {
    allocated_by(trace, stack).any(|name| {
        matches!(name, "_log_softmax" | "log_softmax" | "nll_loss_forward" | "nll_loss" | "cross_entropy" | "mse_loss")
    })
}

/// Whether the 32-bit operator that allocated the block keeps its input's size (a softmax, a
/// log-softmax, a norm): on a 16-bit input it needs a 32-bit copy of it, as large as the block,
/// alive while it runs (autocast's cast of an fp32 operator's inputs, or the code's `.float()`).
pub(super) fn upcasts_its_input(trace: &Trace, device: DeviceId, stack: StackId) -> bool {
    allocated_by(trace, stack).any(|name| {
        matches!(name, "_log_softmax" | "log_softmax")
            || (!device.is_host() && matches!(name, "softmax" | "_softmax" | "layer_norm" | "native_layer_norm"))
    })
}

/// Whether autocast leaves what this block holds in 32 bits: sums that mix the 32-bit residual
/// stream in, norms, the loss's (log-)softmax and reductions, embedding lookups, softmax on a GPU
/// (by the operator the CPU profiler names, or the Python function of a recorded stack).
pub(super) fn stays_fp32(trace: &Trace, device: DeviceId, stack: StackId) -> bool {
    allocated_by(trace, stack).any(|name| {
        matches!(
            name,
            "add"
                | "add_"
                | "_log_softmax"
                | "log_softmax"
                | "nll_loss_forward"
                | "nll_loss"
                | "cross_entropy"
                | "embedding"
                | "index_select"
                | "mse_loss"
                | "sum"
                | "mean"
                | "layer_norm"
                | "native_layer_norm"
        ) || (!device.is_host() && matches!(name, "softmax" | "_softmax"))
    })
}

/// `blocks.3` for `blocks.3.attn.q_proj`: the shortest prefix that ends in a number.
pub(super) fn repeated_block(name: &str) -> Option<&str> {
    let mut end = 0;
    for part in name.split('.') {
        let next = end + part.len();
        if !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()) && end > 0 {
            return name.get(..next);
        }
        end = next + 1;
    }
    None
}

pub fn phase_at(spans: &[(i64, i64, AnnotationKind)], time_ns: i64) -> Option<Phase> {
    if spans.is_empty() {
        return None;
    }
    let i = spans.partition_point(|s| s.0 <= time_ns);
    let phase = i.checked_sub(1).and_then(|i| spans.get(i)).filter(|s| s.1 >= time_ns).map(|s| match s.2 {
        AnnotationKind::Forward => Phase::Forward,
        AnnotationKind::Backward => Phase::Backward,
        _ => Phase::OptimizerStep,
    });
    Some(phase.unwrap_or(Phase::Unknown))
}

/// Where the repeated blocks run in each forward, to tell what comes after them.
#[derive(Clone, Debug, Default)]
pub struct Sides {
    /// Each forward's span and when its last repeated block ended, by the forward's start.
    forwards: Vec<(i64, i64, i64)>,
    /// Modules outside the blocks that first ran after the blocks ended.
    after_modules: std::collections::BTreeSet<String>,
    /// The repeated blocks by the stacks, where no module spans say them.
    pub stacks: Option<super::stack_blocks::StackBlocks>,
}

impl Sides {
    /// From the module and forward spans (and the stacks of `device`'s allocations, without
    /// module spans).
    pub fn of(trace: &Trace, device: DeviceId) -> Self {
        let interner = &trace.interner;
        let mut forwards: Vec<(i64, i64, i64)> = trace
            .annotations
            .iter()
            .filter(|a| a.kind == AnnotationKind::Forward)
            .map(|a| (a.start_ns, a.end_ns, i64::MIN))
            .collect();
        forwards.sort_unstable();
        let modules = trace.annotations.iter().filter(|a| a.kind == AnnotationKind::Module);
        let mut first_run: BTreeMap<&str, i64> = BTreeMap::new();
        for a in modules {
            let name = interner.resolve(a.name);
            let at = first_run.entry(name).or_insert(a.start_ns);
            *at = (*at).min(a.start_ns);
            if repeated_block(name).is_some() {
                let i = forwards.partition_point(|f| f.0 <= a.start_ns);
                if let Some(f) = i.checked_sub(1).and_then(|i| forwards.get_mut(i)).filter(|f| a.start_ns <= f.1) {
                    f.2 = f.2.max(a.end_ns);
                }
            }
        }
        let first_forward = forwards.iter().find(|f| f.2 != i64::MIN).copied();
        let after_modules = first_forward.map_or_else(Default::default, |(start, end, blocks_end)| {
            first_run
                .iter()
                .filter(|(name, at)| {
                    repeated_block(name).is_none() && **at >= blocks_end && **at >= start && **at <= end
                })
                .map(|(name, _)| (*name).to_owned())
                .collect()
        });
        Self { forwards, after_modules, stacks: super::stack_blocks::StackBlocks::of(trace, device) }
    }

    /// Whether a parameter of this name belongs to a module run after the blocks.
    fn parameter_after(&self, name: &str) -> bool {
        name.rsplit_once('.').is_some_and(|(module, _)| self.after_modules.contains(module))
    }

    /// Whether an activation allocated then came after its forward's last block.
    fn activation_after(&self, alloc_ns: i64) -> bool {
        let i = self.forwards.partition_point(|f| f.0 <= alloc_ns);
        i.checked_sub(1)
            .and_then(|i| self.forwards.get(i))
            .is_some_and(|&(_, end, blocks_end)| blocks_end != i64::MIN && alloc_ns > blocks_end && alloc_ns <= end)
    }
}

/// The memory of `device` right after `event` (at `time_ns`), taken apart. One attributor serves
/// every instant of a trace.
pub fn parts_at(
    trace: &Trace,
    device: DeviceId,
    attributor: &mut Attributor<'_>,
    sides: &Sides,
    (event, time_ns): (Option<usize>, i64),
    phase: Option<Phase>,
) -> Parts {
    let mut parts = Parts { phase, ..Parts::default() };
    let mut sizes: BTreeMap<u64, u32> = BTreeMap::new();
    let mut block_parameters: BTreeMap<String, f64> = BTreeMap::new();
    for block in peak::live_at(trace, device, event) {
        let alloc_ns = block.alloc_event.and_then(|i| trace.events.get(i)).map_or(i64::MIN, |e| e.time_ns);
        let bytes = block.size_bytes as f64;
        let attribution = attributor.block(block.address, alloc_ns, time_ns, block.stack);
        let Attribution { category, evidence } = attribution;
        let known = &mut parts.evidence;
        *match evidence {
            Evidence::Tag(_) => &mut known.tagged,
            Evidence::Phase { .. } if category == Category::Unknown => &mut known.unknown,
            Evidence::Phase { .. } => &mut known.phase,
            Evidence::SizeMatches { .. } | Evidence::StateSizeMatches { .. } => &mut known.size_match,
            Evidence::Frame { .. } => &mut known.stack_rule,
            Evidence::BeforeRecording { .. } => &mut known.before_recording,
            Evidence::Nothing | Evidence::Unreported => &mut known.unknown,
        } += bytes;
        match category {
            Category::Parameter => {
                parts.parameter += bytes;
                if let Evidence::Tag(name) = evidence {
                    let name = trace.interner.resolve(name);
                    let matmul_weight = name.ends_with(".weight")
                        && !["emb", "norm", "ln"].iter().any(|n| name.rsplit('.').nth(1).unwrap_or("").contains(n));
                    if matmul_weight {
                        parts.matmul_parameter += bytes;
                    }
                    if let Some(block) = repeated_block(name) {
                        *block_parameters.entry(block.to_owned()).or_default() += bytes;
                    } else if sides.parameter_after(name) {
                        parts.after_parameter += bytes;
                    }
                }
            }
            Category::Gradient => parts.gradient += bytes,
            Category::OptimizerState => parts.optimizer_state += bytes,
            Category::Activation => {
                parts.activation += bytes;
                if stays_fp32(trace, device, block.stack) {
                    parts.fp32_activation += bytes;
                }
                let by_stack = || sides.stacks.as_ref()?.block_of(block.alloc_event?).map(|(_, name)| name);
                if let Evidence::Phase { module: Some(module), .. } = evidence
                    && let Some(repeated) = repeated_block(trace.interner.resolve(module))
                {
                    *parts.blocks.entry(repeated.to_owned()).or_default() += bytes;
                    *sizes.entry(block.size_bytes).or_default() += 1;
                } else if let Some(repeated) = by_stack() {
                    *parts.blocks.entry(repeated).or_default() += bytes;
                    *sizes.entry(block.size_bytes).or_default() += 1;
                } else if sides.activation_after(alloc_ns) {
                    parts.after_activation += bytes;
                }
            }
            Category::Temporary => parts.temporary += bytes,
            // A dataset held whole stays whatever the batch: it is not scaled with it.
            Category::Input if attribution.is_resident_input(trace) => parts.other += bytes,
            Category::Input => parts.input += bytes,
            _ => parts.other += bytes,
        }
    }
    parts.boundary = sizes.iter().max_by_key(|(size, count)| (**count, **size)).map_or(0.0, |(size, _)| *size as f64);
    parts.block_parameter = block_parameters.values().copied().fold(0.0, f64::max);
    parts.in_block_parameter = block_parameters.values().sum();
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_blocks_are_the_shortest_numbered_prefix() {
        assert_eq!(repeated_block("blocks.3.attn.q_proj"), Some("blocks.3"));
        assert_eq!(repeated_block("model.layers.12.mlp"), Some("model.layers.12"));
        assert_eq!(repeated_block("lm_head"), None);
        assert_eq!(repeated_block("0.weight"), None);
        assert_eq!(repeated_block("h.0"), Some("h.0"));
    }
}
