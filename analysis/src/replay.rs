//! Replaying events into memory over time.
//!
//! allocated(t) counts blocks from their alloc until the program frees them (PyTorch's
//! `memory_allocated()`: a two-step free's request, else the free), active(t) until the free
//! completes (PyTorch's `active_bytes`: blocks freed and still waiting for their streams too);
//! requested(t) is allocated(t) with requested sizes; reserved(t) counts mapped segments. A
//! snapshot's trace is often only the last part of a run (a ring buffer), so the replay starts
//! from what was already there:
//! blocks freed in the window without their alloc, blocks alive in the final segment state whose
//! alloc is not in the window, and for profiler traces the running total the source reports.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap as HashMap;

use vramscope_trace_format::{BlockState, CounterKind, DeviceId, Event, EventKind, StackId, Trace};

/// Memory in use after one event (or counter sample).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Point {
    /// When.
    pub time_ns: i64,
    /// Bytes of blocks allocated and not yet freed by the program (PyTorch's
    /// `memory_allocated()`).
    pub allocated_bytes: u64,
    /// Those and the blocks freed by the program that wait for their streams (PyTorch's
    /// `active_bytes`).
    pub active_bytes: u64,
    /// The same with requested sizes.
    pub requested_bytes: u64,
    /// Bytes of mapped segments.
    pub reserved_bytes: u64,
}

/// A block that was alive before the first event of the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PreexistingBlock {
    /// Its address (0 for memory the source reports only as a total).
    pub address: u64,
    /// Its size.
    pub size_bytes: u64,
    /// Its requested size.
    pub requested_bytes: u64,
    /// Index of the event that ends its allocation (the program's free), if the trace has it;
    /// for a block waiting for its streams before the first event, the free's completion.
    pub freed_by: Option<usize>,
    /// Index in the final segment state (segment, block) it comes from, if any.
    pub final_block: Option<(usize, usize)>,
    /// Freed by the program before the first event and still waiting for its streams then:
    /// active, not allocated.
    pub awaiting: bool,
}

/// What the replay of one device starts from.
#[derive(Clone, Debug, Default)]
pub struct Initial {
    /// Blocks alive before the first event.
    pub blocks: Vec<PreexistingBlock>,
    /// Reserved bytes before the first event.
    pub reserved_bytes: u64,
}

impl PreexistingBlock {
    /// Where it was allocated, as the final segment state records it (none: not recorded).
    pub fn stack(&self, trace: &Trace) -> StackId {
        self.final_block
            .and_then(|(s, b)| trace.segments.get(s).and_then(|s| s.blocks.get(b)))
            .map_or(StackId(0), |b| b.stack)
    }
}

impl Initial {
    /// A made-up start of `allocated`, `requested` and `reserved` bytes (one block at address
    /// 0, which no event frees), to replay from before the real one is known.
    pub fn stand_in(allocated: u64, requested: u64, reserved: u64) -> Self {
        let block = PreexistingBlock {
            address: 0,
            size_bytes: allocated,
            requested_bytes: requested,
            freed_by: None,
            final_block: None,
            awaiting: false,
        };
        Self { blocks: vec![block], reserved_bytes: reserved }
    }

    /// Allocated bytes before the first event.
    pub fn allocated_bytes(&self) -> u64 {
        self.blocks.iter().filter(|b| !b.awaiting).map(|b| b.size_bytes).sum()
    }

    /// Active bytes before the first event: allocated, and freed but waiting for streams.
    pub fn active_bytes(&self) -> u64 {
        self.blocks.iter().map(|b| b.size_bytes).sum()
    }

    /// Requested bytes before the first event (of the allocated blocks).
    pub fn requested_bytes(&self) -> u64 {
        self.blocks.iter().filter(|b| !b.awaiting).map(|b| b.requested_bytes).sum()
    }
}

/// Indices of a device's events in [`Trace::events`].
///
/// Indices are 32-bit (a trace holds fewer than 4 billion events): a list of tens of millions
/// costs half the memory, and several analyses hold one at a time. A device that has every event
/// of its trace (one device, the usual case) holds no list at all.
pub fn device_events(trace: &Trace, device: DeviceId) -> DeviceEvents {
    device_events_given(trace, device, None)
}

