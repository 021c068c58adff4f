//! The trace: every table of the model in one value.

use super::annotation::Annotation;
use super::counter::CounterSeries;
use super::event::Event;
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
    pub fn devices(&self) -> Vec<i16> {
        let mut devices: Vec<i16> = self.metadata.devices.iter().map(|d| d.device).collect();
        devices.extend(self.segments.iter().map(|s| s.device));
        devices.extend(self.counters.iter().map(|c| c.device));
        devices.extend(self.ooms.iter().map(|o| o.device));
        // Events are the bulk: scan them without collecting every value.
        let mut seen = [false; 1 << 16];
        for event in &self.events {
            seen[event.device as u16 as usize] = true;
        }
        for (index, was_seen) in seen.iter().enumerate() {
            if *was_seen {
                devices.push(index as u16 as i16);
            }
        }
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

    /// Total number of records in the trace's time-ordered tables.
    pub fn record_count(&self) -> usize {
        self.events.len()
            + self.annotations.len()
            + self.ooms.len()
            + self.tags.len()
            + self.counters.iter().map(|c| c.samples.len()).sum::<usize>()
    }
}
