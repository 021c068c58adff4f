//! A trace opened at a range of itself shows, at every instant of the range, the memory the
//! whole trace shows there: real snapshots (cut while their pickle is read), recordings and a
//! profiler trace (cut once read), over ranges of time and of events.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use vramscope_analysis::query::replay::{Point, replay};
use vramscope_trace_format::{
    DeviceId, Event, EventKind, NoProgress, Trace, TraceRange, event_flags, import, import_range,
};

fn fixture(name: &str) -> PathBuf {
    // At run time: a target directory shared between clones can hold this test built in another.
    let root =
        std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    if name.ends_with(".vtrace") {
        return root.join("../samples/traces").join(name);
    }
    if name.contains("mlp_adam") {
        return root.join("../../shared/fixtures/torch-profiler").join(name);
    }
    root.join("../../shared/fixtures/pytorch-snapshots").join(name)
}

/// The state after each event of a device, by event.
fn curve(trace: &Trace, device: DeviceId) -> (Point, Vec<(Event, Point)>) {
    let mut start = Point::default();
    let mut points = Vec::new();
    replay(trace, device, |i, point| match i.and_then(|i| trace.events.get(i)) {
        Some(e) => points.push((*e, point)),
        None => start = point,
    });
    (start, points)
}

fn same_event(a: &Event, b: &Event) -> bool {
    (a.time_ns, a.address, a.kind, a.requested_bytes(), a.stack)
        == (b.time_ns, b.address, b.kind, b.requested_bytes(), b.stack)
}

/// Checks the range's curve against the whole trace's: the state when the range starts (after
/// what stands for the blocks alive then), and after each event it kept: allocated, requested
/// and reserved bytes. Returns how many events were compared.
fn check(name: &str, whole: &Trace, part: &Trace, range: TraceRange) -> usize {
    // Block sizes too: the final state gives a range every size it gives the whole (those of
    // the blocks the trace leaves alive and does not touch after the range).
    let key = |p: &Point| (p.requested_bytes, p.reserved_bytes, p.allocated_bytes);
    let mut compared = 0;
    for device in whole.devices() {
        let (whole_start, whole_points) = curve(whole, device);
        let (part_start, part_points) = curve(part, device);
        let synthetic = part_points.iter().take_while(|(e, _)| e.flags & event_flags::BEFORE_RANGE != 0).count();
        assert!(
            part_points[synthetic..].iter().all(|(e, _)| e.flags & event_flags::BEFORE_RANGE == 0),
            "{name} {range}: the blocks alive at the start come first"
        );
        let state_at_start = part_points.get(synthetic.wrapping_sub(1)).map_or(part_start, |p| p.1);
        let kept = &part_points[synthetic..];
        let Some((first, _)) = kept.first() else { continue };
        let at = whole_points
            .iter()
            .position(|(e, _)| same_event(e, first))
            .unwrap_or_else(|| panic!("{name} {range}: the first event kept on {device} is not in the whole trace"));
        let before = at.checked_sub(1).map_or(whole_start, |i| whole_points[i].1);
        assert_eq!(
            key(&state_at_start),
            key(&before),
            "{name} {range}: the state at the start of the range on {device}"
        );
        for (k, (event, point)) in kept.iter().enumerate() {
            let (whole_event, whole_point) = &whole_points[at + k];
            assert!(same_event(event, whole_event), "{name} {range}: event {k} kept on {device} is the whole's");
            assert_eq!(
                key(point),
                key(whole_point),
                "{name} {range}: after event {k} of the range on {device} ({event:?})"
            );
            compared += 1;
        }
    }
    compared
}

/// Ranges at a quarter and at two thirds of the trace, by time and by event, open at either end.
fn ranges(trace: &Trace) -> Vec<TraceRange> {
    let first = trace.events.first().map_or(0, |e| e.time_ns);
    let span = trace.events.last().map_or(0, |e| e.time_ns) - first;
    let n = trace.events.len() as u64;
    vec![
        TraceRange::Time { from_ns: Some(span / 4), to_ns: Some(span * 2 / 3) },
        TraceRange::Time { from_ns: Some(span / 2), to_ns: None },
        TraceRange::Time { from_ns: None, to_ns: Some(span / 3) },
        TraceRange::Events { from: Some(n / 4), to: Some(n * 2 / 3) },
        TraceRange::Events { from: Some(n / 2), to: None },
        TraceRange::Events { from: None, to: Some(n / 5) },
    ]
}

