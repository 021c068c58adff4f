use vramscope_trace_format::{Event, EventKind, Frame};

use super::points::{Requested, Times};
use super::*;

fn trace_with(events: &[(EventKind, i64, u64, u64, &str)]) -> Trace {
    let mut trace = Trace::default();
    for &(kind, time_ns, address, size, function) in events {
        let file = trace.interner.string("model.py");
        let function = trace.interner.string(function);
        let frame = trace.interner.frame(Frame { function, file, line: 3 });
        let stack = trace.interner.stack(&[frame]);
        let mut e = Event::new(kind, time_ns, 0, address, size);
        e.stack = stack;
        trace.events.push(e);
    }
    trace
}

/// The shape of [`sawtooth`]'s events.
struct Sawtooth {
    allocs: u64,
    step_ns: u64,
    /// Every this many allocations is made in `forward` (the rest in `main`).
    forward_every: u64,
    size_base: u64,
    /// Sizes cycle through this many multiples of 512 above `size_base`.
    sizes: u64,
    segment_every: u64,
    segment_bytes: u64,
    /// Each allocation is freed this many allocations later.
    lag: u64,
}

/// Allocations `step_ns` apart, each freed `lag` allocations later, with a segment every
/// `segment_every`: a sawtooth.
fn sawtooth(s: Sawtooth) -> Vec<(EventKind, i64, u64, u64, &'static str)> {
    let site = |i: u64| if i.is_multiple_of(s.forward_every) { "forward" } else { "main" };
    let size = |i: u64| s.size_base + (i % s.sizes) * 512;
    let mut events = Vec::new();
    for i in 0..s.allocs {
        let t = (s.step_ns * i) as i64;
        events.push((EventKind::Alloc, t, 0x1000 + i * 0x100, size(i), site(i)));
        if i.is_multiple_of(s.segment_every) {
            events.push((EventKind::SegmentAlloc, t, 0x9000_0000 + i, s.segment_bytes, "main"));
        }
        if let Some(j) = i.checked_sub(s.lag) {
            events.push((EventKind::FreeCompleted, t + 1, 0x1000 + j * 0x100, size(j), site(i)));
        }
    }
    events
}

#[test]
fn ranges_and_categories_match_a_naive_scan() {
    // 10,000 events: allocs in `forward` and elsewhere, freed later, in a sawtooth.
    let events = sawtooth(Sawtooth {
        allocs: 5000,
        step_ns: 2,
        forward_every: 3,
        size_base: 64,
        sizes: 7,
        segment_every: 700,
        segment_bytes: 2 << 20,
        lag: 10,
    });
    let trace = trace_with(&events);
    let t = Timeline::build(&trace, DeviceId(0));
    let points = replay::timeline(&trace, DeviceId(0));
    assert_eq!(t.len(), points.len());
    for (start, end) in [(0, 1), (0, 64), (3, 4100), (63, 65), (100, 9000), (0, t.len())] {
        let r = t.range(start, end);
        let slice = &points[start..end];
        let max = slice.iter().map(|p| p.allocated_bytes).max().unwrap();
        assert_eq!(r.allocated_max, max);
        assert_eq!(r.allocated_min, slice.iter().map(|p| p.allocated_bytes).min().unwrap());
        assert_eq!(r.reserved_max, slice.iter().map(|p| p.reserved_bytes).max().unwrap());
        assert_eq!(r.reserved_min, slice.iter().map(|p| p.reserved_bytes).min().unwrap());
        assert_eq!(r.requested_max, slice.iter().map(|p| p.requested_bytes).max().unwrap());
        assert_eq!(points[r.allocated_max_point].allocated_bytes, max);
        assert!((start..end).contains(&r.allocated_max_point));
    }
    for (i, p) in points.iter().enumerate() {
        assert_eq!(t.values(Point(i)), (p.allocated_bytes, p.requested_bytes, p.reserved_bytes));
    }
    assert_eq!(t.event(Point(0)), None);
    assert_eq!(t.event(Point(5)), Some(4));
    // Categories add up to allocated everywhere, and activation is what `forward` holds.
    for i in [0, 1, 63, 64, 65, 777, t.len() - 1] {
        let c = t.categories(Point(i));
        assert_eq!(c.iter().sum::<u64>(), points[i].allocated_bytes, "point {i}");
    }
    let Point(peak) = t.peak_allocated_point();
    assert_eq!(points[peak].allocated_bytes, points.iter().map(|p| p.allocated_bytes).max().unwrap());
    // Searches by time agree with a plain search over every point.
    let times: Vec<i64> = points.iter().map(|p| p.time_ns).collect();
    for probe in [-5.0, 0.0, 0.5, 1.0, 127.0, 128.0, 129.5, 9_000.0, 1e9] {
        assert_eq!(t.first_not_before(probe), times.partition_point(|&x| (x as f64) < probe), "{probe}");
    }
    // Columns cover the whole span and keep the peak.
    let (a, b) = t.time_span_ns();
    let cols = t.columns(a as f64, b as f64 + 1.0, 97);
    let col_max = cols.iter().flatten().map(|c| c.range.allocated_max).max().unwrap();
    assert_eq!(col_max, points[peak].allocated_bytes);
    assert!(cols.iter().all(Option::is_some));
}

