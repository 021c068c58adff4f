//! Opening part of a trace: a range of time or of events.
//!
//! A trace too large for the machine's memory, or too long to look at whole, can be opened in
//! part: `+2s..+3.5s` (time after the trace's first event) or `#1000000..#2000000` (events by
//! index, in the order the file lists them). What lies outside the range is not kept, but it is
//! not simply cut off either: every block and segment still alive when the range starts is kept
//! as an allocation at the range's start (with its stack, flagged
//! [`crate::event_flags::BEFORE_RANGE`]), so the memory at every instant of the range is what it was in
//! the whole trace.
//!
//! A snapshot is cut while its pickle is read (a fold over its trace entries), so the memory
//! of opening it follows the range and the blocks alive, not the file; other formats are read
//! whole and then cut ([`apply`]).
//!
//! The fold follows each address through the whole stream: an entry before the range updates
//! the blocks alive there; one inside is kept; one after it is dropped, except that a free of
//! a block the trace never allocated means the block was alive all along (allocated before the
//! trace began), so it is kept as alive at the start too. The source's final state (a
//! snapshot's segments) describes the end of the whole trace: when the range ends earlier it is
//! dropped, and the blocks in it that the trace never touched are kept as alive all along.

pub use crate::model::range::{RANGE_SYNTAX, TraceRange};

mod classify;
mod fold;

