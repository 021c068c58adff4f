//! The high point of each window: one replay into a list of allocated bytes, then each window's
//! highest by a range query (a long run has hundreds of thousands of windows over millions of
//! events; following every open window at every event cost more than the replay).

use vramscope_trace_format::{DeviceId, Trace};

use super::PhaseHigh;
use super::windows::{Window, events_partition_from};
use crate::replay;

/// Points per block of [`RangeMax`]: a query scans at most two partial blocks.
const BLOCK: usize = 64;

/// The first position of the largest value in any range of a list: the highest of each block,
/// and a sparse table over the blocks (the highest of each run of 2^k blocks).
pub(super) struct RangeMax<'a> {
    values: &'a [u64],
    /// `levels[k][b]`: the position of the first largest value in blocks `b .. b + 2^k`.
    levels: Vec<Vec<u32>>,
}

impl<'a> RangeMax<'a> {
    pub(super) fn new(values: &'a [u64]) -> Self {
        let blocks: Vec<u32> =
            values.chunks(BLOCK).enumerate().map(|(b, chunk)| (b * BLOCK + first_max(chunk)) as u32).collect();
        let mut levels = vec![blocks];
        let mut width = 1usize;
        while let Some(below) = levels.last().filter(|l| l.len() > width) {
            let level: Vec<u32> = (0..below.len() - width)
                .map(|b| {
                    let (x, y) = (below.get(b).copied().unwrap_or(0), below.get(b + width).copied().unwrap_or(0));
                    pick(values, x, y)
                })
                .collect();
            levels.push(level);
            width *= 2;
        }
        Self { values, levels }
    }

    /// The first position of the largest value in `from..=to` (`from` when the range is empty
    /// or outside the list).
    pub(super) fn first_max(&self, from: usize, to: usize) -> usize {
        let to = to.min(self.values.len().saturating_sub(1));
        if from >= to {
            return from;
        }
        let (first_block, last_block) = (from / BLOCK, to / BLOCK);
        if last_block <= first_block + 1 {
            return from + self.values.get(from..=to).map_or(0, first_max);
        }
        let head_end = (first_block + 1) * BLOCK;
        let tail_start = last_block * BLOCK;
        let head = from + self.values.get(from..head_end).map_or(0, first_max);
        let tail = tail_start + self.values.get(tail_start..=to).map_or(0, first_max);
        // Blocks strictly between: two runs of 2^k blocks that cover them.
        let (low, high) = (first_block + 1, last_block - 1);
        let k = (usize::BITS - 1 - (high - low + 1).leading_zeros()) as usize;
        let level = self.levels.get(k);
        let cell = |b: usize| level.and_then(|l| l.get(b)).map_or(head as u32, |&p| p);
        let middle = pick(self.values, cell(low), cell(high + 1 - (1 << k)));
        pick(self.values, pick(self.values, head as u32, middle), tail as u32) as usize
    }
}

/// Of two positions, the one with the larger value; the earlier one on a tie.
fn pick(values: &[u64], x: u32, y: u32) -> u32 {
    let (vx, vy) = (values.get(x as usize).copied().unwrap_or(0), values.get(y as usize).copied().unwrap_or(0));
    if vy > vx || (vy == vx && y < x) { y } else { x }
}

/// The first position of the largest value of a non-empty list (0 for an empty one).
fn first_max(values: &[u64]) -> usize {
    let mut best = 0;
    for (k, &v) in values.iter().enumerate() {
        if v > values.get(best).copied().unwrap_or(0) {
            best = k;
        }
    }
    best
}

