//! Why each projection is what it is, in words: the parts of the trace it changes at the peak,
//! and the peak before and after.

use super::advice::named_list;
use crate::advisor::{Advice, Projection, Reason, Remedy};
use crate::query::units::bytes;

/// Why a projection is what it is, from the trace's numbers: the parts it changes at the peak,
/// and the peak before and after.
pub fn reason(p: &Projection, advice: &Advice) -> String {
    let before = bytes(advice.baseline.peak_allocated_bytes);
    let after = bytes(p.projected_peak_allocated_bytes);
    let pct = |share: f64| 100.0 * share;
    match &p.reason {
        Reason::Precision { activation_bytes, share_of_peak, fp32_activation_bytes, matmul_parameter_bytes } => {
            format!(
                "activations are {:.0}% of the peak ({}); all but {} (residual sums, the loss, embeddings) would be \
                 16-bit, and autocast makes 16-bit copies of {} of weights (kept for backward when training): \
                 {before} -> {after}",
                pct(*share_of_peak),
                bytes(*activation_bytes),
                bytes(*fp32_activation_bytes),
                bytes(*matmul_parameter_bytes)
            )
        }
        Reason::Weights { parameter_bytes, fp32_share, activation_bytes, autocast } => format!(
            "parameters are {} at the peak, {:.0}% of them in 32 bits, which bf16 halves{}: {before} -> {after}",
            bytes(*parameter_bytes),
            pct(*fp32_share),
            if *autocast {
                String::from("; the activations are 16-bit already under autocast")
            } else {
                format!(
                    ", and the activations and temporaries ({}) the model computes in bf16",
                    bytes(*activation_bytes)
                )
            }
        ),
        Reason::Checkpointing {
            activation_bytes,
            share_of_peak,
            in_blocks_bytes,
            blocks,
            boundary_bytes,
            largest_block_bytes,
            simulated: false,
        } => format!(
            "activations are {:.0}% of the peak ({}), {} of them in {} repeated blocks; checkpointing keeps each \
             block's input ({} each) and one block's activations ({}) live: {before} -> {after}",
            pct(*share_of_peak),
            bytes(*activation_bytes),
            bytes(*in_blocks_bytes),
            blocks,
            bytes(*boundary_bytes),
            bytes(*largest_block_bytes)
        ),
        Reason::Checkpointing { activation_bytes, share_of_peak, in_blocks_bytes, blocks, simulated: true, .. } => {
            format!(
                "activations are {:.0}% of the peak ({}), {} of them in {} repeated blocks; replayed with each block \
                 keeping only its output in forward and its activations allocated again when backward reaches it: \
                 {before} -> {after}",
                pct(*share_of_peak),
                bytes(*activation_bytes),
                bytes(*in_blocks_bytes),
                blocks
            )
        }
        Reason::Batch { scaling_bytes, accumulated_gradient_bytes: 0 } => format!(
            "what scales with the batch (activations, temporaries, inputs) is {} at the peak; half of it goes: \
             {before} -> {after}",
            bytes(*scaling_bytes)
        ),
        Reason::Batch { scaling_bytes, accumulated_gradient_bytes } => format!(
            "what scales with the batch (activations, temporaries, inputs) is {} at the peak; half of it goes, and \
             the first micro-batch's gradients ({}) stay alive through the second: {before} -> {after}",
            bytes(*scaling_bytes),
            bytes(*accumulated_gradient_bytes)
        ),
        Reason::Sequence { scaling_bytes } => format!(
            "what scales with the sequence (activations, temporaries, inputs) is {} at the peak; at least half of it \
             goes (attention's scores, quadratic in the length, lose three quarters, so the run may peak lower): \
             {before} -> {after}",
            bytes(*scaling_bytes)
        ),
        Reason::OptimizerState { optimizer_state_bytes, share_of_peak } => format!(
            "optimizer state is {:.0}% of the peak ({}): {before} -> {after} (the highest point may move to another \
             phase)",
            pct(*share_of_peak),
            bytes(*optimizer_state_bytes)
        ),
        Reason::Sharding { parameter_bytes, gradient_bytes, optimizer_state_bytes, gpus } => format!(
            "parameters {}, gradients {}, optimizer state {} at the peak, sharded over {gpus} GPUs: {before} -> \
             {after}",
            bytes(*parameter_bytes),
            bytes(*gradient_bytes),
            bytes(*optimizer_state_bytes)
        ),
        Reason::Parallel {
            in_block_parameter_bytes,
            parameter_bytes,
            in_block_activation_bytes,
            activation_bytes,
            gpus,
        } => {
            let what = match p.remedies.first() {
                Some(Remedy::PipelineParallel) => {
                    "on the busiest stage (the first holds as many micro-batches in flight as there are stages, \
                     and what runs before the blocks; the last one micro-batch, and what runs after them), the \
                     blocks' parameters and their state split, the gradients accumulated over the micro-batches"
                }
                _ => "the blocks' parameters and their state split, and of their activations what is not block-width",
            };
            format!(
                "the repeated blocks hold {} of {} of parameters and {} of {} of activations at the peak; over {gpus} \
                 GPUs, {what}: {before} -> {after}",
                bytes(*in_block_parameter_bytes),
                bytes(*parameter_bytes),
                bytes(*in_block_activation_bytes),
                bytes(*activation_bytes)
            )
        }
        Reason::Reserved { unused_bytes, rounding_bytes, reserved_before_bytes, reserved_after_bytes } => format!(
            "{} of the reserved peak is free space inside segments; expandable segments reserve what is allocated \
             plus its rounding ({}) and part of a page: {} -> {} reserved",
            bytes(*unused_bytes),
            bytes(*rounding_bytes),
            bytes(*reserved_before_bytes),
            bytes(*reserved_after_bytes)
        ),
        Reason::ExpandableSimulated(m) => format!(
            "{} of the reserved peak is free space inside segments; replayed through the caching allocator's model \
             (under the run's own settings it reserves {}, the trace recorded {}, {:.1}% apart), with expandable \
             segments mapping 2 MiB and 20 MiB pages as blocks need them it reserves {}: {} -> {} reserved",
            bytes(m.recorded_bytes.saturating_sub(p.projected_peak_allocated_bytes)),
            bytes(m.simulated_baseline_bytes),
            bytes(m.recorded_bytes),
            100.0 * m.model_error(),
            bytes(m.simulated_bytes),
            bytes(m.recorded_bytes),
            bytes(m.projected_bytes())
        ),
        Reason::KeptGradients { .. }
        | Reason::Simulated(_)
        | Reason::Graph { .. }
        | Reason::DataParallel { .. }
        | Reason::Offload { .. }
        | Reason::Quantised { .. }
        | Reason::Kept { .. }
        | Reason::Padding { .. }
        | Reason::StepTemporaries { .. }
        | Reason::Tied { .. }
        | Reason::Adapters { .. } => step_and_model_reason(&p.reason, &before, &after),
        Reason::Together(set) => format!("{} together: {before} -> {after}", named_list(set)),
    }
}

