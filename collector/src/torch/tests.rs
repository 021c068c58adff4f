use super::*;

pub(super) fn parse(text: &str) -> Log {
    Log { pid: 7, lines: text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect(), skipped: 0 }
}

#[test]
fn cpu_blocks_are_segments_too_and_tags_and_phases_arrive() {
    let log = parse(concat!(
        r#"{"t":"meta","pid":7,"torch":"2.15","source":"cpu"}"#,
        "\n",
        r#"{"t":"alloc","time":10,"dev":-1,"addr":4096,"size":64,"op":"aten::empty"}"#,
        "\n",
        r#"{"t":"tag","time":11,"dev":-1,"addr":4096,"cat":"parameter","name":"w","size":64}"#,
        "\n",
        r#"{"t":"span","kind":"forward","name":"forward","begin":12,"end":20}"#,
        "\n",
        r#"{"t":"free","time":30,"dev":-1,"addr":4096,"size":64}"#,
        "\n",
        r#"{"t":"something_new","time":31}"#,
    ));
    let mut trace = Trace::default();
    let mut processes = BTreeMap::new();
    add_to_trace(&mut trace, &[log], &mut processes);
    let kinds: Vec<EventKind> = trace.events.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [EventKind::SegmentAlloc, EventKind::Alloc, EventKind::FreeCompleted, EventKind::SegmentFree]);
    let frames = trace.interner.frames_of(trace.events[1].stack);
    assert_eq!(frames.len(), 1);
    assert_eq!(trace.tags.len(), 1);
    assert_eq!(trace.tags[0].category, Category::Parameter);
    assert_eq!(trace.annotations[0].kind, AnnotationKind::Forward);
    assert_eq!(processes.get(&7), Some(&ProcessId(0)));
}

/// The stretches the shim's profiler was off reach the trace, each with its process, and a
/// gap that ends before it begins is read as empty.
#[test]
fn stretches_without_the_profiler_are_kept_with_their_process_and_cause() {
    let log = parse(concat!(
        r#"{"t":"meta","pid":7,"torch":"2.15","source":"cpu"}"#,
        "\n",
        r#"{"t":"gap","dev":-1,"begin":100,"end":250,"why":"own_profiler","detail":""}"#,
        "\n",
        r#"{"t":"gap","dev":-1,"begin":400,"end":300,"why":"unsafe","detail":"raw range"}"#,
    ));
    let mut trace = Trace::default();
    add_to_trace(&mut trace, &[log], &mut BTreeMap::new());
    let gaps: Vec<(u32, i64, i64, &str, &str)> = trace
        .metadata
        .unrecorded
        .iter()
        .map(|g| (g.process, g.begin_ns, g.end_ns, g.why.as_str(), g.detail.as_str()))
        .collect();
    assert_eq!(gaps, [(0, 100, 250, "own_profiler", ""), (0, 400, 400, "unsafe", "raw range")]);
    assert!(trace.metadata.unrecorded.iter().all(|g| g.device == DeviceId::HOST));
}

#[test]
fn the_driver_keeps_the_segments_and_what_lies_outside_the_allocator_is_non_framework() {
    let mut trace = Trace::default();
    // The driver saw two allocations: the allocator's 2 MiB segment and 4 KiB of its own.
    for (address, size) in [(1 << 30, 2 << 20), (5 << 30, 4096)] {
        trace.events.push(Event::new(EventKind::SegmentAlloc, 5, 0, address, size));
        trace.events.push(Event::new(EventKind::Alloc, 5, 0, address, size));
    }
    let mut processes = BTreeMap::from([(7, ProcessId(0))]);
    let log = parse(concat!(
        r#"{"t":"meta","pid":7,"torch":"2.11","source":"cuda"}"#,
        "\n",
        r#"{"t":"frame","id":0,"file":"train.py","line":3,"name":"forward"}"#,
        "\n",
        r#"{"t":"segment_alloc","time":6,"dev":0,"addr":1073741824,"size":2097152}"#,
        "\n",
        r#"{"t":"alloc","time":7,"dev":0,"addr":1073741824,"size":512,"stack":[0]}"#,
    ));
    add_to_trace(&mut trace, &[log], &mut processes);
    let got: Vec<(EventKind, u64, u64)> = trace.events.iter().map(|e| (e.kind, e.address, e.size_bytes)).collect();
    assert_eq!(
        got,
        [
            (EventKind::SegmentAlloc, 1 << 30, 2 << 20),
            (EventKind::SegmentAlloc, 5 << 30, 4096),
            (EventKind::Alloc, 5 << 30, 4096),
            (EventKind::Alloc, 1 << 30, 512),
        ]
    );
    assert_eq!(trace.tags.len(), 1);
    assert_eq!((trace.tags[0].address, trace.tags[0].category), (5 << 30, Category::NonFramework));
    let frames = trace.interner.frames_of(trace.events[3].stack);
    assert_eq!(frames.len(), 1);
}

#[test]
fn blocks_without_python_frames_in_backward_are_the_autograd_engines() {
    let log = parse(concat!(
        r#"{"t":"meta","pid":7,"torch":"2.11","source":"cuda"}"#,
        "\n",
        r#"{"t":"span","kind":"backward","name":"backward","begin":10,"end":20}"#,
        "\n",
        r#"{"t":"alloc","time":15,"dev":0,"addr":4096,"size":512}"#,
        "\n",
        r#"{"t":"alloc","time":25,"dev":0,"addr":8192,"size":512}"#,
    ));
    let mut trace = Trace::default();
    add_to_trace(&mut trace, &[log], &mut BTreeMap::new());
    let function = |e: &Event| {
        trace
            .interner
            .frames_of(e.stack)
            .first()
            .and_then(|&f| trace.interner.frame_of(f))
            .map(|f| trace.interner.resolve(f.function).to_owned())
    };
    assert!(function(&trace.events[0]).is_some_and(|f| f.starts_with("autograd engine")));
    assert_eq!(function(&trace.events[1]), None);
}

#[test]
fn the_allocator_configuration_is_kept_in_the_order_it_was_set() {
    let log = parse(concat!(
        r#"{"t":"meta","pid":7,"torch":"2.11","source":"cuda"}"#,
        "\n",
        r#"{"t":"allocator_conf","conf":"max_split_size_mb:128"}"#,
        "\n",
        r#"{"t":"allocator_conf","conf":"expandable_segments:True"}"#,
    ));
    let mut trace = Trace::default();
    add_to_trace(&mut trace, &[log], &mut BTreeMap::new());
    assert_eq!(
        trace.metadata.allocator_settings,
        serde_json::json!({"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128,expandable_segments:True"})
    );
}
