//! Phases of hand-built traces, with high points computed by hand.
use vramscope_trace_format::{Event, EventKind, StackId};

use super::*;
use crate::testing::{span, stack};

/// Allocates `size` at `address` at time `t` (with `stack`), or frees it when `size` is 0.
fn event(trace: &mut Trace, t: i64, address: u64, size: u64, stack: StackId) {
    let kind = if size == 0 { EventKind::FreeCompleted } else { EventKind::Alloc };
    let size = if size == 0 {
        trace.events.iter().rev().find(|e| e.address == address).map_or(0, |e| e.size_bytes)
    } else {
        size
    };
    let mut e = Event::new(kind, t, DeviceId(0), address, size);
    e.set_requested_bytes(size);
    e.stack = stack;
    trace.events.push(e);
}

fn summary(p: &Phases) -> Vec<(u32, Option<&'static str>, u64)> {
    p.phases.iter().chain(&p.iterations).map(|h| (h.iteration, h.kind.map(PhaseKind::name), h.high_bytes)).collect()
}

/// Two steps with recorded spans: forward allocates 100 + 50 (the loss after forward's span
/// still counts as forward), backward frees them and allocates 30, the step allocates 200
/// once (state) and 10 each time.
fn recorded() -> Trace {
    let mut trace = Trace::default();
    let none = StackId(0);
    for (i, base) in [0i64, 1000].into_iter().enumerate() {
        span(&mut trace, AnnotationKind::Forward, "forward", base, base + 100);
        span(&mut trace, AnnotationKind::Backward, "backward", base + 200, base + 300);
        span(&mut trace, AnnotationKind::OptimizerStep, "AdamW", base + 400, base + 500);
        event(&mut trace, base + 10, 0x1000, 100, none);
        event(&mut trace, base + 150, 0x2000, 50, none);
        event(&mut trace, base + 210, 0x1000, 0, none);
        event(&mut trace, base + 220, 0x3000, 30, none);
        event(&mut trace, base + 230, 0x2000, 0, none);
        if i == 0 {
            event(&mut trace, base + 410, 0x4000, 200, none);
        }
        event(&mut trace, base + 420, 0x5000, 10, none);
        event(&mut trace, base + 430, 0x5000, 0, none);
        event(&mut trace, base + 440, 0x3000, 0, none);
    }
    trace.events.sort_by_key(|e| e.time_ns);
    trace
}

#[test]
fn recorded_phases_have_the_high_points_computed_by_hand() {
    let trace = recorded();
    let p = phases(&trace, DeviceId(0));
    assert_eq!(p.from, Some(PhasesFrom::Recorded));
    assert_eq!(
        summary(&p),
        [
            // Forward: 100 + 50 (the loss at 150, before backward began at 200).
            (1, Some("forward"), 150),
            // Backward opens at 150 and frees before it allocates.
            (1, Some("backward"), 150),
            // The step: 30 gradients + 200 state + 10.
            (1, Some("optimizer_step"), 240),
            (2, Some("forward"), 200 + 150),
            (2, Some("backward"), 350),
            (2, Some("optimizer_step"), 240),
            (1, None, 240),
            (2, None, 350),
        ]
    );
    assert_eq!(p.highest(PhaseKind::Forward).map(|h| h.iteration), Some(2));
    // Categories at each high point, from the attribution (no tags or stacks: by phase).
    let step = p.highest(PhaseKind::OptimizerStep).and_then(|h| h.categories.as_ref()).expect("categories");
    assert_eq!(step.values().sum::<u64>(), 240);
}

