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
    let mut free = |at: i64, address: u64| trace.events.push(Event::new(EventKind::FreeCompleted, at, 0, address, 0));
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