/// Times 10 s apart inside one block, and blocks given 4 GiB more than they asked for: both
/// columns fall back to whole values, which read the same as the replay.
#[test]
fn wide_times_and_odd_sizes_are_kept_whole() {
    let mut trace = Trace::default();
    for i in 0..200u64 {
        let size = if (150..152).contains(&i) { 1 << 33 } else { 512 };
        let mut e = Event::new(EventKind::Alloc, (i * i) as i64 * 10_000_000_000, 0, 0x1000 + i * 0x1000, size);
        e.set_requested_bytes(if (150..152).contains(&i) { 1 } else { 100 });
        trace.events.push(e);
    }
    let t = Timeline::build(&trace, DeviceId(0));
    assert!(matches!(&t.points, Points::Stored { times: Times::Whole(_), requested: Requested::Whole(_), .. }));
    let points = replay::timeline(&trace, DeviceId(0));
    for (i, p) in points.iter().enumerate() {
        assert_eq!(t.time_ns(Point(i)), p.time_ns, "time of point {i}");
        assert_eq!(t.values(Point(i)), (p.allocated_bytes, p.requested_bytes, p.reserved_bytes), "point {i}");
        let last_at = points.iter().rposition(|q| q.time_ns <= p.time_ns).unwrap_or(0);
        assert_eq!(t.point_at(p.time_ns), Point(last_at), "the point in force at {}", p.time_ns);
    }
}

/// A timeline replayed from its shared trace answers every question as one that keeps every
/// point: one device, and two devices interleaved (points that follow other devices' events),
/// with requests below the blocks' sizes.
#[test]
fn replayed_points_read_the_same_as_kept_ones() {
    let events = sawtooth(Sawtooth {
        allocs: 3000,
        step_ns: 3,
        forward_every: 5,
        size_base: 512,
        sizes: 11,
        segment_every: 500,
        segment_bytes: 20 << 20,
        lag: 20,
    });
    for two_devices in [false, true] {
        let mut trace = trace_with(&events);
        for (k, e) in trace.events.iter_mut().enumerate() {
            if e.kind == EventKind::Alloc {
                e.set_requested_bytes(e.size_bytes - 100);
            }
            if two_devices && k % 3 == 1 {
                e.device = DeviceId(1);
            }
        }
        let trace = Arc::new(trace);
        for device in if two_devices { vec![DeviceId(0), DeviceId(1)] } else { vec![DeviceId(0)] } {
            let kept = Timeline::build(&trace, device);
            let replayed = Timeline::build_shared(&trace, device);
            assert!(matches!(replayed.points, Points::Replayed { .. }));
            assert_eq!(kept.len(), replayed.len());
            let n = kept.len();
            assert!(n > 1000, "{n} points");
            for i in 0..n {
                let p = Point(i);
                let at = kept.time_ns(p);
                assert_eq!(replayed.time_ns(p), at, "time of point {i}");
                assert_eq!(replayed.values(p), kept.values(p), "point {i}");
                assert_eq!(replayed.event(p), kept.event(p), "event of point {i}");
                assert_eq!(replayed.categories(p), kept.categories(p), "categories at point {i}");
                assert_eq!(replayed.point_at(at), kept.point_at(at), "the point in force at {at}");
            }
            for (a, b) in [(0, 1), (0, n), (1, 63), (63, 130), (500, 999), (n - 3, n)] {
                assert_eq!(replayed.range(a, b), kept.range(a, b), "points {a}..{b}");
            }
            assert_eq!(replayed.peak_allocated_point(), kept.peak_allocated_point());
            let (a, b) = kept.time_span_ns();
            assert_eq!(replayed.time_span_ns(), (a, b));
            let (a, b) = (a as f64, b as f64 + 1.0);
            assert_eq!(replayed.columns(a, b, 173), kept.columns(a, b, 173));
            assert_eq!(replayed.columns(a + 100.0, a + 300.0, 50), kept.columns(a + 100.0, a + 300.0, 50));
        }
    }
}

