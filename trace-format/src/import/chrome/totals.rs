//! A device's allocator events made to agree with the running totals the profiler reports.
//!
//! Each `[memory]` event of a current profiler trace carries `Total Allocated`: the allocator's
//! own count after the event. The events alone cannot say what was alive before the trace
//! began, nor what the allocator handed out on threads the profiler did not follow (PyTorch
//! reports memory only on threads it profiles, while its totals count every thread). The
//! totals can: where the events and the totals part, the difference is memory the trace does
//! not report block by block. This module
//!
//! - orders events that share a timestamp the way their totals chain (kineto writes each
//!   thread's events together, and older traces have microsecond times, so ties are common);
//! - takes what was alive before the trace from the earliest event, not the first in the file;
//! - where the totals rise with no event to show it, adds a block of that size flagged
//!   [`UNREPORTED`], and where they fall, frees such blocks, or a block the trace allocated and
//!   never frees of exactly the missing size (its free was not reported);
//! - says where neither can make the curve equal the totals (the events keep more alive than
//!   the totals count, and no block fits).
//!
//! The result: the allocated curve equals `Total Allocated` after every event, or the trace's
//! metadata says from when, and by how much, it cannot.

use std::collections::{BTreeMap, HashMap};

use crate::model::counter::CounterSample;
use crate::model::event::{Event, EventKind, event_flags::UNREPORTED};
use crate::model::ids::DeviceId;
use crate::model::metadata::TotalsAgreement;

/// Events sharing a timestamp that are put in the order of their totals, at most: the search
/// is quadratic in a group's size.
const MAX_TIE_GROUP: usize = 512;

/// Addresses of blocks that stand for unreported memory start here, far above any real
/// device or host address (user-space addresses stay below 2^57).
const UNREPORTED_ADDRESS_BASE: u64 = 0xFFFF_0000_0000_0000;

/// What reconciling one device gave.
#[derive(Debug, Default)]
pub(super) struct Reconciled {
    /// Bytes allocated before the first event, as the totals say.
    pub initial_allocated_bytes: Option<u64>,
    /// Events to add, each with the position (in the device's sorted events) of the event it
    /// goes just before, at that event's time.
    pub added: Vec<(usize, Event)>,
    /// How the curve agrees with the totals.
    pub agreement: Option<TotalsAgreement>,
}

/// A size as a signed number of bytes.
fn bytes(size: u64) -> i64 {
    i64::try_from(size).unwrap_or(i64::MAX)
}

/// The signed change an event makes to allocated memory.
fn change(e: &Event) -> i64 {
    let size = bytes(e.size_bytes);
    match e.kind {
        EventKind::Alloc => size,
        EventKind::FreeCompleted => -size,
        _ => 0,
    }
}

/// Puts events that share a timestamp in the order their totals chain, where the file's order
/// breaks the chain and another order keeps it. `order` holds positions into `events` and
/// `totals`, sorted by time; `totals[i]` is the allocator's total after event `i`.
pub(super) fn order_ties(order: &mut [usize], events: &[Event], totals: &[Option<i64>]) {
    let mut previous: Option<i64> = None;
    let mut start = 0;
    while start < order.len() {
        let time = order.get(start).and_then(|&i| events.get(i)).map_or(0, |e| e.time_ns);
        let end =
            start + order[start..].iter().take_while(|&&i| events.get(i).is_some_and(|e| e.time_ns == time)).count();
        let group = &mut order[start..end];
        if group.len() > 1 && group.len() <= MAX_TIE_GROUP {
            chain_group(group, events, totals, previous);
        }
        previous = group.last().and_then(|&i| totals.get(i).copied().flatten()).or(previous);
        start = end.max(start + 1);
    }
}

