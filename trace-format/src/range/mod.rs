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

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A part of a trace to open.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "by", rename_all = "snake_case")]
pub enum TraceRange {
    /// Nanoseconds after the trace's first event; the end is included.
    Time {
        /// Where it starts (`None`: at the first event).
        from_ns: Option<i64>,
        /// Where it ends (`None`: at the last event).
        to_ns: Option<i64>,
    },
    /// Events by index from 0, in the order the file lists them (a snapshot's trace entries,
    /// device by device); the end is excluded.
    Events {
        /// The first event kept (`None`: from the first).
        from: Option<u64>,
        /// The first event after the range (`None`: to the last).
        to: Option<u64>,
    },
}

/// How [`TraceRange::from_str`] wants its text; said in every message about it.
pub const RANGE_SYNTAX: &str = "give START..END: +2s..+3.5s (time after the first event; ns, us, ms or s), \
                                or #1000000..#2000000 (events by index from 0); either end may be left out";

fn duration_text(ns: i64) -> String {
    const UNITS: [(i64, &str); 3] = [(1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "us")];
    for (scale, unit) in UNITS {
        if ns % scale == 0 {
            return format!("{}{unit}", ns / scale);
        }
    }
    // Exact: as many decimals as the unit has nanoseconds' digits.
    for ((scale, unit), decimals) in UNITS.into_iter().zip([9usize, 6, 3]) {
        if ns.unsigned_abs() >= scale.unsigned_abs() {
            let fraction = format!("{:0decimals$}", (ns % scale).unsigned_abs());
            return format!("{}.{}{unit}", ns / scale, fraction.trim_end_matches('0'));
        }
    }
    format!("{ns}ns")
}

impl fmt::Display for TraceRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Time { from_ns, to_ns } => {
                if let Some(from) = from_ns {
                    write!(f, "+{}", duration_text(from))?;
                }
                f.write_str("..")?;
                if let Some(to) = to_ns {
                    write!(f, "+{}", duration_text(to))?;
                }
            }
            Self::Events { from, to } => {
                if let Some(from) = from {
                    write!(f, "#{from}")?;
                }
                f.write_str("..")?;
                if let Some(to) = to {
                    write!(f, "#{to}")?;
                }
            }
        }
        Ok(())
    }
}

/// One end of a range as written.
enum End {
    Open,
    Time(i64),
    Event(u64),
}

fn parse_end(text: &str) -> Result<End, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(End::Open);
    }
    if let Some(index) = text.strip_prefix('#') {
        let digits: String = index.chars().filter(|&c| c != '_' && c != ',').collect();
        return digits
            .parse::<u64>()
            .map(End::Event)
            .map_err(|_| format!("{text:?} is not an event index (#N, N from 0)"));
    }
    if text.starts_with('-') {
        return Err(format!("{text:?}: a range starts at or after the trace's first event"));
    }
    let duration = text.strip_prefix('+').unwrap_or(text);
    let split = duration.find(|c: char| c.is_alphabetic() || c == 'µ').unwrap_or(duration.len());
    let (number, unit) = duration.split_at(split);
    let scale = match unit {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "" if text.starts_with('+') => 1e9,
        "" => return Err(format!("{text:?} has no unit: write +{text}s for time, or #{text} for an event index")),
        _ => return Err(format!("unknown unit {unit:?} in {text:?}: use ns, us, ms or s")),
    };
    let value: f64 = number.parse().map_err(|_| format!("{text:?} is not a duration (+NUMBER[ns|us|ms|s])"))?;
    let ns = value * scale;
    if !ns.is_finite() || !(0.0..9.2e18).contains(&ns) {
        return Err(format!("{text:?} is not a duration this trace can have"));
    }
    Ok(End::Time(ns as i64))
}

impl FromStr for TraceRange {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let Some((from, to)) = text.split_once("..") else {
            return Err(format!("{text:?} is not a range: {RANGE_SYNTAX}"));
        };
        let range = match (parse_end(from)?, parse_end(to)?) {
            (End::Open, End::Open) => {
                return Err("'..' is the whole trace: leave the range out to open all of it".to_owned());
            }
            (End::Time(from), End::Time(to)) => Self::Time { from_ns: Some(from), to_ns: Some(to) },
            (End::Time(from), End::Open) => Self::Time { from_ns: Some(from), to_ns: None },
            (End::Open, End::Time(to)) => Self::Time { from_ns: None, to_ns: Some(to) },
            (End::Event(from), End::Event(to)) => Self::Events { from: Some(from), to: Some(to) },
            (End::Event(from), End::Open) => Self::Events { from: Some(from), to: None },
            (End::Open, End::Event(to)) => Self::Events { from: None, to: Some(to) },
            _ => {
                return Err(format!("{text:?} mixes a time and an event index: give both ends as times or both as #N"));
            }
        };
        let empty = match range {
            Self::Time { from_ns: Some(from), to_ns: Some(to) } => to < from,
            Self::Events { from, to: Some(to) } => to <= from.unwrap_or(0),
            _ => false,
        };
        if empty {
            return Err(format!("{text:?} ends before it starts"));
        }
        Ok(range)
    }
}

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

    #[test]
    fn ranges_are_read_and_written_back() {
        let cases = [
            ("+2s..+3.5s", "+2s..+3500ms"),
            ("2s..3500ms", "+2s..+3500ms"),
            ("+40ms..", "+40ms.."),
            ("..+1.25s", "..+1250ms"),
            ("#1000..#2,000", "#1000..#2000"),
            ("#5..", "#5.."),
            ("..#1_000_000", "..#1000000"),
            ("+0.5us..+7ns", "+500ns..+7ns"),
        ];
        for (text, shown) in cases {
            let range: Result<TraceRange, String> = text.parse();
            match text {
                "+0.5us..+7ns" => assert!(range.is_err(), "{text} ends before it starts"),
                _ => assert_eq!(range.map(|r| r.to_string()).as_deref(), Ok(shown), "{text}"),
            }
        }
        for bad in ["+2s", "..", "#5..+2s", "2..3", "+2x..", "#a..", "-1s..", "#5..#5", "..#0", "+NaNs..", "+1e30s.."] {
            let range: Result<TraceRange, String> = bad.parse();
            assert!(range.is_err(), "{bad} should be refused");
        }
        assert_eq!(duration_text(1_500), "1.5us");
        assert_eq!(duration_text(1_500_000_001), "1.500000001s");
        assert_eq!(duration_text(999), "999ns");
        // A range read from a file is shown whatever it holds.
        assert_eq!(duration_text(i64::MIN), "-9223372036.854775808s");
    }

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
