use vramscope_trace_format::Tag;

use super::*;
use crate::testing::stack;

#[test]
fn nearest_frame_decides_and_tags_win() {
    let mut trace = Trace::default();
    let adam = stack(
        &mut trace,
        &[("??", "at::empty_cuda"), ("/venv/torch/optim/adam.py", "_init_group"), ("train.py", "forward")],
    );
    let fwd = stack(&mut trace, &[("??", "at::native::forward_impl"), ("C:\\m\\model.py", "forward")]);
    let none = stack(&mut trace, &[("train.py", "main")]);
    let mut a = Attributor::new(&trace, DeviceId(0));
    assert_eq!(a.stack(adam).category, Category::OptimizerState);
    assert_eq!(a.stack(fwd).category, Category::Activation);
    assert_eq!(a.stack(none), Attribution::UNKNOWN);

    let name = trace.interner.string("layer.weight");
    trace.tags.push(Tag {
        time_ns: 15,
        device: DeviceId(0),
        process: Default::default(),
        address: 0x100,
        category: Category::Parameter,
        name,
    });
    let mut a = Attributor::new(&trace, DeviceId(0));
    // Tagged during its lifetime.
    assert_eq!(a.block(0x100, 10, 20, fwd).category, Category::Parameter);
    // A later block at the same address, after the tag: the stack decides.
    assert_eq!(a.block(0x100, 30, 40, fwd).category, Category::Activation);
    let evidence = a.block(0x100, 10, 20, fwd).evidence;
    assert!(
        matches!(evidence, Evidence::Tag(tag) if trace.interner.resolve(tag).contains("layer.weight")),
        "{evidence:?}"
    );
}

/// A snapshot whose recording began after the model was built: its parameters are blocks
/// from before, alive to the end, one of each gradient's size.
fn persistent_trace(sizes: &[u64], extra_before: usize) -> Trace {
    use vramscope_trace_format::{Block, BlockState, Event, Segment};
    let mut trace = Trace::default();
    let grad = stack(&mut trace, &[("??", "torch::autograd::AccumulateGrad::apply")]);
    let mut blocks = Vec::new();
    let mut address = 0x10_0000u64;
    for (i, &size) in sizes.iter().enumerate() {
        for _ in 0..=(if i == 0 { extra_before } else { 0 }) {
            blocks.push(Block {
                address,
                size_bytes: size,
                requested_bytes: size,
                state: BlockState::ActiveAllocated,
                stack: StackId(0),
            });
            address += size;
        }
    }
    // One block from before that matches no gradient.
    blocks.push(Block {
        address,
        size_bytes: 12_345 * 512,
        requested_bytes: 12_345 * 512,
        state: BlockState::ActiveAllocated,
        stack: StackId(0),
    });
    trace.segments.push(Segment::new(DeviceId(0), 0x10_0000, address + (12_345 * 512) - 0x10_0000, blocks));
    // Two steps of gradients: allocated in backward, freed by zero_grad(set_to_none=True).
    let mut t = 0;
    for _ in 0..2 {
        for (i, &size) in sizes.iter().enumerate() {
            let mut e = Event::new(EventKind::Alloc, t, 0, 0x1000_0000 + i as u64 * 0x100_0000, size);
            e.stack = grad;
            trace.events.push(e);
            t += 1;
        }
        for (i, &size) in sizes.iter().enumerate() {
            trace.events.push(Event::new(EventKind::FreeCompleted, t, 0, 0x1000_0000 + i as u64 * 0x100_0000, size));
            t += 1;
        }
    }
    trace
}

#[test]
fn blocks_from_before_the_recording_are_parameters_when_their_sizes_meet_the_gradients() {
    let sizes = [4096 * 512, 1024 * 512, 512, 8 * 512, 4096 * 512 * 3];
    let trace = persistent_trace(&sizes, 0);
    let mut a = Attributor::new(&trace, DeviceId(0));
    let first = a.block(0x10_0000, i64::MIN, 100, StackId(0));
    assert_eq!(first.category, Category::Parameter, "{first:?}");
    assert_eq!(first.evidence, Evidence::SizeMatches { of: Category::Gradient });
    let odd = trace.segments[0].blocks.last().map_or(0, |b| b.address);
    let other = a.block(odd, i64::MIN, 100, StackId(0));
    assert_eq!(
        other,
        Attribution { category: Category::Unknown, evidence: Evidence::BeforeRecording { persistent: true } }
    );
    // A block allocated in the window is not one of them, whatever its size.
    assert_eq!(a.block(0x10_0000, 5, 100, StackId(0)).category, Category::Unknown);

    // Two blocks of the first size from before for one gradient of it (a parameter and
    // something else): which is which cannot be told; the others still match, but the
    // first size no longer does, and four sizes in five is below nine in ten.
    let trace = persistent_trace(&sizes, 1);
    let mut a = Attributor::new(&trace, DeviceId(0));
    assert_eq!(a.block(0x10_0000, i64::MIN, 100, StackId(0)).evidence, Evidence::BeforeRecording { persistent: true });
    // Too few tensors to tell from chance.
    let trace = persistent_trace(&sizes[..3], 0);
    let mut a = Attributor::new(&trace, DeviceId(0));
    assert_eq!(a.block(0x10_0000, i64::MIN, 100, StackId(0)).category, Category::Unknown);
}
