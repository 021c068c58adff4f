//! A small trace that uses every table of the model, shared by the format tests.

#![allow(dead_code, clippy::unwrap_used)]

pub mod generate;

use vramscope_trace_format::{
    Annotation, AnnotationKind, Block, BlockState, Category, Clock, Context, CounterKind, CounterSample, CounterSeries,
    DeviceId, DeviceInfo, Event, EventKind, Frame, Metadata, Oom, ProcessId, ProcessInfo, Segment, SegmentPool,
    SourceFormat, StackId, Tag, Trace, event_flags,
};

/// Builds the trace stored in `fixtures/v1/small.vtrace`. Never change it: the fixture is frozen.
pub fn small_trace() -> Trace {
    let mut trace = Trace::default();
    let i = &mut trace.interner;
    let forward = i.string("forward");
    let model_py = i.string("/src/model.py");
    let unknown_file = i.string("??");
    let matmul = i.string("at::native::matmul(at::Tensor const&, at::Tensor const&)");
    let f0 = i.frame(Frame { function: matmul, file: unknown_file, line: 0 });
    let f1 = i.frame(Frame { function: forward, file: model_py, line: 42 });
    let stack_a = i.stack(&[f0, f1]);
    let stack_b = i.stack(&[f1]);
    let compile = i.string("compiled_fn_3");
    let meta = i.string("step=7");
    let context = i.context(Context { compile_context: compile, user_metadata: meta });
    let layer_name = i.string("layers.0.attn.q_proj.weight");
    let range = i.string("Optimizer.step#AdamW.step");
    let counter_name = i.string("device used");

    let base: u64 = 0x7f3a_0000_0000;
    let t0: i64 = 1_748_732_571_481_678_000;
    let mut seg_alloc = Event::new(EventKind::SegmentAlloc, t0, 0, base, 20 << 20);
    seg_alloc.stack = stack_b;
    let mut a1 = Event::new(EventKind::Alloc, t0 + 1_000, 0, base, 4 << 20);
    a1.set_requested_bytes((4 << 20) - 100);
    a1.stack = stack_a;
    a1.context = context;
    a1.stream = 0x5555_0000_1234.into();
    let mut a2 = Event::new(EventKind::Alloc, t0 + 2_500, 0, base + (4 << 20), 512);
    a2.set_requested_bytes(4);
    a2.flags = event_flags::SIZE_ESTIMATED;
    let fr = Event::new(EventKind::FreeRequested, t0 + 3_000, 0, base, 4 << 20);
    let fc = Event::new(EventKind::FreeCompleted, t0 + 3_001, 0, base, 4 << 20);
    let mut host = Event::new(EventKind::Alloc, t0 + 4_000, -1, u64::MAX - 4095, 4096);
    host.process = ProcessId(1);
    let map = Event::new(EventKind::SegmentMap, t0 + 5_000, 1, 0x7f00_0000_0000, 2 << 20);
    let unmap = Event::new(EventKind::SegmentUnmap, t0 + 6_000, 1, 0x7f00_0000_0000, 2 << 20);
    let seg_free = Event::new(EventKind::SegmentFree, t0 + 7_000, 0, base + (32 << 20), 2 << 20);
    trace.events = vec![seg_alloc, a1, a2, fr, fc, host, map, unmap, seg_free];

    trace.segments = vec![Segment {
        device: DeviceId(0),
        process: ProcessId(0),
        address: base,
        size_bytes: 20 << 20,
        stream: 0,
        pool: SegmentPool::Large,
        pool_id: (0, 3),
        is_expandable: false,
        stack: stack_b,
        blocks: vec![
            Block {
                address: base,
                size_bytes: 4 << 20,
                requested_bytes: 0,
                state: BlockState::Inactive,
                stack: StackId(0),
            },
            Block {
                address: base + (4 << 20),
                size_bytes: 512,
                requested_bytes: 4,
                state: BlockState::ActiveAllocated,
                stack: stack_a,
            },
            Block {
                address: base + (4 << 20) + 512,
                size_bytes: (16 << 20) - 512,
                requested_bytes: 0,
                state: BlockState::ActivePendingFree,
                stack: StackId(0),
            },
        ],
    }];
    trace.annotations = vec![
        Annotation {
            kind: AnnotationKind::OptimizerStep,
            device: None,
            process: ProcessId(0),
            start_ns: t0 + 100,
            end_ns: t0 + 5_100,
            name: range,
            stack: StackId(0),
        },
        Annotation {
            kind: AnnotationKind::Snapshot,
            device: Some(DeviceId(0)),
            process: ProcessId(0),
            start_ns: t0 + 7_000,
            end_ns: t0 + 7_000,
            name: range,
            stack: stack_a,
        },
    ];
    trace.ooms = vec![
        Oom {
            time_ns: t0 + 6_500,
            device: DeviceId(0),
            process: ProcessId(0),
            stream: 7,
            requested_bytes: 80 << 30,
            device_free_bytes: Some(1 << 30),
            stack: stack_a,
        },
        Oom {
            time_ns: t0 + 6_600,
            device: DeviceId(0),
            process: ProcessId(0),
            stream: 0,
            requested_bytes: 1,
            device_free_bytes: None,
            stack: StackId(0),
        },
    ];
    trace.counters = vec![CounterSeries {
        kind: CounterKind::DeviceUsed,
        name: counter_name,
        device: DeviceId(0),
        process: ProcessId(0),
        samples: vec![
            CounterSample { time_ns: t0, value: 500 << 20 },
            CounterSample { time_ns: t0 + 4_000, value: 520 << 20 },
            CounterSample { time_ns: t0 + 8_000, value: 480 << 20 },
        ],
    }];
    trace.tags = vec![Tag {
        time_ns: t0 + 2_600,
        device: DeviceId(0),
        process: ProcessId(0),
        address: base + (4 << 20),
        category: Category::Parameter,
        name: layer_name,
    }];
    trace.metadata = small_metadata();
    trace
}

