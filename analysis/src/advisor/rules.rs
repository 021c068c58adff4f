//! The rules of the remedies the event stream cannot replay, or that pairs fall back to: each
//! changes the memory of one instant taken apart ([`Parts`]) as the remedy would.

use super::parts::Parts;

/// Autocast: what is not kept in 32 bits halves, and 16-bit copies of the weights are kept.
pub(super) fn amp(p: &mut Parts) {
    if p.in_step() {
        return;
    }
    // What is not kept in 32 bits halves; autocast's 16-bit copies of the weights are kept for
    // backward. Temporaries (mostly the loss's and the gradients' own) are left as they are.
    let after = (p.activation - p.fp32_activation) / 2.0 + p.fp32_activation + p.matmul_parameter / 2.0;
    if p.activation > 0.0 {
        let scale = after / p.activation;
        p.blocks.values_mut().for_each(|b| *b *= scale);
        p.boundary *= scale;
    }
    p.activation = after;
}

/// The repeated blocks' parameters, and so their gradients and optimizer state, split `n` ways;
/// the rest kept whole.
fn split_blocks_model_state(p: &mut Parts, n: f64) {
    let split = p.in_block_parameter.min(p.parameter);
    p.keep_model_state(p.parameter - split * (1.0 - 1.0 / n));
}

/// The block-width tensors of a block's activations that tensor parallelism leaves whole.
const REPLICATED_PER_BLOCK: f64 = 4.0;

/// Tensor parallelism over `n`: the blocks' parameters (and so their gradients and optimizer
/// state) split n ways; of each block's activations, what is not block-width (heads, the MLP's
/// hidden width) splits too.
pub(super) fn tensor_parallel(p: &mut Parts, n: f64) {
    split_blocks_model_state(p, n);
    let boundary = p.boundary;
    let mut taken = 0.0;
    for block in p.blocks.values_mut() {
        let whole = (REPLICATED_PER_BLOCK * boundary).min(*block);
        let after = whole + (*block - whole) / n;
        taken += *block - after;
        *block = after;
    }
    let share = if p.activation > 0.0 { (p.activation - taken) / p.activation } else { 1.0 };
    p.activation -= taken;
    p.fp32_activation *= share;
}

/// Micro-batches per stage under the 1F1B schedule the pipeline remedy assumes.
pub const PIPELINE_MICRO_BATCHES_PER_STAGE: f64 = 2.0;

/// Pipeline parallelism over `k` stages, 1F1B over `m = 2k` micro-batches, on its busiest
/// stage: the first or the last. Each holds its share of the blocks' parameters and state (k
/// ways), and of what is outside the blocks what runs on it: the last stage what runs after the
/// blocks in forward (a final norm, the head, the loss), the first stage the rest. Under 1F1B
/// the first stage holds the activations of k micro-batches in flight (k/m of the batch), the
/// last stage one (1/m); each holds one micro-batch's temporaries and all the inputs. (The
/// gradients, accumulated over the micro-batches from the first backward on, are the caller's.)
pub(super) fn pipeline_parallel(p: &mut Parts, k: f64) {
    let m = PIPELINE_MICRO_BATCHES_PER_STAGE * k;
    let in_blocks: f64 = p.blocks.values().sum();
    let outside = (p.activation - in_blocks).max(0.0);
    let after = p.after_activation.min(outside);
    let split = p.in_block_parameter.min(p.parameter);
    let after_parameter = p.after_parameter.min(p.parameter - split);
    let stage = |kept_parameter: f64, outside_activation: f64, in_flight: f64| {
        let mut q = p.clone();
        q.keep_model_state(kept_parameter);
        if !q.in_step() {
            let before = q.activation;
            q.blocks.values_mut().for_each(|b| *b *= in_flight / k);
            q.activation = outside_activation * in_flight + in_blocks * in_flight / k;
            if before > 0.0 {
                q.fp32_activation *= q.activation / before;
            }
            q.boundary *= in_flight;
            q.temporary /= m;
        }
        q
    };
    let first = stage(p.parameter - split * (1.0 - 1.0 / k) - after_parameter, outside - after, k / m);
    let last = stage(split / k + after_parameter, after, 1.0 / m);
    *p = if last.total() > first.total() { last } else { first };
}