#[test]
fn micro_batches_of_one_iteration_are_one_phase_each() {
    let mut trace = Trace::default();
    let none = StackId(0);
    for (k, base) in [0i64, 300].into_iter().enumerate() {
        span(&mut trace, AnnotationKind::Forward, "forward", base, base + 100);
        span(&mut trace, AnnotationKind::Backward, "backward", base + 150, base + 250);
        event(&mut trace, base + 10, 0x1000 + k as u64, 100 * (k as u64 + 1), none);
        event(&mut trace, base + 200, 0x1000 + k as u64, 0, none);
    }
    span(&mut trace, AnnotationKind::OptimizerStep, "SGD", 700, 800);
    event(&mut trace, 710, 0x9000, 5, none);
    trace.events.sort_by_key(|e| e.time_ns);
    let p = phases(&trace, DeviceId(0));
    assert_eq!(
        summary(&p),
        [(1, Some("forward"), 200), (1, Some("backward"), 200), (1, Some("optimizer_step"), 5), (1, None, 200)]
    );
}

#[test]
fn stacks_tell_the_phases_of_a_snapshot_with_python_frames_only() {
    let mut trace = Trace::default();
    let fwd = stack(&mut trace, &[("model.py", "forward"), ("train.py", "main")]);
    let setup = stack(&mut trace, &[("train.py", "main")]);
    let optim = stack(&mut trace, &[("/venv/torch/optim/adamw.py", "_init_group"), ("train.py", "main")]);
    let autograd_thread = StackId(0);
    event(&mut trace, 1, 0x100, 1000, setup); // the model
    event(&mut trace, 2, 0x200, 40, fwd);
    event(&mut trace, 3, 0x300, 60, fwd);
    event(&mut trace, 4, 0x400, 7, autograd_thread); // backward: no Python frames
    event(&mut trace, 5, 0x200, 0, fwd);
    event(&mut trace, 6, 0x500, 300, optim);
    event(&mut trace, 7, 0x500, 0, optim);
    event(&mut trace, 8, 0x600, 20, fwd); // the next iteration
    let p = phases(&trace, DeviceId(0));
    assert_eq!(p.from, Some(PhasesFrom::Stacks));
    assert_eq!(
        summary(&p),
        [
            (1, Some("forward"), 1100),
            (1, Some("backward"), 1107),
            (1, Some("optimizer_step"), 1367),
            (2, Some("forward"), 1087),
            (1, None, 1367),
            (2, None, 1087),
        ]
    );
    // With native frames somewhere, a frameless allocation says nothing: it stays in forward.
    let native = stack(&mut trace, &[("??", "at::native::empty"), ("model.py", "forward")]);
    if let Some(e) = trace.events.get_mut(2) {
        e.stack = native;
    }
    let p = phases(&trace, DeviceId(0));
    assert_eq!(
        p.phases.iter().map(|h| h.kind.map(PhaseKind::name)).collect::<Vec<_>>(),
        [Some("forward"), Some("optimizer_step"), Some("forward")]
    );
}

#[test]
fn ranges_named_like_phases_are_phases() {
    assert_eq!(phase_of_name("Optimizer.step#AdamW.step"), Some(PhaseKind::OptimizerStep));
    assert_eq!(phase_of_name("## Forward ##"), Some(PhaseKind::Forward));
    assert_eq!(phase_of_name("loss.backward"), Some(PhaseKind::Backward));
    assert_eq!(phase_of_name("autograd::engine::evaluate_function: MmBackward0"), Some(PhaseKind::Backward));
    assert_eq!(phase_of_name("forward_attention"), None);
    let mut trace = recorded();
    // The same spans as user ranges (record_function, and PyTorch's own name for the
    // optimizer's step) give the same phases.
    let step = trace.interner.string("Optimizer.step#AdamW.step");
    for a in &mut trace.annotations {
        if a.kind == AnnotationKind::OptimizerStep {
            a.name = step;
        }
        a.kind = AnnotationKind::UserRange;
    }
    let p = phases(&trace, DeviceId(0));
    assert_eq!(p.from, Some(PhasesFrom::Annotations));
    assert_eq!(summary(&p), summary(&phases(&recorded(), DeviceId(0))));
}