/// Reorders one group of tied events so that each one's total is the one before plus its
/// change, starting from `previous` (or from any event, for the first group), if such an order
/// exists; otherwise leaves the group as it is.
fn chain_group(group: &mut [usize], events: &[Event], totals: &[Option<i64>], previous: Option<i64>) {
    let link = |i: usize| -> Option<(i64, i64)> {
        let total = totals.get(i).copied().flatten()?;
        Some((total.checked_sub(change(events.get(i)?))?, total))
    };
    let links: Option<Vec<(i64, i64)>> = group.iter().map(|&i| link(i)).collect();
    let Some(links) = links else { return };
    let chains = |order: &[usize]| {
        let mut current = previous;
        order.iter().all(|&n| {
            let (before, after) = links[n];
            let ok = current.is_none_or(|c| c == before);
            current = Some(after);
            ok
        })
    };
    let identity: Vec<usize> = (0..group.len()).collect();
    if chains(&identity) {
        return;
    }
    // A search with backtracking (several events can start from the same total), in file order
    // first, bounded in steps.
    let mut used = vec![false; group.len()];
    let mut sequence: Vec<usize> = Vec::with_capacity(group.len());
    let mut steps = 0usize;
    if chain_from(&links, previous, &mut used, &mut sequence, &mut steps) {
        let reordered: Vec<usize> = sequence.iter().map(|&n| group[n]).collect();
        group.copy_from_slice(&reordered);
    }
}

/// Steps a search for a group's chain may take, at most.
const MAX_CHAIN_STEPS: usize = 100_000;

/// Extends `sequence` to a chain of every link from `current` (any start when `None`).
fn chain_from(
    links: &[(i64, i64)],
    current: Option<i64>,
    used: &mut [bool],
    sequence: &mut Vec<usize>,
    steps: &mut usize,
) -> bool {
    if sequence.len() == links.len() {
        return true;
    }
    for n in 0..links.len() {
        *steps += 1;
        if *steps > MAX_CHAIN_STEPS {
            return false;
        }
        let (before, after) = links[n];
        if used[n] || current.is_some_and(|c| c != before) {
            continue;
        }
        used[n] = true;
        sequence.push(n);
        if chain_from(links, Some(after), used, sequence, steps) {
            return true;
        }
        sequence.pop();
        used[n] = false;
    }
    false
}