/// The high point of each window: the most allocated when it opens (before its first event) or
/// after any of its events, first reached when.
pub(super) fn high_points(
    trace: &Trace,
    device: DeviceId,
    events: &replay::DeviceEvents,
    initial: &replay::Initial,
    windows: &[Window],
) -> Vec<PhaseHigh> {
    // Point 0 is the state before the first event, point p + 1 the state after events[p].
    let mut allocated: Vec<u64> = Vec::with_capacity(events.len() + 1);
    let mut at: Vec<(i64, Option<usize>)> = Vec::with_capacity(events.len() + 1);
    replay::replay_from(trace, device, events, initial, |event, point| {
        allocated.push(point.allocated_bytes);
        at.push((point.time_ns, event));
    });
    let highest = RangeMax::new(&allocated);
    let time = |i: usize| trace.events.get(i).map_or(0, |e| e.time_ns);
    // Windows come mostly in order: each is looked for from where the one before opened.
    let mut previous = 0;
    windows
        .iter()
        .map(|w| {
            // A window opens at the first event at or after its first; a window with no event
            // of its own has the state when it opens.
            let opens = events_partition_from(events, previous, |e| (e as usize) < w.first);
            previous = opens;
            let (high_bytes, high_time_ns, high_event) = if opens < events.len() {
                let closes = events_partition_from(events, opens, |e| (e as usize) <= w.last).max(opens);
                let k = highest.first_max(opens, closes);
                let (time_ns, event) = at.get(k).copied().unwrap_or((0, None));
                (allocated.get(k).copied().unwrap_or(0), time_ns, event)
            } else {
                (0, 0, None)
            };
            PhaseHigh {
                kind: w.kind,
                iteration: w.iteration,
                start_ns: time(w.first),
                end_ns: time(w.last),
                first_event: w.first,
                last_event: w.last,
                high_bytes,
                high_time_ns,
                high_event,
                categories: None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use vramscope_trace_format::{Event, EventKind};

    use super::*;

    /// The first position of the largest value, by looking at each.
    fn by_hand(values: &[u64], from: usize, to: usize) -> usize {
        let mut best = from;
        for k in from..=to {
            if values[k] > values[best] {
                best = k;
            }
        }
        best
    }

    #[test]
    fn range_max_is_the_first_largest_of_every_range() {
        // Values with long ties and plateaus, over several blocks and levels.
        let mut state = 7u64;
        let values: Vec<u64> = (0..1000)
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (state >> 59) % 6
            })
            .collect();
        let table = RangeMax::new(&values);
        for from in (0..values.len()).step_by(7) {
            for to in (from..values.len()).step_by(13) {
                assert_eq!(table.first_max(from, to), by_hand(&values, from, to), "{from}..={to}");
            }
        }
        // Past the end: up to the last value.
        assert_eq!(table.first_max(990, 5000), by_hand(&values, 990, 999));
        assert_eq!(RangeMax::new(&[]).first_max(0, 3), 0);
    }

    /// The high points by following every open window at every event of one replay (how they
    /// were found before the range queries): the reference.
    fn followed(
        trace: &Trace,
        events: &replay::DeviceEvents,
        initial: &replay::Initial,
        windows: &[Window],
    ) -> Vec<(u64, i64, Option<usize>)> {
        let mut order: Vec<usize> = (0..windows.len()).collect();
        order.sort_by_key(|&k| windows[k].first);
        let mut highs: Vec<Option<(u64, i64, Option<usize>)>> = vec![None; windows.len()];
        let (mut next_open, mut open, mut previous) = (0usize, Vec::<usize>::new(), None);
        replay::replay_from(trace, DeviceId(0), events, initial, |event, point| {
            let now = (point.allocated_bytes, point.time_ns, event);
            if let Some(i) = event {
                while let Some(&k) = order.get(next_open) {
                    if windows[k].first > i {
                        break;
                    }
                    highs[k] = previous.or(Some(now));
                    open.push(k);
                    next_open += 1;
                }
                open.retain(|&k| {
                    if windows[k].last < i {
                        return false;
                    }
                    if highs[k].is_none_or(|h| now.0 > h.0) {
                        highs[k] = Some(now);
                    }
                    true
                });
            }
            previous = Some(now);
        });
        highs.into_iter().map(|h| h.unwrap_or((0, 0, None))).collect()
    }

    #[test]
    fn high_points_by_range_queries_equal_those_by_following_each_window() {
        let mut state = 11u64;
        let mut next = |n: u64| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) % n
        };
        // Device 0's events among another device's, blocks freed that were allocated before
        // the trace, sizes that repeat (ties in the curve).
        let mut trace = Trace::default();
        let mut live: Vec<(u64, u64)> = (0..20).map(|k| (0x9000_0000 + k * 512, 512 * (1 + k % 3))).collect();
        let mut address = 0x1000u64;
        for t in 0..3000i64 {
            let device = if next(5) == 0 { DeviceId(1) } else { DeviceId(0) };
            let free = !live.is_empty() && next(2) == 0;
            let (kind, at, size) = if free {
                let (at, size) = live.swap_remove(next(live.len() as u64) as usize);
                (EventKind::FreeCompleted, at, size)
            } else {
                address += 4096;
                let size = 512 * (1 + next(4));
                live.push((address, size));
                (EventKind::Alloc, address, size)
            };
            trace.events.push(Event::new(kind, t * 10 + (next(3) as i64), device, at, size));
        }
        let events = replay::device_events(&trace, DeviceId(0));
        let initial = replay::initial_state(&trace, DeviceId(0), &events);
        assert!(!initial.blocks.is_empty());
        // Windows in order and out of it, nested, overlapping, empty, past the last event, and
        // starting at another device's event.
        let mut windows: Vec<Window> = Vec::new();
        let mut first = 0usize;
        while first < 3000 {
            let length = next(40) as usize;
            windows.push(Window { kind: None, iteration: 0, first, last: first + length });
            first += 1 + next(30) as usize;
        }
        for _ in 0..300 {
            let first = next(3100) as usize;
            let last = if next(10) == 0 { first.saturating_sub(1) } else { first + next(2000) as usize };
            windows.push(Window { kind: None, iteration: 0, first, last });
        }
        let expected = followed(&trace, &events, &initial, &windows);
        let found: Vec<(u64, i64, Option<usize>)> = high_points(&trace, DeviceId(0), &events, &initial, &windows)
            .iter()
            .map(|h| (h.high_bytes, h.high_time_ns, h.high_event))
            .collect();
        for (k, (e, f)) in expected.iter().zip(&found).enumerate() {
            assert_eq!(e, f, "window {k}: {:?}", windows[k]);
        }
        assert_eq!(expected.len(), found.len());
    }
}
