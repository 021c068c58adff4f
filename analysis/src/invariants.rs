//! What every trace must hold once read, whatever its source: checked on request
//! (`VRAMSCOPE_SELF_CHECK=1`, which the end-to-end tests set for every command they run), so
//! that every file the suite opens is held to them.
//!
//! - Where the source reports the allocator's running totals after each event (a profiler
//!   trace's `Total Allocated`), allocated memory equals them after every event, except where
//!   the trace itself says it cannot ([`TotalsAgreement::above`]).
//! - No peak is below the state the trace ends in (allocated, active and reserved), and no
//!   allocated peak is above the most the totals ever report.
//! - Allocated memory is PyTorch's `memory_allocated()`: blocks freed by the program and waiting
//!   for their streams are active, not allocated, at the end and at the peak alike (the replay's
//!   end agrees with the final segment state on both, where the trace has one).
//!
//! [`TotalsAgreement::above`]: vramscope_trace_format::TotalsAgreement::above

use vramscope_trace_format::{CounterKind, DeviceId, Trace};

use crate::{peak, replay, segments};

/// Everything `trace` breaks, one sentence each (empty: it holds).
pub fn violations(trace: &Trace) -> Vec<String> {
    let mut found = Vec::new();
    for device in trace.devices() {
        let label = trace.metadata.device_label(device);
        let peaks = peak::peaks(trace, device);
        let final_state = segments::final_state(trace, device);
        let end = match &final_state {
            Some(state) => (state.total.allocated_bytes, state.total.reserved_bytes),
            None => (peaks.end.allocated_bytes, peaks.end.reserved_bytes),
        };
        let active_end = match &final_state {
            Some(state) => state.total.allocated_bytes.saturating_add(state.total.awaiting_free_bytes),
            None => peaks.end.active_bytes,
        };
        if peaks.allocated.bytes < end.0 {
            found.push(format!(
                "{label}: the allocated peak ({} B) is below the allocated memory at the end ({} B)",
                peaks.allocated.bytes, end.0
            ));
        }
        if peaks.active.bytes < active_end {
            found.push(format!(
                "{label}: the active peak ({} B) is below the active memory at the end ({active_end} B)",
                peaks.active.bytes
            ));
        }
        if peaks.active.bytes < peaks.allocated.bytes {
            found.push(format!(
                "{label}: the active peak ({} B) is below the allocated peak ({} B)",
                peaks.active.bytes, peaks.allocated.bytes
            ));
        }
        if peaks.reserved.bytes < end.1 {
            found.push(format!(
                "{label}: the reserved peak ({} B) is below the reserved memory at the end ({} B)",
                peaks.reserved.bytes, end.1
            ));
        }
        found.extend(totals_disagree(trace, device, &label, peaks.allocated.bytes));
    }
    found
}

/// Where a device's allocated curve parts from the running totals its source reports.
fn totals_disagree(trace: &Trace, device: DeviceId, label: &str, peak_bytes: u64) -> Option<String> {
    let facts = trace.metadata.devices.iter().find(|d| d.device == device);
    // A running sum of sizes is not a total the allocator reported.
    if facts.is_some_and(|d| d.allocated_before_unknown) {
        return None;
    }
    let totals = trace.counters.iter().find(|c| c.device == device && c.kind == CounterKind::Allocated)?;
    let events = replay::device_events(trace, device);
    if replay::replays_counters(trace, device, &events) || totals.samples.is_empty() {
        return None;
    }
    let above = facts.and_then(|d| d.totals).and_then(|t| t.above);
    let excused = |time_ns: i64| above.is_some_and(|a| (a.from_ns..=a.to_ns).contains(&time_ns));
    let most = totals.samples.iter().map(|s| s.value).max().unwrap_or(0);
    if above.is_none() && i64::try_from(peak_bytes).is_ok_and(|p| p > most) {
        return Some(format!(
            "{label}: the allocated peak ({peak_bytes} B) is above the most the totals report ({most} B)"
        ));
    }
    // The curve after the last event of each instant, against the totals then.
    let mut after: Vec<(i64, u64)> = Vec::with_capacity(events.len());
    replay::replay_from(trace, device, &events, &replay::initial_state(trace, device, &events), |event, p| {
        if event.is_some() {
            match after.last_mut() {
                Some(last) if last.0 == p.time_ns => last.1 = p.allocated_bytes,
                _ => after.push((p.time_ns, p.allocated_bytes)),
            }
        }
    });
    let mut next = 0;
    let mut total = None;
    let (mut differ, mut first) = (0usize, None);
    for &(time_ns, allocated) in &after {
        while let Some(s) = totals.samples.get(next).filter(|s| s.time_ns <= time_ns) {
            total = Some(s.value);
            next += 1;
        }
        let Some(total) = total else { continue };
        if i64::try_from(allocated).ok() != Some(total) && !excused(time_ns) {
            differ += 1;
            first.get_or_insert((time_ns, allocated, total));
        }
    }
    let (time_ns, allocated, total) = first?;
    Some(format!(
        "{label}: allocated memory differs from the source's running totals after {differ} of {} instants, the \
         first at {time_ns} ns ({allocated} B against {total} B)",
        after.len()
    ))
}

#[cfg(test)]
mod tests {
    use vramscope_trace_format::{CounterSample, CounterSeries, DeviceInfo, Event, EventKind, StringId};

    use super::*;

    fn totals(values: &[(i64, i64)]) -> CounterSeries {
        CounterSeries {
            kind: CounterKind::Allocated,
            name: StringId(0),
            device: DeviceId(0),
            process: Default::default(),
            samples: values.iter().map(|&(time_ns, value)| CounterSample { time_ns, value }).collect(),
        }
    }

    #[test]
    fn a_curve_off_the_totals_is_found() {
        let mut trace = Trace {
            events: vec![
                Event::new(EventKind::Alloc, 10, 0, 0x1000, 100),
                Event::new(EventKind::Alloc, 20, 0, 0x2000, 50),
                Event::new(EventKind::FreeCompleted, 30, 0, 0x1000, 100),
            ],
            ..Trace::default()
        };
        trace.metadata.devices = vec![DeviceInfo { device: DeviceId(0), ..DeviceInfo::default() }];
        trace.counters = vec![totals(&[(10, 100), (20, 150), (30, 50)])];
        assert_eq!(violations(&trace), Vec::<String>::new());
        // Memory from before the trace that the totals count and nothing else shows.
        trace.counters = vec![totals(&[(10, 1100), (20, 1150), (30, 1050)])];
        let found = violations(&trace);
        assert!(found.iter().any(|v| v.contains("above") || v.contains("differs")), "{found:?}");
        trace.metadata.devices[0].initial_allocated_bytes = Some(1000);
        assert_eq!(violations(&trace), Vec::<String>::new());
    }
}