/// Reconciles one device's events (`device_events`: its events in time order, each with the
/// total after it) with the totals.
pub(super) fn reconcile(device: DeviceId, device_events: &[(Event, Option<i64>)]) -> Reconciled {
    let mut out = Reconciled::default();
    // What the replay will take as alive at the start: blocks freed without their alloc (known)
    // or the totals' figure before the first event that has one, whichever is more.
    let mut live: HashMap<u64, usize> = HashMap::new();
    let mut known = 0i64;
    let mut freed = vec![false; device_events.len()];
    let mut prefix = 0i64;
    let mut reported: Option<i64> = None;
    let mut highest_address = 0u64;
    for (n, (e, total)) in device_events.iter().enumerate() {
        prefix = prefix.saturating_add(change(e));
        if reported.is_none() {
            reported = total.map(|t| t.saturating_sub(prefix));
        }
        highest_address = highest_address.max(e.address.saturating_add(e.size_bytes));
        match e.kind {
            EventKind::Alloc => {
                live.insert(e.address, n);
            }
            EventKind::FreeCompleted => match live.remove(&e.address) {
                Some(alloc) => {
                    if let Some(f) = freed.get_mut(alloc) {
                        *f = true;
                    }
                }
                None => known = known.saturating_add(bytes(e.size_bytes)),
            },
            _ => {}
        }
    }
    let Some(reported) = reported else { return out };
    out.initial_allocated_bytes = Some(u64::try_from(reported.max(0)).unwrap_or(0));
    let base = reported.max(0).max(known);
    let mut next_address = UNREPORTED_ADDRESS_BASE.max(highest_address.saturating_add(1));
    let mut agreement = TotalsAgreement::default();
    let mut curve = base;
    // Unreported blocks alive, newest last; the trace's never-freed blocks alive, by size.
    let mut unreported: Vec<(u64, u64)> = Vec::new();
    let mut unreported_bytes = 0u64;
    let mut kept: HashMap<u64, Vec<u64>> = HashMap::new();
    // The size of the never-freed block at each address that may still be chosen.
    let mut kept_at: HashMap<u64, u64> = HashMap::new();
    // Bytes by which the events keep more alive than the totals, where nothing could close it.
    let mut excess = 0i64;
    for (n, (e, total)) in device_events.iter().enumerate() {
        if let Some(total) = *total {
            // What the totals say was allocated just before this event; the difference from
            // the curve happened since the event before, where no event reported it.
            let before = total.saturating_sub(change(e));
            let mut delta = before.saturating_sub(curve.saturating_sub(excess));
            if delta > 0 && excess > 0 {
                // The totals rise where the events had too much: the missing free is behind us.
                let closed = delta.min(excess);
                excess -= closed;
                delta -= closed;
            }
            let mut unreported_event = |kind: EventKind, address: u64, size: u64| {
                let mut event = Event::new(kind, e.time_ns, device, address, size);
                event.flags = UNREPORTED;
                out.added.push((n, event));
            };
            if delta > 0 {
                let size = delta.unsigned_abs();
                unreported_event(EventKind::Alloc, next_address, size);
                unreported.push((next_address, size));
                next_address = next_address.saturating_add(size);
                unreported_bytes = unreported_bytes.saturating_add(size);
                agreement.unreported_max_bytes = agreement.unreported_max_bytes.max(unreported_bytes);
                curve = curve.saturating_add(delta);
            }
            let mut need = if delta < 0 { delta.unsigned_abs() } else { 0 };
            while need > 0 {
                let Some((address, size)) = unreported.pop() else { break };
                unreported_event(EventKind::FreeCompleted, address, size);
                unreported_bytes = unreported_bytes.saturating_sub(size);
                curve = curve.saturating_sub(bytes(size));
                if size > need {
                    // Freed more than the totals dropped: what is left stays, as one block.
                    let rest = size - need;
                    unreported_event(EventKind::Alloc, next_address, rest);
                    unreported.push((next_address, rest));
                    next_address = next_address.saturating_add(rest);
                    unreported_bytes = unreported_bytes.saturating_add(rest);
                    curve = curve.saturating_add(bytes(rest));
                    need = 0;
                } else {
                    need -= size;
                }
            }
            // A block the trace allocated, never frees, and of exactly the size the totals lost.
            let mut chosen = None;
            while need > 0 && chosen.is_none() {
                let Some(address) = kept.get_mut(&need).and_then(Vec::pop) else { break };
                // An address allocated again since is no longer that block's.
                if kept_at.get(&address) == Some(&need) {
                    kept_at.remove(&address);
                    chosen = Some(address);
                }
            }
            if let Some(address) = chosen {
                unreported_event(EventKind::FreeCompleted, address, need);
                agreement.unreported_frees += 1;
                curve = curve.saturating_sub(bytes(need));
                need = 0;
            }
            excess = excess.saturating_add(bytes(need));
            if excess > 0 {
                let above = agreement.above.get_or_insert_with(Default::default);
                if above.events == 0 {
                    above.from_ns = e.time_ns;
                }
                above.events += 1;
                above.to_ns = e.time_ns;
                above.max_bytes = above.max_bytes.max(excess.unsigned_abs());
            }
        }
        if e.kind == EventKind::Alloc {
            kept_at.remove(&e.address);
            if !freed.get(n).copied().unwrap_or(true) {
                kept.entry(e.size_bytes).or_default().push(e.address);
                kept_at.insert(e.address, e.size_bytes);
            }
        }
        // The replay never lets allocated memory fall below zero.
        curve = curve.saturating_add(change(e)).max(0);
    }
    if agreement != TotalsAgreement::default() {
        out.agreement = Some(agreement);
    }
    out
}

