//! The peak of a device's memory and what was alive at it.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap as HashMap;

use vramscope_trace_format::{Category, CounterKind, CounterSeries, DeviceId, EventKind, StackId, Trace};

use super::attribution::Attributor;
use super::replay::{self, Point};

/// The largest value of one curve and the first instant it was reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Peak {
    /// Bytes at the peak.
    pub bytes: u64,
    /// When it was first reached.
    pub time_ns: i64,
    /// The event after which it was reached (`None`: before the first event, or a counter sample).
    pub event: Option<usize>,
}

/// Peaks of a device's curves and its state after the last event.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Peaks {
    /// Peak of allocated bytes.
    pub allocated: Peak,
    /// Peak of active bytes (allocated, and freed but waiting for streams).
    pub active: Peak,
    /// Peak of requested bytes.
    pub requested: Peak,
    /// Peak of reserved bytes.
    pub reserved: Peak,
    /// State after the last event.
    pub end: Point,
    /// Number of points replayed.
    pub points: usize,
}

fn raise(peak: &mut Peak, bytes: u64, event: Option<usize>, time_ns: i64, first: bool) {
    if first || bytes > peak.bytes {
        *peak = Peak { bytes, time_ns, event };
    }
}

/// Finds the peaks of a device in one pass.
pub fn peaks(trace: &Trace, device: DeviceId) -> Peaks {
    let events = replay::device_events(trace, device);
    let initial = replay::initial_state(trace, device, &events);
    peaks_from(trace, device, &events, &initial)
}

/// [`peaks`] of a device whose events and initial state the caller has worked out.
pub fn peaks_from(trace: &Trace, device: DeviceId, events: &replay::DeviceEvents, initial: &replay::Initial) -> Peaks {
    let mut peaks = Peaks::default();
    let end = replay::replay_with(trace, device, events, initial, |event, p| {
        let first = peaks.points == 0;
        raise(&mut peaks.allocated, p.allocated_bytes, event, p.time_ns, first);
        raise(&mut peaks.active, p.active_bytes, event, p.time_ns, first);
        raise(&mut peaks.requested, p.requested_bytes, event, p.time_ns, first);
        raise(&mut peaks.reserved, p.reserved_bytes, event, p.time_ns, first);
        peaks.points += 1;
    });
    peaks.end = end;
    peaks
}

/// Whether a device's trace records reserved memory: a reserved peak, or segments in its final
/// state (what `info` and `advise` both say).
pub fn reserved_recorded(trace: &Trace, device: DeviceId, peaks: &Peaks) -> bool {
    peaks.reserved.bytes > 0 || trace.segments.iter().any(|s| s.device == device)
}

/// A block alive at some instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveBlock {
    /// Its address (0 for memory a source reports only as a total).
    pub address: u64,
    /// Its size.
    pub size_bytes: u64,
    /// What was requested.
    pub requested_bytes: u64,
    /// The event that allocated it; `None` when it was allocated before the trace began.
    pub alloc_event: Option<usize>,
    /// Where it was allocated.
    pub stack: StackId,
}

/// The blocks of a device alive right after event `upto` (before the first event when `None`).
pub fn live_at(trace: &Trace, device: DeviceId, upto: Option<usize>) -> Vec<LiveBlock> {
    let mut out = Vec::new();
    live_at_each(trace, device, &[upto], |_, blocks| out = blocks);
    out
}

/// The blocks alive right after each of `targets` (ascending; `None`, before the first event,
/// sorts first), in one pass over the device's events: `visit(k, blocks)` for the `k`-th target,
/// blocks largest first.
pub fn live_at_each(
    trace: &Trace,
    device: DeviceId,
    targets: &[Option<usize>],
    visit: impl FnMut(usize, Vec<LiveBlock>),
) {
    let events = replay::device_events(trace, device);
    let initial = replay::initial_state(trace, device, &events);
    live_at_each_from(trace, &events, &initial, targets, visit);
}

/// [`live_at_each`] of a device whose events and initial state the caller has worked out.
pub fn live_at_each_from(
    trace: &Trace,
    events: &replay::DeviceEvents,
    initial: &replay::Initial,
    targets: &[Option<usize>],
    mut visit: impl FnMut(usize, Vec<LiveBlock>),
) {
    live_and_awaiting_at_each_from(trace, events, initial, targets, |k, blocks, _| visit(k, blocks));
}