/// The reasons of the remedies that change a part of the step or of the model, and of
/// `max_split_size_mb`.
fn step_and_model_reason(reason: &Reason, before: &str, after: &str) -> String {
    match reason {
        Reason::KeptGradients { kept_gradient_bytes, gradient_bytes } => format!(
            "{} of gradients are zeroed after each step and kept through the next forward (gradients at the peak: \
             {}); freed instead, each comes back when backward reaches its parameter: {before} -> {after}",
            bytes(*kept_gradient_bytes),
            bytes(*gradient_bytes)
        ),
        Reason::StepTemporaries { temporary_bytes, fused: true, .. } => format!(
            "the optimizer step holds up to {} of temporaries at once; the fused step holds none the size of a \
             parameter: {before} -> {after}",
            bytes(*temporary_bytes)
        ),
        Reason::StepTemporaries { temporary_bytes, largest_gradient_bytes, fused: false } => format!(
            "the optimizer step holds up to {} of temporaries at once (the multi-tensor step computes over every \
             parameter together); one parameter at a time it holds two of the largest's size ({} each): {before} \
             -> {after}",
            bytes(*temporary_bytes),
            bytes(*largest_gradient_bytes)
        ),
        Reason::Tied { embedding, head, head_bytes } => format!(
            "{head} ({}) has the shape of {embedding}, transposed: shared, it goes with its gradient and optimizer \
             state: {before} -> {after}",
            bytes(*head_bytes)
        ),
        Reason::Adapters {
            gradient_bytes,
            optimizer_state_bytes,
            layers,
            rank,
            adapter_bytes,
            weight_bytes,
            nf4_weight_bytes,
        } => {
            format!(
                "with the weights frozen, the gradients ({} at the peak) and optimizer state ({}) go; rank-{rank} \
                 adapters on {layers} linear layers add {} of parameters and as much of gradients, with their state{}: \
                 {before} -> {after}",
                bytes(*gradient_bytes),
                bytes(*optimizer_state_bytes),
                bytes(*adapter_bytes),
                nf4_weight_bytes.map_or(String::new(), |nf4| format!(
                    "; those layers' weights ({}) take {} in NF4, each dequantised whole as it is used",
                    bytes(*weight_bytes),
                    bytes(nf4)
                ))
            )
        }
        Reason::DataParallel { scaling_bytes, bucket_bytes, gpus } => format!(
            "what scales with the batch (activations, temporaries, inputs) is {} at the peak; each of {gpus} GPUs \
             holds 1/{gpus} of it, the whole model, and DDP's gradient buckets ({}): {before} -> {after}",
            bytes(*scaling_bytes),
            bytes(*bucket_bytes)
        ),
        Reason::Padding { scaling_bytes, padded_length, longest, batches } => format!(
            "{} at the peak scales with the tokens in a batch; of {batches} batches, the fullest's longest sequence \
             is {longest} of its {padded_length} tokens ({:.0}%), the rest is padding: {before} -> {after}",
            bytes(*scaling_bytes),
            100.0 * *longest as f64 / (*padded_length).max(1) as f64
        ),
        Reason::Kept { kept_bytes_per_iteration } => format!(
            "{} more is alive at each iteration's start, kept from the one before (see growth); freed as the next \
             iteration begins: {before} -> {after}",
            bytes(*kept_bytes_per_iteration)
        ),
        Reason::Quantised { linear_weight_bytes, quantised_bytes, bits } => format!(
            "the linear layers' weights take {}; in {}, {}: {before} -> {after}",
            bytes(*linear_weight_bytes),
            if *bits == 8 {
                "int8, with a scale per output"
            } else {
                "4 bits, with a scale and zero point per 128 inputs"
            },
            bytes(*quantised_bytes)
        ),
        Reason::Offload { optimizer_state_bytes, gradient_bytes } => format!(
            "the optimizer's state ({} at the peak) lives on the host, and the step with it; the gradients ({} \
             at the peak) go there as the step begins: {before} -> {after}",
            bytes(*optimizer_state_bytes),
            bytes(*gradient_bytes)
        ),
        Reason::Graph { activation_bytes } => format!(
            "forward records autograd's graph though nothing goes backward: it keeps {} of activations at the \
             peak for a backward that never runs; without it each module's tensors go as it returns: {before} -> \
             {after}",
            bytes(*activation_bytes)
        ),
        Reason::Simulated(m) => format!(
            "replayed through the caching allocator's model: under the run's own settings it reserves {} at the peak \
             (the trace recorded {}, {:.1}% apart); with max_split_size_mb:{} it reserves {}: {} -> {} reserved",
            bytes(m.simulated_baseline_bytes),
            bytes(m.recorded_bytes),
            100.0 * m.model_error(),
            m.setting_bytes >> 20,
            bytes(m.simulated_bytes),
            bytes(m.recorded_bytes),
            bytes(m.projected_bytes())
        ),
        _ => String::new(),
    }
}