/// [`device_events`], given the devices that have events where they are known already
/// ([`Trace::event_devices`]): when `device` is the only one, its events are all the trace's
/// and nothing is scanned.
pub fn device_events_given(trace: &Trace, device: DeviceId, event_devices: Option<&[DeviceId]>) -> DeviceEvents {
    let only = event_devices.map(|devices| devices == [device]);
    if only == Some(true) || (only.is_none() && trace.events.iter().all(|e| e.device == device)) {
        return DeviceEvents { list: None, all: trace.events.len() };
    }
    let list = trace.events.iter().enumerate().filter(|(_, e)| e.device == device).map(|(i, _)| i as u32).collect();
    DeviceEvents { list: Some(list), all: 0 }
}

/// The indices of one device's events in [`Trace::events`], in order ([`device_events`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceEvents {
    /// The indices; `None`: every event of the trace, `0..all`.
    list: Option<Vec<u32>>,
    all: usize,
}

impl From<Vec<u32>> for DeviceEvents {
    fn from(list: Vec<u32>) -> Self {
        Self { list: Some(list), all: 0 }
    }
}

impl DeviceEvents {
    /// Number of events.
    pub fn len(&self) -> usize {
        self.list.as_ref().map_or(self.all, Vec::len)
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `k`th event's index.
    pub fn get(&self, k: usize) -> Option<u32> {
        match &self.list {
            Some(list) => list.get(k).copied(),
            None => (k < self.all).then_some(k as u32),
        }
    }

    /// The list of indices, when the device does not have every event of its trace.
    pub fn as_list(&self) -> Option<&[u32]> {
        self.list.as_deref()
    }

    /// The first event's index.
    pub fn first(&self) -> Option<u32> {
        self.get(0)
    }

    /// The last event's index.
    pub fn last(&self) -> Option<u32> {
        self.len().checked_sub(1).and_then(|k| self.get(k))
    }

    /// The indices, in order.
    pub fn iter(&self) -> DeviceEventsIter<'_> {
        match &self.list {
            Some(list) => DeviceEventsIter::List(list.iter()),
            None => DeviceEventsIter::All(0..self.all as u32),
        }
    }

    /// The number of leading indices for which `pred` holds (it must hold for a prefix only).
    pub fn partition_point(&self, mut pred: impl FnMut(u32) -> bool) -> usize {
        match &self.list {
            Some(list) => list.partition_point(|&i| pred(i)),
            None => {
                let (mut lo, mut hi) = (0, self.all);
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    if pred(mid as u32) {
                        lo = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
                lo
            }
        }
    }
}

/// The indices of [`DeviceEvents::iter`].
#[derive(Clone, Debug)]
pub enum DeviceEventsIter<'a> {
    /// From the list.
    List(std::slice::Iter<'a, u32>),
    /// Every event.
    All(std::ops::Range<u32>),
}

impl Iterator for DeviceEventsIter<'_> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        match self {
            Self::List(i) => i.next().copied(),
            Self::All(r) => r.next(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            Self::List(i) => i.size_hint(),
            Self::All(r) => r.size_hint(),
        }
    }
}

impl DoubleEndedIterator for DeviceEventsIter<'_> {
    fn next_back(&mut self) -> Option<u32> {
        match self {
            Self::List(i) => i.next_back().copied(),
            Self::All(r) => r.next_back(),
        }
    }
}

impl ExactSizeIterator for DeviceEventsIter<'_> {}

fn is_block_event(kind: EventKind) -> bool {
    matches!(kind, EventKind::Alloc | EventKind::FreeRequested | EventKind::FreeCompleted)
}

fn adds_reserved(kind: EventKind) -> bool {
    matches!(kind, EventKind::SegmentAlloc | EventKind::SegmentMap)
}

fn removes_reserved(kind: EventKind) -> bool {
    matches!(kind, EventKind::SegmentFree | EventKind::SegmentUnmap)
}

/// What [`initial_state`] knows of an address while it walks the events.
#[derive(Clone, Copy)]
struct Seen {
    /// The pre-existing block the address holds, if it is one.
    before: Option<usize>,
}

