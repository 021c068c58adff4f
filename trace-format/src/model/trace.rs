//! The trace: every table of the model in one value.

use super::annotation::Annotation;
use super::counter::CounterSeries;
use rustc_hash::FxHashSet;

use super::event::{Event, EventKind};
use super::ids::{DeviceId, ProcessId};
use super::interner::Interner;
use super::metadata::Metadata;
use super::oom::Oom;
use super::segment::Segment;
use super::tag::Tag;

/// A whole trace: plain data, no behaviour beyond small helpers.
///
/// Invariant kept by importers and the reader: `events` are sorted by `time_ns` (stable, so
/// events at one instant keep their recorded order).
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// Facts about the trace.
    pub metadata: Metadata,
    /// Interned strings, frames, stacks and contexts.
    pub interner: Interner,
    /// Allocator and driver events in time order.
    pub events: Vec<Event>,
    /// The allocator's segments at the end of the trace, when the source recorded them.
    pub segments: Vec<Segment>,
    /// Spans and markers.
    pub annotations: Vec<Annotation>,
    /// Failed allocations.
    pub ooms: Vec<Oom>,
    /// Sampled series.
    pub counters: Vec<CounterSeries>,
    /// Categories of blocks, learnt from hooks.
    pub tags: Vec<Tag>,
}

impl Trace {
    /// Every device index that appears anywhere in the trace, sorted.
    pub fn devices(&self) -> Vec<DeviceId> {
        self.devices_given(&self.event_devices())
    }

    /// The devices that have events, sorted (one pass over the events).
    pub fn event_devices(&self) -> Vec<DeviceId> {
        // Events are the bulk: scan them without collecting every value.
        let mut seen = vec![false; 1 << 16];
        for event in &self.events {
            seen[event.device.slot()] = true;
        }
        let mut devices: Vec<DeviceId> =
            seen.iter().enumerate().filter(|(_, s)| **s).map(|(slot, _)| DeviceId::from_slot(slot)).collect();
        // Slots put the host (-1) last; devices sort it first.
        devices.sort_unstable();
        devices
    }

    /// [`Trace::devices`], given the devices that have events ([`Trace::event_devices`]).
    pub fn devices_given(&self, event_devices: &[DeviceId]) -> Vec<DeviceId> {
        let mut devices: Vec<DeviceId> = self.metadata.devices.iter().map(|d| d.device).collect();
        devices.extend(self.segments.iter().map(|s| s.device));
        devices.extend(self.counters.iter().map(|c| c.device));
        devices.extend(self.ooms.iter().map(|o| o.device));
        devices.extend_from_slice(event_devices);
        devices.sort_unstable();
        devices.dedup();
        devices
    }

    /// Sorts events by time if they are not already (stable: same-time events keep their order).
    pub fn sort_events(&mut self) {
        if !self.events.is_sorted_by_key(|e| e.time_ns) {
            self.events.sort_by_key(|e| e.time_ns);
        }
    }

    /// The part of the trace that belongs to one process (a rank of a distributed run), with its
    /// own id kept and the same interned tables; the metadata keeps that process only.
    pub fn of_process(&self, process: ProcessId) -> Self {
        let mut metadata = self.metadata.clone();
        metadata.processes = self.metadata.processes.get(process.0 as usize).cloned().into_iter().collect();
        let mut part = Self {
            metadata,
            interner: self.interner.clone(),
            events: self.events.iter().filter(|e| e.process == process).copied().collect(),
            segments: self.segments.iter().filter(|s| s.process == process).cloned().collect(),
            annotations: self.annotations.iter().filter(|a| a.process == process).copied().collect(),
            ooms: self.ooms.iter().filter(|o| o.process == process).copied().collect(),
            counters: self.counters.iter().filter(|c| c.process == process).cloned().collect(),
            tags: self.tags.iter().filter(|t| t.process == process).copied().collect(),
        };
        // One process: its id is 0 in the part.
        for e in &mut part.events {
            e.process = ProcessId(0);
        }
        for s in &mut part.segments {
            s.process = ProcessId(0);
        }
        for a in &mut part.annotations {
            a.process = ProcessId(0);
        }
        for o in &mut part.ooms {
            o.process = ProcessId(0);
        }
        for c in &mut part.counters {
            c.process = ProcessId(0);
        }
        for t in &mut part.tags {
            t.process = ProcessId(0);
        }
        part
    }

