#![allow(clippy::unwrap_used, clippy::expect_used)]

use vramscope_trace_format::{Annotation, Event, Frame};

use super::*;

const MIB: u64 = 1 << 20;

/// `iterations` iterations of 1 s: each allocates 10 MiB of activations freed within it, and
/// keeps `kept` bytes (at its own site) that are never freed; 100 MiB of weights throughout.
fn trace(iterations: i64, kept: u64, spans: bool) -> Trace {
    let mut t = Trace::default();
    let site = |t: &mut Trace, name: &str, line: u32| {
        let function = t.interner.string(name);
        let file = t.interner.string("train.py");
        let frame = t.interner.frame(Frame { function, file, line });
        t.interner.stack(&[frame])
    };
    let weights = site(&mut t, "init", 1);
    let input = site(&mut t, "load_batch", 5);
    let act = site(&mut t, "forward", 9);
    let leak = site(&mut t, "log_outputs", 12);
    let alloc = |at: i64, address: u64, size: u64, stack: StackId| {
        let mut e = Event::new(EventKind::Alloc, at, 0, address, size);
        e.stack = stack;
        e
    };
    let free = |at: i64, address: u64, size: u64| Event::new(EventKind::FreeCompleted, at, 0, address, size);
    t.events.push(alloc(0, 0x1, 100 * MIB, weights));
    for i in 0..iterations {
        let start = 1_000_000_000 + i * 1_000_000_000;
        let base = 0x1000_0000 * (i as u64 + 1);
        t.events.push(alloc(start + 1, base, MIB, input));
        t.events.push(alloc(start + 100, base + 0x100, 10 * MIB, act));
        if kept > 0 {
            t.events.push(alloc(start + 200, base + 0x200, kept, leak));
        }
        t.events.push(free(start + 300, base + 0x100, 10 * MIB));
        t.events.push(free(start + 400, base, MIB));
        if spans {
            t.annotations.push(Annotation {
                kind: AnnotationKind::Iteration,
                device: None,
                process: vramscope_trace_format::ProcessId(0),
                start_ns: start,
                end_ns: start + 999_999_999,
                name: vramscope_trace_format::StringId(0),
                stack: StackId(0),
            });
        }
    }
    t
}

#[test]
fn memory_kept_every_iteration_is_found_with_its_site_and_rate() {
    let mut t = trace(6, 4 * MIB, true);
    t.metadata.devices.push(vramscope_trace_format::DeviceInfo {
        device: DeviceId(0),
        total_memory_bytes: Some(1 << 30),
        ..Default::default()
    });
    let g = growth(&t, DeviceId(0)).expect("six iterations");
    assert_eq!(g.iterations, Iterations::Spans);
    assert_eq!(g.count, 6);
    assert!(g.grows);
    assert_eq!(g.bytes_per_iteration, 4 * MIB);
    // Iteration starts: weights, then 4 MiB more each (the start of iteration 0 is before its input).
    assert_eq!(g.boundary_bytes[..3], [100 * MIB, 104 * MIB, 108 * MIB]);
    assert_eq!(g.sites.len(), 1, "{:?}", g.sites);
    assert_eq!(g.sites[0].site, "log_outputs  train.py:12");
    assert_eq!(g.sites[0].bytes_per_iteration, 4 * MIB);
    assert!((g.sites[0].blocks_per_iteration - 1.0).abs() < 1e-9);
    // Peak: 100 + 6*4 + 10 + 1 = 135 MiB; 1 GiB - 135 MiB = 889 MiB, 4 MiB an iteration.
    let reach = g.reach.expect("device size known");
    assert_eq!(reach.iterations, 889_u64.div_ceil(4));
    assert_eq!(reach.after_ns, 223 * 1_000_000_000);
}

/// A stretch the recording did not see (iteration 3, its kept block missing): the
/// iteration is left out, so the rate and the site are those of the whole iterations, not
/// bent by the bytes that were never seen.
#[test]
fn iterations_with_an_unrecorded_stretch_are_left_out_of_the_rate() {
    let mut t = trace(8, 4 * MIB, true);
    let (from, to) = (4_000_000_000, 5_000_000_000);
    t.events.retain(|e| !(e.time_ns >= from && e.time_ns < to));
    let biased = growth(&t, DeviceId(0)).expect("eight iterations");
    assert!(biased.bytes_per_iteration < 4 * MIB, "unaware of the stretch: {}", biased.bytes_per_iteration);
    t.metadata.unrecorded.push(vramscope_trace_format::Unrecorded {
        process: 0,
        device: DeviceId(0),
        begin_ns: from + 50,
        end_ns: from + 500,
        why: "own_profiler".to_owned(),
        detail: String::new(),
    });
    let g = growth(&t, DeviceId(0)).expect("eight iterations");
    assert!(g.grows);
    assert_eq!(g.unrecorded_iterations, 1);
    assert_eq!(g.bytes_per_iteration, 4 * MIB);
    assert_eq!(g.sites.len(), 1, "{:?}", g.sites);
    assert_eq!(g.sites[0].bytes_per_iteration, 4 * MIB);
    assert!((g.sites[0].blocks_per_iteration - 1.0).abs() < 1e-9);
    // A stretch on another device changes nothing here.
    t.metadata.unrecorded[0].device = DeviceId::HOST;
    assert_eq!(growth(&t, DeviceId(0)).expect("eight").unrecorded_iterations, 0);
}

#[test]
fn memory_freed_within_each_iteration_does_not_grow() {
    let g = growth(&trace(6, 0, true), DeviceId(0)).expect("six iterations");
    assert!(!g.grows);
    assert!(g.sites.is_empty());
    assert_eq!(g.bytes_per_iteration, 0);
    // Two iterations are too few to tell.
    assert!(growth(&trace(2, 4 * MIB, true), DeviceId(0)).is_none());
}

#[test]
fn without_spans_the_iterations_come_from_the_site_that_repeats_evenly() {
    let g = growth(&trace(6, 4 * MIB, false), DeviceId(0)).expect("a pattern");
    assert_eq!(g.iterations, Iterations::Pattern { site: "load_batch  train.py:5".to_owned() });
    assert!(g.grows);
    assert_eq!(g.bytes_per_iteration, 4 * MIB);
    assert_eq!(g.sites[0].site, "log_outputs  train.py:12");
}

#[test]
fn growth_only_in_the_first_iteration_is_warm_up() {
    let mut t = trace(6, 0, true);
    // Optimizer state made at the first step, kept.
    let mut e = Event::new(EventKind::Alloc, 1_500_000_000, 0, 0x9, 50 * MIB);
    e.stack = StackId(0);
    t.events.push(e);
    t.events.sort_by_key(|e| e.time_ns);
    let g = growth(&t, DeviceId(0)).expect("six iterations");
    assert!(!g.grows, "{:?}", g.boundary_bytes);
}