/// A timeline built as an outline has the curves of the whole one at once and, once its
/// categories are worked out apart (as the app does, on another thread), the categories too:
/// one device and two interleaved, with blocks alive before the trace starts.
#[test]
fn an_outline_then_its_categories_is_the_whole_timeline() {
    let mut events = sawtooth(Sawtooth {
        allocs: 2000,
        step_ns: 3,
        forward_every: 4,
        size_base: 1024,
        sizes: 5,
        segment_every: 300,
        segment_bytes: 8 << 20,
        lag: 15,
    });
    // Freed before any alloc of theirs: alive before the trace, in the initial state.
    events.insert(0, (EventKind::FreeCompleted, 0, 0x7000_0000, 4096, "forward"));
    events.insert(1, (EventKind::FreeCompleted, 0, 0x7000_1000, 8192, "main"));
    for two_devices in [false, true] {
        let mut trace = trace_with(&events);
        if two_devices {
            for (k, e) in trace.events.iter_mut().enumerate() {
                if k % 4 == 3 {
                    e.device = DeviceId(1);
                }
            }
        }
        let trace = Arc::new(trace);
        let devices = if two_devices { vec![DeviceId(0), DeviceId(1)] } else { vec![DeviceId(0)] };
        for &device in &devices {
            let whole = Timeline::build_shared(&trace, device);
            // Given the devices with events: every event the one device's, or a list of them.
            let mut outline = Timeline::build_outline_given(&trace, device, Some(&trace.event_devices()));
            assert!(whole.has_categories() && whole.pending_categories().is_none());
            assert!(!outline.has_categories());
            let n = whole.len();
            assert_eq!(outline.len(), n);
            let (a, b) = whole.time_span_ns();
            let (a, b) = (a as f64, b as f64 + 1.0);
            // The curves, before any category.
            assert_eq!(outline.peak_allocated_point(), whole.peak_allocated_point());
            for i in (0..n).step_by(7) {
                assert_eq!(outline.values(Point(i)), whole.values(Point(i)), "point {i}");
                assert_eq!(outline.categories(Point(i)), [0; CATEGORIES], "pending categories at {i}");
            }
            let ranges =
                |t: &Timeline| t.columns(a, b, 131).into_iter().map(|c| c.map(|c| c.range)).collect::<Vec<_>>();
            assert_eq!(ranges(&outline), ranges(&whole));
            // Categories worked out for another timeline are refused.
            let pending = outline.pending_categories().expect("pending");
            if two_devices {
                let other = devices.iter().copied().find(|&d| d != device).expect("two devices");
                let theirs = Timeline::build_outline(&trace, other).pending_categories().expect("pending");
                let theirs = theirs.work_out(&trace);
                if theirs.category.len() != n {
                    assert!(!outline.set_categories(theirs), "another device's categories");
                    assert!(!outline.has_categories());
                }
            }
            assert!(outline.set_categories(pending.work_out(&trace)));
            assert!(outline.has_categories() && outline.pending_categories().is_none());
            assert!(!outline.set_categories(pending.work_out(&trace)), "set twice");
            for i in 0..n {
                assert_eq!(outline.categories(Point(i)), whole.categories(Point(i)), "categories at point {i}");
            }
            assert_eq!(outline.columns(a, b, 131), whole.columns(a, b, 131));
            // What was set is not the pending zeros: the peak's bytes, all of them, by category.
            let peak = outline.peak_allocated_point();
            let at_peak = outline.categories(peak);
            assert!(outline.values(peak).0 > 0);
            assert_eq!(at_peak.iter().sum::<u64>(), outline.values(peak).0);
        }
    }
}

/// The outline replays its curves from a stand-in start while the real one is worked out beside
/// it; where sizes near the top of 64 bits would make that inexact (a value held at zero or at
/// the top), it replays from the real start instead: the curves are the whole timeline's either
/// way.
#[test]
fn an_outline_of_sizes_near_the_top_of_64_bits_is_exact() {
    let huge = 1u64 << 63;
    let cases = [
        // A block of 2^63 bytes from before the trace, freed first.
        vec![
            (EventKind::FreeCompleted, 1, 0x10, huge, "main"),
            (EventKind::Alloc, 2, 0x20, 4096, "main"),
            (EventKind::FreeCompleted, 3, 0x20, 4096, "main"),
        ],
        // Allocations adding up past 2^64 (held at the top, as the replay does).
        vec![
            (EventKind::Alloc, 1, 0x10, huge, "main"),
            (EventKind::Alloc, 2, 0x20, huge, "main"),
            (EventKind::Alloc, 3, 0x30, huge, "main"),
            (EventKind::FreeCompleted, 4, 0x10, huge, "main"),
        ],
        // A free of a block never allocated, larger than everything before it.
        vec![
            (EventKind::Alloc, 1, 0x10, 512, "main"),
            (EventKind::SegmentFree, 2, 0x9000, 1 << 40, "main"),
            (EventKind::FreeCompleted, 3, 0x10, 512, "main"),
            (EventKind::FreeCompleted, 4, 0x40, 1 << 20, "main"),
        ],
    ];
    for (n, events) in cases.iter().enumerate() {
        let trace = Arc::new(trace_with(events));
        let whole = Timeline::build_shared(&trace, DeviceId(0));
        let outline = Timeline::build_outline(&trace, DeviceId(0));
        let points = replay::timeline(&trace, DeviceId(0));
        assert_eq!(outline.len(), points.len(), "case {n}");
        for (i, p) in points.iter().enumerate() {
            let expected = (p.allocated_bytes, p.requested_bytes, p.reserved_bytes);
            assert_eq!(outline.values(Point(i)), expected, "case {n}, point {i}");
            assert_eq!(whole.values(Point(i)), expected, "case {n}, point {i}");
        }
        assert_eq!(outline.range(0, outline.len()), whole.range(0, whole.len()), "case {n}");
        assert_eq!(outline.peak_allocated_point(), whole.peak_allocated_point(), "case {n}");
    }
}