/// The metadata of [`small_trace`] (frozen with it).
fn small_metadata() -> Metadata {
    Metadata {
        source_format: SourceFormat::Vtrace,
        clock: Clock::UnixNs,
        tool_version: "0.1.0".to_owned(),
        devices: vec![
            DeviceInfo { device: DeviceId::HOST, ..DeviceInfo::default() },
            DeviceInfo {
                device: DeviceId(0),
                name: Some("NVIDIA H100 80GB HBM3".to_owned()),
                total_memory_bytes: Some(85_520_809_984),
                ..DeviceInfo::default()
            },
            DeviceInfo { device: DeviceId(1), ..DeviceInfo::default() },
        ],
        processes: vec![
            ProcessInfo {
                pid: Some(4242),
                rank: Some(0),
                command_line: vec!["python".to_owned(), "train.py".to_owned()],
                ..ProcessInfo::default()
            },
            ProcessInfo { pid: Some(4243), ..ProcessInfo::default() },
        ],
        allocator_settings: serde_json::json!({"expandable_segments": false, "max_split_size": -1}),
        extra: serde_json::Map::new(),
        range: None,
        unrecorded: Vec::new(),
    }
}

/// Asserts two traces hold the same data.
pub fn assert_same(a: &Trace, b: &Trace) {
    // Whether frees come in two steps is written down when a trace is read or written, and
    // worked out from the events where it was not: the same either way.
    let settled = |t: &Trace| {
        let mut copy = Trace { metadata: t.metadata.clone(), events: t.events.clone(), ..Trace::default() };
        copy.settle_free_steps();
        copy.metadata
    };
    assert_eq!(settled(a), settled(b));
    assert_eq!(a.events, b.events);
    assert_eq!(a.segments, b.segments);
    assert_eq!(a.annotations, b.annotations);
    assert_eq!(a.ooms, b.ooms);
    assert_eq!(a.counters, b.counters);
    assert_eq!(a.tags, b.tags);
    assert_eq!(a.interner.strings().collect::<Vec<_>>(), b.interner.strings().collect::<Vec<_>>());
    assert_eq!(a.interner.frames(), b.interner.frames());
    assert_eq!(a.interner.stacks().collect::<Vec<_>>(), b.interner.stacks().collect::<Vec<_>>());
    assert_eq!(a.interner.contexts(), b.interner.contexts());
}