/// Works out what a device's replay starts from.
pub fn initial_state(trace: &Trace, device: DeviceId, events: &DeviceEvents) -> Initial {
    let two_step = trace.frees_in_two_steps(device);
    let mut initial = Initial::default();
    // Blocks: an address whose first block event frees it was allocated before the window.
    let mut live: HashMap<u64, Seen> = HashMap::default();
    let mut segments_live: BTreeMap<u64, u64> = BTreeMap::new();
    let pre = |e: &Event, freed_by: Option<usize>, awaiting: bool| PreexistingBlock {
        address: e.address,
        size_bytes: e.size_bytes,
        requested_bytes: e.requested_bytes(),
        freed_by,
        final_block: None,
        awaiting,
    };
    for i in events.iter().map(|i| i as usize) {
        let Some(e) = trace.events.get(i) else { continue };
        match e.kind {
            EventKind::Alloc => {
                live.insert(e.address, Seen { before: None });
            }
            EventKind::FreeRequested => match live.entry(e.address) {
                std::collections::hash_map::Entry::Vacant(slot) => {
                    slot.insert(Seen { before: Some(initial.blocks.len()) });
                    initial.blocks.push(pre(e, Some(i), false));
                }
                std::collections::hash_map::Entry::Occupied(slot) => {
                    if let Some(block) = slot.get().before.and_then(|k| initial.blocks.get_mut(k)) {
                        block.freed_by.get_or_insert(i);
                    }
                }
            },
            EventKind::FreeCompleted => match live.remove(&e.address) {
                Some(Seen { before: Some(index) }) => {
                    if let Some(block) = initial.blocks.get_mut(index) {
                        block.freed_by.get_or_insert(i);
                    }
                }
                Some(Seen { before: None }) => {}
                // Of a two-step free, the completion of one requested before the window: the
                // block was active then, not allocated.
                None => initial.blocks.push(pre(e, Some(i), two_step)),
            },
            k if adds_reserved(k) => {
                segments_live.insert(e.address, e.size_bytes);
            }
            k if removes_reserved(k) && segments_live.remove(&e.address).is_none() => {
                initial.reserved_bytes += e.size_bytes;
            }
            _ => {}
        }
    }
    // Blocks alive in the final state without a live alloc at the end were alive all along
    // (allocated, or freed and waiting for their streams).
    for (si, segment) in trace.segments.iter().enumerate() {
        if segment.device != device {
            continue;
        }
        for (bi, block) in segment.blocks.iter().enumerate() {
            if block.state == BlockState::Inactive {
                continue;
            }
            match live.get(&block.address) {
                None => initial.blocks.push(PreexistingBlock {
                    address: block.address,
                    size_bytes: block.size_bytes,
                    requested_bytes: block.requested_bytes,
                    freed_by: None,
                    final_block: Some((si, bi)),
                    awaiting: block.state == BlockState::ActivePendingFree,
                }),
                // Freed in the window, allocated before it, and still waiting for its stream at
                // the end: the final state knows its real size (the free only an estimate).
                Some(Seen { before: Some(index) }) => {
                    if let Some(pending) = initial.blocks.get_mut(*index).filter(|b| !b.awaiting) {
                        pending.size_bytes = block.size_bytes;
                        pending.requested_bytes = block.requested_bytes;
                        pending.final_block = Some((si, bi));
                    }
                }
                Some(Seen { before: None }) => {}
            }
        }
        // Reserved: the part of a final segment not covered by mappings live at the end.
        let end = segment.address.saturating_add(segment.size_bytes);
        let covered: u64 = segments_live.range(segment.address..end).map(|(_, &size)| size).sum();
        initial.reserved_bytes += segment.size_bytes.saturating_sub(covered);
    }
    // Profiler traces report the running total: memory they never show being allocated.
    let known = initial.allocated_bytes();
    if let Some(reported) =
        trace.metadata.devices.iter().find(|d| d.device == device).and_then(|d| d.initial_allocated_bytes)
    {
        // Pre-existing blocks the trace frees are part of the reported total already.
        if reported > known {
            initial.blocks.push(PreexistingBlock {
                address: 0,
                size_bytes: reported - known,
                requested_bytes: reported - known,
                freed_by: None,
                final_block: None,
                awaiting: false,
            });
        }
    }
    initial
}

/// A step function read at increasing times.
struct StepReader<'a> {
    samples: &'a [vramscope_trace_format::CounterSample],
    next: usize,
    value: i64,
}

impl StepReader<'_> {
    fn at(&mut self, time_ns: i64) -> i64 {
        while let Some(s) = self.samples.get(self.next).filter(|s| s.time_ns <= time_ns) {
            self.value = s.value;
            self.next += 1;
        }
        self.value
    }
}