pub(crate) use classify::{Classifier, Phase};
pub use fold::apply;
pub(crate) use fold::{Alive, Fold, Foldable, Folded, Key, uncovered};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::event::{Event, EventKind, event_flags};
    use crate::model::ids::DeviceId;
    use crate::model::trace::Trace;

    fn event(kind: EventKind, t: i64, address: u64, size: u64) -> Event {
        Event::new(kind, t, 0, address, size)
    }

    /// The memory at every instant of the range is the whole trace's.
    #[test]
    fn a_cut_trace_keeps_what_was_alive_at_its_start() {
        use EventKind::*;
        let events = vec![
            event(SegmentAlloc, 0, 0x1000, 1 << 20),
            event(Alloc, 10, 0x1000, 512),  // alive at the start, freed inside
            event(Alloc, 20, 0x2000, 1024), // alive throughout
            event(Alloc, 30, 0x3000, 2048), // freed before the start
            event(FreeRequested, 40, 0x3000, 2048),
            event(FreeCompleted, 41, 0x3000, 2048),
            event(FreeRequested, 50, 0x9000, 4096), // from before the trace, freed before the start
            // and waiting for its streams until inside
            event(Alloc, 100, 0x4000, 8192), // inside
            event(FreeRequested, 110, 0x1000, 512),
            event(FreeCompleted, 111, 0x1000, 512),
            event(FreeCompleted, 120, 0x9000, 4096),
            event(Alloc, 200, 0x5000, 16384),       // after
            event(FreeCompleted, 210, 0x7000, 777), // from before the trace, freed after
        ];
        let mut trace = Trace { events, ..Trace::default() };
        apply(&mut trace, "+60ns..+150ns".parse().expect("range")).expect("cut");
        let kinds: Vec<(EventKind, u64, i64, bool)> = trace
            .events
            .iter()
            .map(|e| (e.kind, e.address, e.time_ns, e.flags & event_flags::BEFORE_RANGE != 0))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (SegmentAlloc, 0x1000, 59, true),
                (Alloc, 0x1000, 59, true),
                (Alloc, 0x2000, 59, true),
                (Alloc, 0x9000, 59, true),
                (FreeRequested, 0x9000, 59, true),
                (Alloc, 0x7000, 59, true),
                (Alloc, 0x4000, 100, false),
                (FreeRequested, 0x1000, 110, false),
                (FreeCompleted, 0x1000, 111, false),
                (FreeCompleted, 0x9000, 120, false),
            ]
        );
        let info = trace.metadata.range.expect("range info");
        assert_eq!((info.events_before, info.events_after, info.alive_at_start), (7, 2, 5));
        assert!(info.final_state_dropped);
    }

    #[test]
    fn a_range_of_events_counts_from_zero_and_excludes_its_end() {
        use EventKind::*;
        let events = (0..10).map(|i| event(Alloc, i * 10, 0x1000 * (i as u64 + 1), 512)).collect();
        let mut trace = Trace { events, ..Trace::default() };
        apply(&mut trace, "#3..#5".parse().expect("range")).expect("cut");
        let kept: Vec<(u64, bool)> =
            trace.events.iter().map(|e| (e.address, e.flags & event_flags::BEFORE_RANGE != 0)).collect();
        assert_eq!(kept, vec![(0x1000, true), (0x2000, true), (0x3000, true), (0x4000, false), (0x5000, false)]);
        assert!(trace.events.iter().all(|e| e.time_ns >= 29), "what was alive stands just before the first event kept");
    }

    #[test]
    fn a_time_range_needs_times_and_an_event_range_needs_events() {
        let mut trace = Trace::default();
        trace.counters.push(crate::model::counter::CounterSeries {
            kind: crate::model::counter::CounterKind::DeviceUsed,
            name: crate::model::ids::StringId(0),
            device: DeviceId(0),
            process: crate::model::ids::ProcessId(0),
            samples: (0..5)
                .map(|i| crate::model::counter::CounterSample { time_ns: 1000 + i * 100, value: i })
                .collect(),
        });
        let mut by_events = trace.clone();
        assert!(apply(&mut by_events, "#1..#2".parse().expect("range")).is_err());
        apply(&mut trace, "+150ns..+300ns".parse().expect("range")).expect("cut");
        let samples: Vec<(i64, i64)> = trace.counters[0].samples.iter().map(|s| (s.time_ns, s.value)).collect();
        assert_eq!(samples, vec![(1150, 1), (1200, 2), (1300, 3)]);
    }

    /// What the whole replay counts differently from a plain stack of blocks is kept: a block
    /// allocated over a live one (the old one is never freed), a mapping unmapped in part, and
    /// two processes with the same addresses.
    #[test]
    fn overwritten_blocks_partial_unmaps_and_processes_keep_their_memory() {
        use EventKind::*;
        let mut second = event(Alloc, 5, 0x5000, 256);
        second.process = crate::model::ids::ProcessId(1);
        let mut second_free = event(FreeCompleted, 30, 0x5000, 256);
        second_free.process = crate::model::ids::ProcessId(1);
        let events = vec![
            event(SegmentMap, 0, 0x100_0000, 4 << 20),
            event(Alloc, 1, 0x5000, 512),                // overwritten, never freed
            event(Alloc, 2, 0x5000, 1024),               // freed inside
            second,                                      // another process, same address
            event(SegmentUnmap, 6, 0x100_0000, 2 << 20), // half unmapped before the range
            event(FreeCompleted, 20, 0x5000, 1024),
            second_free,
        ];
        let mut trace = Trace { events, ..Trace::default() };
        trace.ooms.push(crate::model::oom::Oom {
            time_ns: 40,
            device: DeviceId(0),
            process: crate::model::ids::ProcessId(0),
            stream: 0,
            requested_bytes: 1 << 30,
            device_free_bytes: None,
            stack: crate::model::ids::StackId(0),
        });
        apply(&mut trace, "+10ns..".parse().expect("range")).expect("cut");
        let alive: Vec<(EventKind, u64, u64, u32)> = trace
            .events
            .iter()
            .filter(|e| e.flags & event_flags::BEFORE_RANGE != 0)
            .map(|e| (e.kind, e.address, e.size_bytes, e.process.0))
            .collect();
        assert_eq!(
            alive,
            vec![
                (SegmentAlloc, 0x100_0000, 2 << 20, 0),
                (Alloc, 0x5000, 512, 0),
                (Alloc, 0x5000, 1024, 0),
                (Alloc, 0x5000, 256, 1),
            ]
        );
        // The range runs to the end: what follows the last event is in it.
        assert_eq!(trace.ooms.len(), 1);
    }
}