/// The events in time order, each device's made to agree with its running totals
/// (this module), and what that took per device.
pub(super) fn reconcile_with_totals(
    events: Vec<Event>,
    event_totals: &[Option<i64>],
) -> (Vec<Event>, Vec<usize>, BTreeMap<DeviceId, Reconciled>) {
    let mut by_device: BTreeMap<DeviceId, Vec<usize>> = BTreeMap::new();
    let mut order: Vec<usize> = (0..events.len()).collect();
    order.sort_by_key(|&i| events.get(i).map_or(0, |e| e.time_ns));
    for i in order {
        if let Some(e) = events.get(i) {
            by_device.entry(e.device).or_default().push(i);
        }
    }
    let mut reconciled = BTreeMap::new();
    let mut out = Vec::with_capacity(events.len());
    for (device, mut order) in by_device {
        order_ties(&mut order, &events, event_totals);
        let device_events: Vec<(Event, Option<i64>)> =
            order.iter().filter_map(|&i| Some((*events.get(i)?, event_totals.get(i).copied().flatten()))).collect();
        let found = reconcile(device, &device_events);
        let mut added = found.added.iter().peekable();
        for (n, (&i, (e, _))) in order.iter().zip(&device_events).enumerate() {
            while let Some((_, a)) = added.next_if(|a| a.0 == n) {
                out.push((*a, None));
            }
            out.push((*e, Some(i)));
        }
        reconciled.insert(device, found);
    }
    // Stable: each device's order stays as reconciled.
    out.sort_by_key(|e| e.0.time_ns);
    let mut position = vec![0; events.len()];
    for (at, (_, i)) in out.iter().enumerate() {
        if let Some(slot) = i.and_then(|i| position.get_mut(i)) {
            *slot = at;
        }
    }
    (out.into_iter().map(|e| e.0).collect(), position, reconciled)
}