/// Replays a device's events, calling `visit` with the state after each one (and once before the
/// first, with the initial state at the first event's time). Returns the final state.
///
/// Devices without events but with category counters (the profiler's memory timeline) replay
/// their counters' totals instead.
pub fn replay(trace: &Trace, device: DeviceId, visit: impl FnMut(Option<usize>, Point)) -> Point {
    let events = device_events(trace, device);
    if replays_counters(trace, device, &events) {
        return replay_counters(trace, device, visit);
    }
    let initial = initial_state(trace, device, &events);
    replay_from(trace, device, &events, &initial, visit)
}

/// [`replay`] of a device whose events and initial state the caller has already worked out
/// (counters where the device has nothing else, as [`replay`]).
pub fn replay_with(
    trace: &Trace,
    device: DeviceId,
    events: &DeviceEvents,
    initial: &Initial,
    visit: impl FnMut(Option<usize>, Point),
) -> Point {
    if replays_counters(trace, device, events) {
        return replay_counters(trace, device, visit);
    }
    replay_from(trace, device, events, initial, visit)
}

/// Whether a device's memory comes from its counters (a profiler's totals) rather than from its
/// events: it has no events but has counters. A device with neither (a snapshot taken without
/// allocation history) replays its final segment state as its only instant.
pub fn replays_counters(trace: &Trace, device: DeviceId, events: &DeviceEvents) -> bool {
    events.is_empty() && trace.counters.iter().any(|c| c.device == device)
}

/// [`replay`] of a device whose events and initial state the caller has already worked out
/// (with no events: one point, the initial state, which is then also the final one).
pub fn replay_from(
    trace: &Trace,
    device: DeviceId,
    events: &DeviceEvents,
    initial: &Initial,
    mut visit: impl FnMut(Option<usize>, Point),
) -> Point {
    let reserved_counter = trace
        .counters
        .iter()
        .find(|c| c.device == device && c.kind == CounterKind::Reserved)
        .filter(|_| !events.iter().any(|i| trace.events.get(i as usize).is_some_and(|e| !is_block_event(e.kind))));
    let mut reserved_reader = reserved_counter.map(|c| StepReader { samples: &c.samples, next: 0, value: 0 });
    let first_time = events.first().and_then(|i| trace.events.get(i as usize)).map_or(0, |e| e.time_ns);
    let mut point = Point {
        time_ns: first_time,
        allocated_bytes: initial.allocated_bytes(),
        active_bytes: initial.active_bytes(),
        requested_bytes: initial.requested_bytes(),
        reserved_bytes: initial.reserved_bytes,
    };
    let two_step = trace.frees_in_two_steps(device);
    if let Some(reader) = reserved_reader.as_mut() {
        point.reserved_bytes = reader.at(first_time).max(0) as u64;
    }
    visit(None, point);
    for i in events.iter().map(|i| i as usize) {
        let Some(e) = trace.events.get(i) else { continue };
        apply(&mut point, e, two_step);
        if let Some(reader) = reserved_reader.as_mut() {
            point.reserved_bytes = reader.at(e.time_ns).max(0) as u64;
        }
        visit(Some(i), point);
    }
    point
}

/// The state after `e`, from the state before it; `two_step`: whether the device's frees come in
/// two steps ([`Trace::frees_in_two_steps`]).
pub(crate) fn apply(point: &mut Point, e: &Event, two_step: bool) {
    point.time_ns = e.time_ns;
    match e.kind {
        EventKind::Alloc => {
            point.allocated_bytes = point.allocated_bytes.saturating_add(e.size_bytes);
            point.active_bytes = point.active_bytes.saturating_add(e.size_bytes);
            point.requested_bytes = point.requested_bytes.saturating_add(e.requested_bytes());
        }
        EventKind::FreeRequested | EventKind::FreeCompleted => {
            if e.ends_allocation(two_step) {
                point.allocated_bytes = point.allocated_bytes.saturating_sub(e.size_bytes);
                point.requested_bytes = point.requested_bytes.saturating_sub(e.requested_bytes());
            }
            if e.kind == EventKind::FreeCompleted {
                point.active_bytes = point.active_bytes.saturating_sub(e.size_bytes);
            }
        }
        k if adds_reserved(k) => point.reserved_bytes = point.reserved_bytes.saturating_add(e.size_bytes),
        k if removes_reserved(k) => point.reserved_bytes = point.reserved_bytes.saturating_sub(e.size_bytes),
        _ => {}
    }
}

