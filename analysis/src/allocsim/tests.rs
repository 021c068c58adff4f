use vramscope_trace_format::Event;

use super::*;

fn alloc(trace: &mut Trace, t: i64, address: u64, requested: u64) {
    let mut e = Event::new(EventKind::Alloc, t, 0, address, requested.div_ceil(512) * 512);
    e.set_requested_bytes(requested);
    trace.events.push(e);
}

fn free(trace: &mut Trace, t: i64, address: u64) {
    trace.events.push(Event::new(EventKind::FreeCompleted, t, 0, address, 0));
}

#[test]
fn sizes_round_as_the_allocator_rounds_them() {
    let a = Allocator {
        settings: Settings::default(),
        segments: BTreeMap::new(),
        free: BTreeSet::new(),
        reserved: 0,
        allocated: 0,
        next_address: 0,
        expandable: BTreeMap::new(),
        out: Simulation::default(),
    };
    assert_eq!(a.round(1), 512);
    assert_eq!(a.round(513), 1024);
    assert_eq!(a.round(3 << 20), 3 << 20);
    let mut divided = a;
    divided.settings.roundup_power2_divisions = [4; 16];
    // 1.2 MiB with 4 divisions of [1 MiB, 2 MiB): the next quarter, 1.25 MiB.
    assert_eq!(divided.round(1_200_000), 1_310_720);
    assert_eq!(divided.round(1 << 21), 1 << 21);
    assert_eq!(Allocator::segment_size(1 << 20), 2 << 20);
    assert_eq!(Allocator::segment_size(5 << 20), 20 << 20);
    assert_eq!(Allocator::segment_size((10 << 20) + 1), 12 << 20);
}

/// Hand-worked: three 1 KiB blocks share one 2 MiB small segment; a 4 MiB request gets a
/// 20 MiB segment and splits it (16 MiB left, more than 1 MiB); a second 4 MiB request takes
/// the rest; freeing both merges them back; `empty_cache` (a recorded segment free) gives back
/// the free 20 MiB segment, not the small one still in use.
#[test]
fn a_hand_worked_replay() {
    let mut trace = Trace::default();
    // The segments as the run recorded them (the model places blocks on its own).
    trace.events.push(Event::new(EventKind::SegmentAlloc, 0, 0, 0xa000_0000, 2 << 20));
    trace.events.push(Event::new(EventKind::SegmentAlloc, 3, 0, 0xb000_0000, 20 << 20));
    alloc(&mut trace, 1, 0x10, 1000);
    alloc(&mut trace, 2, 0x20, 1000);
    alloc(&mut trace, 3, 0x30, 1000);
    alloc(&mut trace, 4, 0x40, 4 << 20);
    alloc(&mut trace, 5, 0x50, 4 << 20);
    free(&mut trace, 6, 0x40);
    free(&mut trace, 7, 0x50);
    alloc(&mut trace, 8, 0x60, 12 << 20);
    free(&mut trace, 9, 0x60);
    trace.events.push(Event::new(EventKind::SegmentFree, 10, 0, 0xb000_0000, 20 << 20));
    let sim = simulate(&trace, DeviceId(0), Settings::default());
    assert_eq!(sim.segment_alloc_sizes, vec![2 << 20, 20 << 20]);
    assert_eq!(sim.peak_reserved_bytes, 22 << 20);
    assert_eq!(sim.segment_frees, 1);
    assert_eq!(sim.end_reserved_bytes, 2 << 20);
    assert_eq!(sim.unmatched_frees, 0);
    // With max_split_size 8 MiB, the 20 MiB segment (above it) serves no 4 MiB request
    // again once freed, and is not split: the second request gets a segment of its own.
    let sim = simulate(&trace, DeviceId(0), Settings { max_split_size_bytes: Some(8 << 20), ..Settings::default() });
    assert_eq!(sim.segment_alloc_sizes, vec![2 << 20, 20 << 20, 20 << 20]);
}

/// The case `max_split_size` is for: a large block freed, split for a small request, and the
/// large request after it needs a new segment; with the limit the small request gets its own
/// segment and the large one reuses the cached block.
fn split_then_large(trace: &mut Trace) {
    trace.events.push(Event::new(EventKind::SegmentAlloc, 0, 0, 0xa000_0000, 100 << 20));
    alloc(trace, 1, 0xa000_0000, 100 << 20);
    free(trace, 2, 0xa000_0000);
    alloc(trace, 3, 0xa000_0000, 5 << 20);
    trace.events.push(Event::new(EventKind::SegmentAlloc, 4, 0, 0xb000_0000, 100 << 20));
    alloc(trace, 4, 0xb000_0000, 100 << 20);
}

#[test]
fn max_split_size_keeps_large_blocks_for_large_requests() {
    let mut trace = Trace::default();
    split_then_large(&mut trace);
    let plain = simulate(&trace, DeviceId(0), Settings::default());
    assert_eq!(plain.segment_alloc_sizes, vec![100 << 20, 100 << 20]);
    assert_eq!(plain.peak_reserved_bytes, 200 << 20);
    let limited =
        simulate(&trace, DeviceId(0), Settings { max_split_size_bytes: Some(64 << 20), ..Settings::default() });
    assert_eq!(limited.segment_alloc_sizes, vec![100 << 20, 20 << 20]);
    assert_eq!(limited.peak_reserved_bytes, 120 << 20);
}

/// Hand-worked, with expandable segments: two 4 MiB blocks share the first 20 MiB page of the
/// large pool's range; a 30 MiB request has 12 MiB free before the unmapped pages and maps
/// one more page (40 MiB); a small block maps a 2 MiB page of the small pool's range. Freed
/// and released, every whole page is unmapped. Without them: a 20 MiB segment, one of 30 MiB
/// and one of 2 MiB.
#[test]
fn expandable_segments_map_the_pages_blocks_need() {
    let mut trace = Trace::default();
    alloc(&mut trace, 1, 0x10, 4 << 20);
    alloc(&mut trace, 2, 0x20, 4 << 20);
    alloc(&mut trace, 3, 0x30, 30 << 20);
    alloc(&mut trace, 4, 0x40, 1000);
    for (t, address) in [(5, 0x10), (6, 0x20), (7, 0x30), (8, 0x40)] {
        free(&mut trace, t, address);
    }
    trace.events.push(Event::new(EventKind::SegmentUnmap, 9, 0, 0xa000_0000, 40 << 20));
    let on = Settings { expandable_segments: true, ..Settings::default() };
    let sim = simulate(&trace, DeviceId(0), on);
    assert_eq!(sim.segment_map_sizes, vec![20 << 20, 20 << 20, 2 << 20]);
    assert_eq!(sim.peak_reserved_bytes, 42 << 20);
    assert_eq!(sim.end_reserved_bytes, 0);
    assert!(sim.segment_alloc_sizes.is_empty());
    let off = simulate(&trace, DeviceId(0), Settings::default());
    assert_eq!(off.segment_alloc_sizes, vec![20 << 20, 30 << 20, 2 << 20]);
    assert_eq!(off.peak_reserved_bytes, 52 << 20);
}