pub(super) fn checkpoint(p: &mut Parts) {
    if p.in_step() || p.blocks.len() < 2 {
        return;
    }
    let in_blocks: f64 = p.blocks.values().sum();
    let largest = p.blocks.values().copied().fold(0.0, f64::max);
    // Each block keeps only its input; one block's activations are live again while it is
    // recomputed in backward.
    let kept = p.blocks.len() as f64 * p.boundary + largest;
    p.activation = p.activation - in_blocks + kept.min(in_blocks);
    let n = p.blocks.len() as f64;
    p.blocks.values_mut().for_each(|b| *b = largest / n);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpointing_keeps_boundaries_and_one_block() {
        let mut p = Parts { activation: 100.0, boundary: 5.0, ..Parts::default() };
        p.blocks.insert("blocks.0".into(), 40.0);
        p.blocks.insert("blocks.1".into(), 40.0);
        checkpoint(&mut p);
        // 20 outside the blocks, 2 boundaries of 5, one block of 40.
        assert!((p.activation - 70.0).abs() < 1e-9);
    }

    /// Two blocks of 100 activation bytes each, block width 10; 40 of 100 parameters in the blocks.
    fn two_blocks() -> Parts {
        let mut p = Parts { activation: 250.0, boundary: 10.0, parameter: 100.0, gradient: 100.0, ..Parts::default() };
        p.optimizer_state = 200.0;
        p.in_block_parameter = 40.0;
        p.blocks.insert("blocks.0".into(), 100.0);
        p.blocks.insert("blocks.1".into(), 100.0);
        p
    }

    #[test]
    fn tensor_parallel_splits_the_blocks_but_their_block_width_tensors() {
        let mut p = two_blocks();
        tensor_parallel(&mut p, 2.0);
        // Model state: 60 outside the blocks + 40 / 2 = 80 of 100 kept.
        assert!((p.parameter - 80.0).abs() < 1e-9 && (p.gradient - 80.0).abs() < 1e-9);
        assert!((p.optimizer_state - 160.0).abs() < 1e-9);
        // Each block: 4 x 10 whole, 60 / 2: 70; outside the blocks 50 stays.
        assert!((p.activation - 190.0).abs() < 1e-9, "{}", p.activation);
    }

    #[test]
    fn pipeline_parallel_holds_the_micro_batches_in_flight_on_its_busiest_stage() {
        // Of the 100 parameters, 40 in the blocks and 30 after them (the head); of the 50
        // activations outside the blocks, 30 after them (the logits).
        let mut p = two_blocks();
        p.temporary = 40.0;
        p.after_parameter = 30.0;
        p.after_activation = 30.0;
        pipeline_parallel(&mut p, 2.0);
        // The first stage: 100 - 40 / 2 - 30 = 50 of the parameters, and their state; m = 4
        // micro-batches, 2 in flight (half the batch): 20 outside / 2 + blocks 200 / 2 / 2.
        assert!((p.parameter - 50.0).abs() < 1e-9 && (p.optimizer_state - 100.0).abs() < 1e-9);
        assert!((p.activation - 60.0).abs() < 1e-9, "{}", p.activation);
        assert!((p.temporary - 10.0).abs() < 1e-9);
        // All of the outside on the last stage: it holds more (20 + 60 of the parameters), with
        // one micro-batch in flight: 50 / 4 + 200 / 4 / 2.
        let mut p = two_blocks();
        p.temporary = 40.0;
        p.after_parameter = 60.0;
        p.after_activation = 50.0;
        pipeline_parallel(&mut p, 2.0);
        assert!((p.parameter - 80.0).abs() < 1e-9);
        assert!((p.activation - 37.5).abs() < 1e-9, "{}", p.activation);
    }
}