fn replay_counters(trace: &Trace, device: DeviceId, mut visit: impl FnMut(Option<usize>, Point)) -> Point {
    let categories: Vec<_> =
        trace.counters.iter().filter(|c| c.device == device && matches!(c.kind, CounterKind::Category(_))).collect();
    let allocated = trace.counters.iter().find(|c| c.device == device && c.kind == CounterKind::Allocated);
    let reserved = trace.counters.iter().find(|c| c.device == device && c.kind == CounterKind::Reserved);
    let mut times: Vec<i64> = categories
        .iter()
        .chain(allocated.iter())
        .chain(reserved.iter())
        .flat_map(|c| c.samples.iter().map(|s| s.time_ns))
        .collect();
    times.sort_unstable();
    times.dedup();
    let mut readers: Vec<StepReader<'_>> =
        categories.iter().map(|c| StepReader { samples: &c.samples, next: 0, value: 0 }).collect();
    let mut allocated_reader = allocated.map(|c| StepReader { samples: &c.samples, next: 0, value: 0 });
    let mut reserved_reader = reserved.map(|c| StepReader { samples: &c.samples, next: 0, value: 0 });
    let mut point = Point::default();
    for time_ns in times {
        let total: i64 = if readers.is_empty() {
            allocated_reader.as_mut().map_or(0, |r| r.at(time_ns))
        } else {
            readers.iter_mut().map(|r| r.at(time_ns)).sum()
        };
        point = Point {
            time_ns,
            allocated_bytes: total.max(0) as u64,
            active_bytes: total.max(0) as u64,
            requested_bytes: total.max(0) as u64,
            reserved_bytes: reserved_reader.as_mut().map_or(0, |r| r.at(time_ns).max(0) as u64),
        };
        visit(None, point);
    }
    point
}

/// allocated, requested and reserved bytes of a device after each event, in time order (the
/// first point is the state before the first event).
pub fn timeline(trace: &Trace, device: DeviceId) -> Vec<Point> {
    let mut points = Vec::new();
    replay(trace, device, |_, point| points.push(point));
    points
}

#[cfg(test)]
mod tests {
    use vramscope_trace_format::{Block, BlockState, Event, EventKind, Segment, StackId};

    use super::*;

    fn block(address: u64, size_bytes: u64, state: BlockState) -> Block {
        Block { address, size_bytes, requested_bytes: size_bytes / 2, state, stack: StackId(0) }
    }

    /// A window that starts after some memory was allocated, computed by hand.
    #[test]
    fn replay_counts_memory_from_before_the_window() {
        let mut trace = Trace::default();
        let base = 0x1000_0000;
        trace.segments.push(Segment::new(
            DeviceId(0),
            base,
            8192,
            vec![
                block(base, 1024, BlockState::ActiveAllocated),        // alive all along
                block(base + 1024, 1024, BlockState::Inactive),        // freed in the window
                block(base + 2048, 2048, BlockState::ActiveAllocated), // allocated in the window
                block(base + 4096, 4096, BlockState::Inactive),
            ],
        ));
        let mut free = Event::new(EventKind::FreeCompleted, 20, 0, base + 1024, 1024);
        free.set_requested_bytes(512);
        let mut alloc = Event::new(EventKind::Alloc, 10, 0, base + 2048, 2048);
        alloc.set_requested_bytes(1024);
        trace.events = vec![alloc, free];
        let points = timeline(&trace, DeviceId(0));
        let allocated: Vec<u64> = points.iter().map(|p| p.allocated_bytes).collect();
        let requested: Vec<u64> = points.iter().map(|p| p.requested_bytes).collect();
        // Start: 1024 (alive at the end, never allocated in the window) + 1024 (freed in it).
        assert_eq!(allocated, [2048, 4096, 3072]);
        assert_eq!(requested, [512 + 512, 512 + 512 + 1024, 512 + 1024]);
        // The segment was reserved before the window and stays.
        assert!(points.iter().all(|p| p.reserved_bytes == 8192));
        // The end of the replay is the final segment state.
        let end: u64 = trace.segments[0]
            .blocks
            .iter()
            .filter(|b| b.state == BlockState::ActiveAllocated)
            .map(|b| b.size_bytes)
            .sum();
        assert_eq!(points.last().map(|p| p.allocated_bytes), Some(end));
    }
}
