//! What a trace cannot show: a snapshot taken without allocation history, a profiler trace that
//! cannot see memory from before it began. Found here once for `info` and the app, which word it.

use vramscope_trace_format::{DeviceId, RangeInfo, SourceFormat, TotalsAgreement, Trace, Unrecorded};

/// Something the trace cannot show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caveat {
    /// A snapshot without allocation history on any device: its state when taken is its only
    /// instant, and every peak is that state.
    NoHistory,
    /// These devices of a snapshot recorded no history (the others did).
    NoHistoryOn(Vec<DeviceId>),
    /// On these devices memory allocated before the profiler started is not seen: the trace's
    /// events carry only sizes, so the curve is their running sum.
    UnseenBeforeStart(Vec<DeviceId>),
    /// The trace is a range of its source: what came before is folded into what was alive at
    /// its start, what came after is left out.
    Range(RangeInfo),
    /// Stretches of a recording in which a process's tensor allocations were not seen.
    Unrecorded(Vec<Unrecorded>),
    /// On these devices the events alone do not add up to the running totals the source
    /// reports after each: what was done about it, and where the curve still differs.
    TotalsDiffer(Vec<(DeviceId, TotalsAgreement)>),
    /// Recorded inside the program (`vramscope.record()`), from PyTorch's allocator alone: memory
    /// outside it is not seen, nor when what was alive before recording began was allocated.
    InProcess,
}

/// What `trace` cannot show.
pub fn caveats(trace: &Trace) -> Vec<Caveat> {
    caveats_given(trace, &trace.event_devices())
}

/// `caveats`, given the devices that have events ([`Trace::event_devices`]).
pub fn caveats_given(trace: &Trace, event_devices: &[DeviceId]) -> Vec<Caveat> {
    let mut notes = Vec::new();
    let devices = trace.devices_given(event_devices);
    if trace.metadata.source_format == SourceFormat::PytorchSnapshot {
        let without: Vec<DeviceId> =
            devices.iter().copied().filter(|d| event_devices.binary_search(d).is_err()).collect();
        if !without.is_empty() && without.len() == devices.len() {
            notes.push(Caveat::NoHistory);
        } else if !without.is_empty() {
            notes.push(Caveat::NoHistoryOn(without));
        }
    }
    let unseen: Vec<DeviceId> =
        trace.metadata.devices.iter().filter(|d| d.allocated_before_unknown).map(|d| d.device).collect();
    if !unseen.is_empty() {
        notes.push(Caveat::UnseenBeforeStart(unseen));
    }
    if let Some(range) = &trace.metadata.range {
        // What it says of the part, without the part's lists of what came before it.
        notes.push(Caveat::Range(RangeInfo { alive_since: Vec::new(), spans_before: Vec::new(), ..*range }));
    }
    let differ: Vec<(DeviceId, TotalsAgreement)> =
        trace.metadata.devices.iter().filter_map(|d| Some((d.device, d.totals?))).collect();
    if !differ.is_empty() {
        notes.push(Caveat::TotalsDiffer(differ));
    }
    if !trace.metadata.unrecorded.is_empty() {
        notes.push(Caveat::Unrecorded(trace.metadata.unrecorded.clone()));
    }
    if trace.metadata.processes.iter().any(|p| p.in_process) {
        notes.push(Caveat::InProcess);
    }
    notes
}

#[cfg(test)]
mod tests {
    use vramscope_trace_format::{Block, BlockState, DeviceInfo, Event, EventKind, Segment};

    use super::*;

    fn segment(device: DeviceId) -> Segment {
        Segment::new(device, 0x1000, 2 << 20, vec![Block::new(0x1000, 2 << 20, 100, BlockState::ActiveAllocated)])
    }

    #[test]
    fn a_snapshot_without_history_is_found_per_device() {
        let mut trace = Trace::default();
        trace.metadata.source_format = SourceFormat::PytorchSnapshot;
        trace.segments = vec![segment(DeviceId(0)), segment(DeviceId(1))];
        assert_eq!(caveats(&trace), [Caveat::NoHistory]);
        // One device with history, one without: only that one is named.
        trace.events.push(Event::new(EventKind::Alloc, 5, 1, 0x9000, 512));
        assert_eq!(caveats(&trace), [Caveat::NoHistoryOn(vec![DeviceId(0)])]);
        trace.events.push(Event::new(EventKind::Alloc, 6, 0, 0x9000, 512));
        assert!(caveats(&trace).is_empty());
    }

    #[test]
    fn a_running_sum_is_found() {
        let mut trace = Trace::default();
        trace.metadata.source_format = SourceFormat::ChromeTrace;
        trace.metadata.devices = vec![DeviceInfo {
            device: DeviceId(2),
            kind: Some("hip".to_owned()),
            allocated_before_unknown: true,
            ..DeviceInfo::default()
        }];
        assert_eq!(caveats(&trace), [Caveat::UnseenBeforeStart(vec![DeviceId(2)])]);
    }
}