/// Each file read whole and at each of its [`ranges`]: `check(name, whole, part, range)` says
/// how many things it compared, and a file must have at least `least` of them.
fn each_range(files: &[&str], least: usize, mut check: impl FnMut(&str, &Trace, &Trace, TraceRange) -> usize) {
    for &name in files {
        let bytes = std::fs::read(fixture(name)).expect("fixture");
        let whole = import(&bytes, &NoProgress).expect("import").trace;
        let mut compared = 0;
        for range in ranges(&whole) {
            let part = import_range(&bytes, &NoProgress, Some(range)).expect("import a range").trace;
            compared += check(name, &whole, &part, range);
        }
        assert!(compared >= least, "{name}: only {compared} compared");
    }
}

#[test]
fn a_range_of_a_real_trace_shows_the_memory_of_the_whole_there() {
    let files = [
        "gpt_ctx128_fullstep_fp32.pickle",
        "gpt_ctx128_forward_fp32.pickle",
        "gpt_ctx128_forward_mixed.pickle",
        "stanford_cs336_a2_memory_snapshot.pickle",
        "mosaic_output.pickle",
        "h200-torch-plain.vtrace",
        "h200-torch-expandable.vtrace",
        "h200-torch-async.vtrace",
        "cpu-ddp-gloo-2ranks.vtrace",
        "mlp_adam_cpu.chrome_trace.json",
    ];
    each_range(&files, 101, |name, whole, part, range| {
        let info = part.metadata.range.clone().expect("the trace says it is a range");
        assert_eq!(info.range, range);
        let kept = part.events.iter().filter(|e| e.flags & event_flags::BEFORE_RANGE == 0).count() as u64;
        assert!(kept < whole.events.len() as u64, "{name} {range}: a range keeps less than the whole");
        // A block the program had freed and that waits for its streams at the start stands as
        // its allocation with the free's request beside it: one block, two events.
        let requests_at_start = part
            .events
            .iter()
            .filter(|e| e.flags & event_flags::BEFORE_RANGE != 0 && e.kind == EventKind::FreeRequested)
            .count() as u64;
        assert_eq!(info.alive_at_start, part.events.len() as u64 - kept - requests_at_start, "{name} {range}");
        if info.final_state_dropped {
            assert!(part.segments.is_empty(), "{name} {range}: a range ending early has no final state");
        } else {
            assert_eq!(part.segments, whole.segments, "{name} {range}: the final state is the whole's");
        }
        check(name, whole, part, range)
    });
}

/// A range never changes what a block is: at the range's allocated peak (and at its last event),
/// the bytes of each category are the whole trace's at the same instant, for blocks the range
/// shows allocated at its start (a recording's tags and phases, a snapshot's stack rules and
/// the parameters named by their sizes) as for the rest. Ranges that run to the trace's end:
/// one that ends before it leaves out what came after (the gradients a snapshot's model state is
/// named by, a backward that makes a forward's block an activation), which its caveat says.
#[test]
fn a_range_never_changes_what_a_block_is() {
    use vramscope_analysis::query::peak;
    let files = [
        "gpt_ctx128_fullstep_fp32.pickle",
        "stanford_cs336_a2_memory_snapshot.pickle",
        "h200-torch-plain.vtrace",
        "h200-torch-bf16.vtrace",
        "cpu-ddp-gloo-2ranks.vtrace",
    ];
    each_range(&files, 2, |name, whole, part, range| {
        if part.metadata.range.as_ref().is_some_and(|r| r.final_state_dropped) {
            return 0;
        }
        let mut compared = 0;
        for device in part.devices() {
            let kept: Vec<usize> = (0..part.events.len())
                .filter(|&i| part.events[i].device == device && part.events[i].flags & event_flags::BEFORE_RANGE == 0)
                .collect();
            let peak_event = peak::peaks(part, device).allocated.event;
            for at in [peak_event.filter(|i| kept.contains(i)), kept.last().copied()].into_iter().flatten() {
                let event = part.events[at];
                let Some(in_whole) = whole.events.iter().position(|e| e.device == device && same_event(e, &event))
                else {
                    panic!("{name} {range}: event {at} is not in the whole trace");
                };
                let categories = |t: &Trace, i: usize| {
                    let live = peak::live_at(t, device, Some(i));
                    peak::categories_at(t, device, event.time_ns, &live)
                };
                assert_eq!(
                    categories(part, at),
                    categories(whole, in_whole),
                    "{name} {range}: the categories on {device} after event {at} of the range"
                );
                compared += 1;
            }
        }
        compared
    });
}