/// A device's `Total Allocated` samples in the events' final order: by time, and where times
/// tie, as their events were put ([`order_ties`]); a sample of no event keeps its
/// place after the one before it in the file.
pub(super) fn samples_in_event_order(
    samples: Vec<(CounterSample, Option<usize>)>,
    position: &[usize],
) -> Vec<CounterSample> {
    let mut last = 0;
    let mut keyed: Vec<(usize, CounterSample)> = samples
        .into_iter()
        .map(|(sample, event)| {
            if let Some(&at) = event.and_then(|i| position.get(i)) {
                last = at;
            }
            (last, sample)
        })
        .collect();
    keyed.sort_by_key(|&(at, sample)| (sample.time_ns, at));
    keyed.into_iter().map(|(_, sample)| sample).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(t: i64, address: u64, size: u64) -> Event {
        Event::new(EventKind::Alloc, t, 0, address, size)
    }

    fn free(t: i64, address: u64, size: u64) -> Event {
        Event::new(EventKind::FreeCompleted, t, 0, address, size)
    }

    /// The allocated curve after each of `events`, as the replay draws it with what reconciling
    /// added (each before the event it names) and what was alive at the start.
    fn curve(events: &[(Event, Option<i64>)], r: &Reconciled) -> Vec<i64> {
        let mut all: Vec<(Event, bool)> = Vec::new();
        for (n, (e, _)) in events.iter().enumerate() {
            all.extend(r.added.iter().filter(|a| a.0 == n).map(|a| (a.1, false)));
            all.push((*e, true));
        }
        // Blocks freed without their alloc were alive at the start.
        let mut seen = HashMap::new();
        let mut known = 0u64;
        for (e, _) in &all {
            if e.kind == EventKind::Alloc {
                seen.insert(e.address, ());
            } else if seen.remove(&e.address).is_none() {
                known += e.size_bytes;
            }
        }
        let mut now = bytes(r.initial_allocated_bytes.unwrap_or(0).max(known));
        let mut out = Vec::new();
        for (e, real) in all {
            now += change(&e);
            if real {
                out.push(now);
            }
        }
        out
    }

    #[test]
    fn memory_from_before_is_read_at_the_earliest_event() {
        // Totals from 4096 before the trace: +1024, a free of 512 allocated before, +2048.
        let events = vec![
            (alloc(10, 0x1000, 1024), Some(5120)),
            (free(20, 0x9000, 512), Some(4608)),
            (alloc(30, 0x2000, 2048), Some(6656)),
        ];
        let r = reconcile(DeviceId(0), &events);
        assert_eq!(r.initial_allocated_bytes, Some(4096));
        assert!(r.added.is_empty() && r.agreement.is_none(), "{r:?}");
        assert_eq!(curve(&events, &r), [5120, 4608, 6656]);
    }

    #[test]
    fn memory_the_events_do_not_report_becomes_blocks_that_say_so() {
        // 1000 bytes appear between the first two events (another thread), and go again later;
        // a block the trace never frees loses its free (300 bytes drop with no event).
        let events = vec![
            (alloc(10, 0x1000, 100), Some(100)),
            (alloc(20, 0x2000, 300), Some(1400)),
            (alloc(30, 0x3000, 50), Some(1450)),
            (free(40, 0x3000, 50), Some(400)),
            (alloc(50, 0x4000, 10), Some(110)),
        ];
        let r = reconcile(DeviceId(0), &events);
        assert_eq!(curve(&events, &r), [100, 1400, 1450, 400, 110]);
        let agreement = r.agreement.unwrap_or_default();
        assert_eq!(agreement.unreported_max_bytes, 1000);
        assert_eq!(agreement.unreported_frees, 1);
        assert_eq!(agreement.above, None);
        assert!(r.added.iter().all(|(_, e)| e.flags & UNREPORTED != 0));
        // The lost free is the never-freed 300-byte block's.
        assert!(r.added.iter().any(|(_, e)| e.kind == EventKind::FreeCompleted && e.address == 0x2000));
    }

    #[test]
    fn where_no_block_fits_the_trace_says_so() {
        // The totals drop by 70 with no event and no block of 70 alive: the curve stays 70 above
        // until the totals rise without an event by as much.
        let events = vec![
            (alloc(10, 0x1000, 100), Some(100)),
            (alloc(20, 0x2000, 10), Some(40)),
            (alloc(30, 0x3000, 10), Some(50)),
            (alloc(40, 0x4000, 10), Some(130)),
        ];
        let r = reconcile(DeviceId(0), &events);
        assert_eq!(curve(&events, &r), [100, 110, 120, 130]);
        let above = r.agreement.and_then(|a| a.above).unwrap_or_default();
        assert_eq!((above.from_ns, above.to_ns, above.events, above.max_bytes), (20, 30, 2, 70));
    }

    #[test]
    fn ties_follow_their_totals() {
        // Three events at one time, written in another thread's order.
        let events = [
            alloc(5, 0x10, 10),
            alloc(7, 0x1000, 100),
            free(7, 0x1000, 100),
            alloc(7, 0x2000, 200),
            alloc(9, 0x3000, 1),
        ];
        let totals = [Some(10), Some(110), Some(10), Some(210), Some(211)];
        // File order: the free first, then the alloc it frees, then the other.
        let mut order = vec![0, 2, 3, 1, 4];
        order_ties(&mut order, &events, &totals);
        assert_eq!(order, [0, 1, 2, 3, 4]);
        // An order that no chain explains is left as it was.
        let totals = [Some(10), Some(999), Some(10), Some(210), Some(211)];
        let mut order = vec![0, 2, 3, 1, 4];
        order_ties(&mut order, &events, &totals);
        assert_eq!(order, [0, 2, 3, 1, 4]);
    }
}