    /// The instant every time of the trace is said from (`+2.5 s`): its first event, or its first
    /// counter sample when it has no events, or the first event of its source when it is part of
    /// one (a range), so that an instant reads the same in the part as in the whole. 0 when the
    /// trace has nothing timed.
    pub fn origin_ns(&self) -> i64 {
        if let Some(origin) = self.metadata.range.as_ref().and_then(|r| r.origin_ns) {
            return origin;
        }
        if let Some(first) = self.events.first() {
            return first.time_ns;
        }
        self.counters.iter().filter_map(|c| c.samples.first()).map(|s| s.time_ns).min().unwrap_or(0)
    }

    /// Whether `device`'s frees come in two steps (`FreeRequested`, then `FreeCompleted`: PyTorch's
    /// caching allocator), so that allocated memory drops at the request and active memory at the
    /// completion: as the device's metadata says, else whether any of its events is a
    /// `FreeRequested` (a look over the events: [`Trace::settle_free_steps`] saves it).
    pub fn frees_in_two_steps(&self, device: DeviceId) -> bool {
        match self.metadata.devices.iter().find(|d| d.device == device).and_then(|d| d.frees_in_two_steps) {
            Some(two) => two,
            None => self.events.iter().any(|e| e.device == device && e.kind == EventKind::FreeRequested),
        }
    }

    /// Writes down, for every device the metadata lists without saying, whether its frees come in
    /// two steps ([`Trace::frees_in_two_steps`]), so that the analyses need not look again. A
    /// trace's readers call it once the trace is whole.
    pub fn settle_free_steps(&mut self) {
        if self.metadata.devices.iter().all(|d| d.frees_in_two_steps.is_some()) {
            return;
        }
        let mut two_step = FxHashSet::default();
        for e in &self.events {
            if e.kind == EventKind::FreeRequested {
                two_step.insert(e.device);
            }
        }
        for info in &mut self.metadata.devices {
            info.frees_in_two_steps.get_or_insert(two_step.contains(&info.device));
        }
    }

    /// Total number of records in the trace's time-ordered tables.
    pub fn record_count(&self) -> usize {
        self.events.len()
            + self.annotations.len()
            + self.ooms.len()
            + self.tags.len()
            + self.counters.iter().map(|c| c.samples.len()).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use crate::model::counter::{CounterKind, CounterSample, CounterSeries};
    use crate::model::event::{Event, EventKind};
    use crate::model::ids::{DeviceId, ProcessId, StringId};
    use crate::model::metadata::RangeInfo;
    use crate::model::range::TraceRange;

    use super::Trace;

    /// The one time origin: the first event; without events the first counter sample; of a part,
    /// its source's first event; of nothing timed, 0.
    #[test]
    fn every_time_is_said_from_one_origin() {
        let mut trace = Trace::default();
        assert_eq!(trace.origin_ns(), 0);
        let series = |first| CounterSeries {
            kind: CounterKind::Allocated,
            name: StringId(0),
            device: DeviceId(0),
            process: ProcessId(0),
            samples: vec![CounterSample { time_ns: first, value: 1 }, CounterSample { time_ns: first + 10, value: 2 }],
        };
        trace.counters = vec![series(700), series(300)];
        assert_eq!(trace.origin_ns(), 300, "the earliest counter sample, without events");
        trace.events = vec![Event::new(EventKind::Alloc, 500, 0, 1, 8), Event::new(EventKind::Alloc, 900, 0, 2, 8)];
        assert_eq!(trace.origin_ns(), 500, "the first event");
        trace.metadata.range = Some(RangeInfo {
            range: TraceRange::Time { from_ns: Some(400), to_ns: None },
            events_before: 3,
            events_after: 0,
            alive_at_start: 1,
            final_state_dropped: false,
            origin_ns: Some(100),
            alive_since: Vec::new(),
            spans_before: Vec::new(),
        });
        assert_eq!(trace.origin_ns(), 100, "a part's origin is its source's");
    }
}