/// [`live_at_each_from`], with the blocks the program freed that still wait for their streams
/// at each target too (`visit(k, allocated, awaiting)`): they are not allocated, and they still
/// take their place in their segment.
pub fn live_and_awaiting_at_each_from(
    trace: &Trace,
    events: &replay::DeviceEvents,
    initial: &replay::Initial,
    targets: &[Option<usize>],
    mut visit: impl FnMut(usize, Vec<LiveBlock>, Vec<LiveBlock>),
) {
    let two_step =
        events.first().and_then(|i| trace.events.get(i as usize)).is_some_and(|e| trace.frees_in_two_steps(e.device));
    let mut live: HashMap<u64, LiveBlock> = HashMap::default();
    let mut awaiting: HashMap<u64, LiveBlock> = HashMap::default();
    let mut unaddressed = Vec::new();
    for block in &initial.blocks {
        let stack = block.stack(trace);
        let live_block = LiveBlock {
            address: block.address,
            size_bytes: block.size_bytes,
            requested_bytes: block.requested_bytes,
            alloc_event: None,
            stack,
        };
        if block.awaiting {
            awaiting.insert(block.address, live_block);
        } else if block.address == 0 {
            unaddressed.push(live_block);
        } else {
            live.insert(block.address, live_block);
        }
    }
    let sorted = |blocks: &HashMap<u64, LiveBlock>, extra: &[LiveBlock]| {
        let mut blocks: Vec<LiveBlock> = blocks.values().copied().chain(extra.iter().copied()).collect();
        blocks.sort_by(|a, b| b.size_bytes.cmp(&a.size_bytes).then(a.address.cmp(&b.address)));
        blocks
    };
    let mut emit = |k: usize, live: &HashMap<u64, LiveBlock>, awaiting: &HashMap<u64, LiveBlock>| {
        visit(k, sorted(live, &unaddressed), sorted(awaiting, &[]));
    };
    let mut next = 0usize;
    while targets.get(next).is_some_and(Option::is_none) {
        emit(next, &live, &awaiting);
        next += 1;
    }
    let mut position = 0usize;
    while let Some(&Some(upto)) = targets.get(next) {
        while let Some(i) = events.get(position).filter(|&i| i as usize <= upto) {
            position += 1;
            let i = i as usize;
            let Some(e) = trace.events.get(i) else { continue };
            match e.kind {
                EventKind::Alloc => {
                    live.insert(
                        e.address,
                        LiveBlock {
                            address: e.address,
                            size_bytes: e.size_bytes,
                            requested_bytes: e.requested_bytes(),
                            alloc_event: Some(i),
                            stack: e.stack,
                        },
                    );
                }
                EventKind::FreeRequested | EventKind::FreeCompleted => {
                    let ended = if e.ends_allocation(two_step) { live.remove(&e.address) } else { None };
                    if e.kind == EventKind::FreeCompleted {
                        awaiting.remove(&e.address);
                    } else if let Some(block) = ended {
                        awaiting.insert(e.address, block);
                    }
                }
                _ => {}
            }
        }
        emit(next, &live, &awaiting);
        next += 1;
    }
}

/// A device's counters of bytes by category (the profiler's memory timeline has them).
pub fn category_counters(trace: &Trace, device: DeviceId) -> Vec<(Category, &CounterSeries)> {
    trace
        .counters
        .iter()
        .filter(|c| c.device == device)
        .filter_map(|c| match c.kind {
            CounterKind::Category(category) => Some((category, c)),
            _ => None,
        })
        .collect()
}

/// Bytes by category at an instant: from the source's category counters when it has them (the
/// profiler's memory timeline), else from `attribution` of the live blocks.
pub fn categories_at(trace: &Trace, device: DeviceId, time_ns: i64, live: &[LiveBlock]) -> BTreeMap<Category, u64> {
    categories_at_with(trace, device, time_ns, live, &mut Attributor::new(trace, device))
}

/// [`categories_at`] with the caller's attributor for `device` (one worked out once for several
/// questions).
pub fn categories_at_with(
    trace: &Trace,
    device: DeviceId,
    time_ns: i64,
    live: &[LiveBlock],
    attributor: &mut Attributor<'_>,
) -> BTreeMap<Category, u64> {
    let mut totals = BTreeMap::new();
    let counters = category_counters(trace, device);
    if !counters.is_empty() {
        for (category, series) in counters {
            let index = series.samples.partition_point(|s| s.time_ns <= time_ns);
            let value = index.checked_sub(1).and_then(|i| series.samples.get(i)).map_or(0, |s| s.value);
            if value > 0 {
                *totals.entry(category).or_insert(0) += value as u64;
            }
        }
        return totals;
    }
    // Otherwise each block's tag during its lifetime, else the stack-frame rules.
    for block in live {
        let alloc_ns = block.alloc_event.and_then(|i| trace.events.get(i)).map_or(i64::MIN, |e| e.time_ns);
        let category = attributor.block(block.address, alloc_ns, time_ns, block.stack).category;
        *totals.entry(category).or_insert(0) += block.size_bytes;
    }
    totals.retain(|_, v| *v > 0);
    totals
}
