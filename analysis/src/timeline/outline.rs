//! A timeline's outline (its curves, without categories) replayed beside the state it starts
//! from, worked out on a second thread.

use std::sync::Arc;

use vramscope_trace_format::{CounterKind, DeviceId, Trace};

use super::Timeline;
use super::categories::PendingCategories;
use super::points::Points;
use crate::replay;

impl Timeline {
    /// The outline of a device's events (curves only) with the state it starts from worked out
    /// on another thread at the same time: the curves are replayed from a stand-in start, `BASE`
    /// bytes of each, and moved onto the real one when it comes. That is exact when no value of
    /// either replay would have been held at zero or at the top (saturated), which is checked;
    /// `None` otherwise (or without a second thread), for the replay from the real start.
    pub(super) fn outline_beside_initial(
        shared: &Arc<Trace>,
        device: DeviceId,
        device_events: &replay::DeviceEvents,
    ) -> Option<Self> {
        const BASE: u64 = 1 << 62;
        let trace: &Trace = shared;
        // Reserved memory read from counters is not moved by the start.
        if trace.counters.iter().any(|c| c.device == device && c.kind == CounterKind::Reserved) {
            return None;
        }
        std::thread::scope(|scope| {
            let initial = std::thread::Builder::new()
                .name("vramscope-start".to_owned())
                .spawn_scoped(scope, || replay::initial_state(trace, device, device_events))
                .ok()?;
            let stand_in = replay::Initial::stand_in(BASE, BASE, BASE);
            let mut t = Self::empty(device, device_events, Some(shared));
            // The lowest and highest of each curve: allocated, requested, reserved.
            let (mut low, mut high) = ([u64::MAX; 3], [0u64; 3]);
            replay::replay_from(trace, device, device_events, &stand_in, |event, point| {
                for (k, v) in
                    [point.allocated_bytes, point.requested_bytes, point.reserved_bytes].into_iter().enumerate()
                {
                    low[k] = low[k].min(v);
                    high[k] = high[k].max(v);
                }
                t.push(event, point);
            });
            let initial = initial.join().ok()?;
            let start = [initial.allocated_bytes(), initial.requested_bytes(), initial.reserved_bytes];
            for k in 0..3 {
                // Not saturated from the stand-in (which never starts at zero or the top), and
                // from the real start every value stays in range: `start + (v - BASE)`.
                let exact = low[k] > 0
                    && high[k] < u64::MAX
                    && start[k].checked_add(low[k]).is_some_and(|lowest| lowest >= BASE)
                    && (high[k] - BASE.min(high[k])).checked_add(start[k]).is_some();
                if !exact {
                    return None;
                }
            }
            // In range, so arithmetic modulo 2^64 gives each value exactly.
            let moved = |k: usize, v: u64| v.wrapping_sub(BASE).wrapping_add(start[k]);
            if let Points::Replayed { block_state, .. } = &mut t.points {
                for (a, q) in block_state.iter_mut() {
                    (*a, *q) = (moved(0, *a), moved(1, *q));
                }
            }
            for change in &mut t.reserved_changes {
                change.1 = moved(2, change.1);
            }
            for r in &mut t.blocks {
                r.allocated_min = moved(0, r.allocated_min);
                r.allocated_max = moved(0, r.allocated_max);
                r.requested_max = moved(1, r.requested_max);
                r.reserved_min = moved(2, r.reserved_min);
                r.reserved_max = moved(2, r.reserved_max);
            }
            t.pending = Some(Arc::new(PendingCategories { device, initial }));
            t.index();
            Some(t)
        })
    }
}
