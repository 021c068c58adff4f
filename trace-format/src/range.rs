//! Opening part of a trace: a range of time or of events.
//!
//! A trace too large for the machine's memory, or too long to look at whole, can be opened in
//! part: `+2s..+3.5s` (time after the trace's first event) or `#1000000..#2000000` (events by
//! index, in the order the file lists them). What lies outside the range is not kept, but it is
//! not simply cut off either: every block and segment still alive when the range starts is kept
//! as an allocation at the range's start (with its stack, flagged
//! [`event_flags::BEFORE_RANGE`]), so the memory at every instant of the range is what it was in
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

use rustc_hash::{FxHashMap, FxHashSet};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::model::event::{Event, EventKind, event_flags};
use crate::model::ids::DeviceId;
use crate::model::metadata::RangeInfo;
use crate::model::segment::BlockState;
use crate::model::trace::Trace;

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

fn parse_end(text: &str) -> std::result::Result<End, String> {
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

    fn from_str(text: &str) -> std::result::Result<Self, String> {
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

/// Where an event lies relative to the range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    Before,
    In,
    After,
}

/// Places the events of a stream, in the stream's order, relative to a range.
#[derive(Debug)]
pub(crate) struct Classifier {
    range: TraceRange,
    index: u64,
    first_ns: Option<i64>,
    last_ns: Option<i64>,
    /// The time of the first event kept, and of the last event seen before the range.
    first_in_ns: Option<i64>,
    last_before_ns: Option<i64>,
    last_in_ns: Option<i64>,
    /// The time of the first event after the range.
    first_after_ns: Option<i64>,
}

impl Classifier {
    pub(crate) fn new(range: TraceRange) -> Self {
        Self {
            range,
            index: 0,
            first_ns: None,
            last_ns: None,
            first_in_ns: None,
            last_before_ns: None,
            last_in_ns: None,
            first_after_ns: None,
        }
    }

    /// The range it places events in.
    pub(crate) fn range(&self) -> TraceRange {
        self.range
    }

    /// Where the next event of the stream lies; an event without a time has the last one seen.
    pub(crate) fn phase(&mut self, time_ns: Option<i64>) -> Phase {
        let index = self.index;
        self.index += 1;
        if time_ns.is_some() {
            self.last_ns = time_ns;
        }
        let time = self.last_ns;
        if let Some(t) = time {
            self.first_ns.get_or_insert(t);
        }
        let phase = match self.range {
            TraceRange::Events { from, to } => {
                if from.is_some_and(|f| index < f) {
                    Phase::Before
                } else if to.is_some_and(|t| index >= t) {
                    Phase::After
                } else {
                    Phase::In
                }
            }
            TraceRange::Time { from_ns, to_ns } => match (time, self.first_ns) {
                (Some(t), Some(first)) => {
                    let after_first = t.saturating_sub(first);
                    if from_ns.is_some_and(|f| after_first < f) {
                        Phase::Before
                    } else if to_ns.is_some_and(|e| after_first > e) {
                        Phase::After
                    } else {
                        Phase::In
                    }
                }
                // Nothing timed yet: [`Classifier::check`] refuses a time range over it.
                _ => Phase::In,
            },
        };
        match phase {
            Phase::Before => self.last_before_ns = time.or(self.last_before_ns),
            Phase::In => {
                if self.first_in_ns.is_none() {
                    self.first_in_ns = time;
                }
                self.last_in_ns = time.or(self.last_in_ns);
            }
            Phase::After => {
                if self.first_after_ns.is_none() {
                    self.first_after_ns = time;
                }
            }
        }
        phase
    }

    /// Refuses a time range over a stream without times.
    pub(crate) fn check(&self) -> Result<()> {
        if matches!(self.range, TraceRange::Time { .. }) && self.first_ns.is_none() && self.index > 0 {
            return Err(Error::Structure(format!(
                "this trace records no times, so a time range ({}) cannot be found in it: open a range of \
                 events instead (#N..#M)",
                self.range
            )));
        }
        Ok(())
    }

    /// When the range starts: its start when it names one, else its first event's time (or, if
    /// it kept none, the last time before it).
    pub(crate) fn start_ns(&self) -> Option<i64> {
        match self.range {
            TraceRange::Time { from_ns: Some(from), .. } => self.first_ns.map(|first| first.saturating_add(from)),
            _ => self.first_in_ns.or(self.last_before_ns),
        }
    }

    /// When the range ends, where the trace goes on past it (`cut`): its end when it names one,
    /// else just before the first event after it. `None`: the range runs to the trace's end.
    pub(crate) fn end_ns(&self, cut: bool) -> Option<i64> {
        if !cut {
            return None;
        }
        match self.range {
            TraceRange::Time { to_ns: Some(to), .. } => self.first_ns.map(|first| first.saturating_add(to)),
            _ => self.first_after_ns.map(|t| t.saturating_sub(1)).or(self.last_in_ns).or_else(|| self.start_ns()),
        }
    }

    /// Whether any event of the stream had a time.
    pub(crate) fn timed(&self) -> bool {
        self.first_ns.is_some()
    }
}

/// What a fold follows: a process, a device and an address.
pub(crate) type Key = (u32, i16, u64);

/// What the fold needs of an event or trace entry.
pub(crate) trait Foldable: Copy {
    /// Its kind, if it is a block or segment event (OOMs and markers are `None`).
    fn event_kind(&self) -> Option<EventKind>;
    /// The process, device and address it is about.
    fn key(&self) -> Key;
    /// Its size.
    fn size(&self) -> u64;
    /// The same with another size (a mapping partly unmapped before the range).
    fn with_size(self, size: u64) -> Self;
}

impl Foldable for Event {
    fn event_kind(&self) -> Option<EventKind> {
        Some(self.kind)
    }
    fn key(&self) -> Key {
        (self.process.0, self.device.0, self.address)
    }
    fn size(&self) -> u64 {
        self.size_bytes
    }
    fn with_size(self, size: u64) -> Self {
        Self { size_bytes: size, requested_bytes: size, ..self }
    }
}

/// What the fold knows of an address.
#[derive(Clone, Copy, Debug)]
enum Slot<T> {
    /// Alive at the range's start: allocated before it (or, `from_free`, known alive only from
    /// a free before it, so allocated before the trace), `size` bytes of it still (a mapping can
    /// be unmapped in part).
    Before { order: u64, item: T, from_free: bool, size: u64 },
    /// Allocated (or freed, for a block from before the trace) inside the range or after it.
    Later { size: u64 },
}

impl<T: Foldable> Slot<T> {
    /// What stands for it at the range's start, if it was alive then.
    fn alive(self) -> Option<Alive<T>> {
        match self {
            Self::Before { order, item, from_free, size } => {
                let item = if size == item.size() { item } else { item.with_size(size) };
                Some(Alive { order, item, from_free })
            }
            Self::Later { .. } => None,
        }
    }

    fn size(&self) -> u64 {
        match *self {
            Self::Before { size, .. } | Self::Later { size } => size,
        }
    }
}

/// A block or segment alive when the range starts.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Alive<T> {
    /// Its event's place in the stream (for a block from before the trace, its free's).
    pub(crate) order: u64,
    /// The event that allocated it, or the free that showed it existed.
    pub(crate) item: T,
    /// Whether `item` is a free: its stack is the free's, not the allocation's.
    pub(crate) from_free: bool,
}

/// The state of a stream folded around a range.
#[derive(Debug)]
pub(crate) struct Fold<T> {
    blocks: FxHashMap<Key, Slot<T>>,
    segments: FxHashMap<Key, Slot<T>>,
    alive: Vec<Alive<T>>,
    /// Addresses of blocks an event after the range is about.
    touched_after: FxHashSet<Key>,
    /// Events before and after the range, not kept.
    pub(crate) before: u64,
    pub(crate) after: u64,
}

/// What is left once the stream has been folded.
pub(crate) struct Folded<T> {
    /// Blocks and segments alive at the range's start, in the order they were allocated.
    pub(crate) alive: Vec<Alive<T>>,
    /// Blocks alive at the end of the whole stream.
    pub(crate) blocks_at_end: FxHashSet<Key>,
    /// Addresses of blocks an event after the range is about: a block alive at the end of the
    /// range and not among them is the one the final state holds there.
    pub(crate) touched_after: FxHashSet<Key>,
    /// Segments (and mappings) alive at the end of the whole stream, with their sizes.
    pub(crate) segments_at_end: Vec<(Key, u64)>,
    pub(crate) before: u64,
    pub(crate) after: u64,
}

fn is_segment(kind: EventKind) -> bool {
    matches!(kind, EventKind::SegmentAlloc | EventKind::SegmentFree | EventKind::SegmentMap | EventKind::SegmentUnmap)
}

fn opens(kind: EventKind) -> bool {
    matches!(kind, EventKind::Alloc | EventKind::SegmentAlloc | EventKind::SegmentMap)
}

fn closes(kind: EventKind) -> bool {
    matches!(kind, EventKind::FreeCompleted | EventKind::SegmentFree | EventKind::SegmentUnmap)
}

impl<T: Foldable> Fold<T> {
    pub(crate) fn new() -> Self {
        Self {
            blocks: FxHashMap::default(),
            segments: FxHashMap::default(),
            alive: Vec::new(),
            touched_after: FxHashSet::default(),
            before: 0,
            after: 0,
        }
    }

    /// Takes the next event of the stream (its place `order`, where it lies `phase`); returns
    /// whether it is kept.
    pub(crate) fn take(&mut self, phase: Phase, order: u64, item: T) -> bool {
        match phase {
            Phase::Before => self.before += 1,
            Phase::After => self.after += 1,
            Phase::In => {}
        }
        let Some(kind) = item.event_kind() else { return phase == Phase::In };
        let segment = is_segment(kind);
        let map = if segment { &mut self.segments } else { &mut self.blocks };
        let key = item.key();
        if phase == Phase::Before {
            if opens(kind) {
                // What was at the address is never freed now (a free pairs with the newest): it
                // stays alive, at the range's start too.
                let new = Slot::Before { order, item, from_free: false, size: item.size() };
                if let Some(old) = map.insert(key, new).and_then(Slot::alive) {
                    self.alive.push(old);
                }
            } else if closes(kind) {
                match map.get_mut(&key) {
                    // A mapping unmapped in part keeps the rest.
                    Some(Slot::Before { size, .. }) if segment && item.size() < *size => *size -= item.size(),
                    _ => {
                        map.remove(&key);
                    }
                }
            } else {
                // Freed but still allocated until the free completes; absent, it was allocated
                // before the trace.
                map.entry(key).or_insert(Slot::Before { order, item, from_free: true, size: item.size() });
            }
            return false;
        }
        if phase == Phase::After && !segment {
            self.touched_after.insert(key);
        }
        // Inside the range or after it: an address alive at the start is kept for the start,
        // whatever happens to it now.
        if let Some(slot) = map.get_mut(&key)
            && let Some(alive) = slot.alive()
        {
            *slot = Slot::Later { size: alive.item.size() };
            self.alive.push(alive);
        }
        let present = map.contains_key(&key);
        if opens(kind) {
            map.insert(key, Slot::Later { size: item.size() });
        } else if closes(kind) {
            if map.remove(&key).is_none() && phase == Phase::After {
                // Freed after the range, never allocated: alive before the trace, so all along.
                self.alive.push(Alive { order, item, from_free: true });
            }
        } else if !present {
            if phase == Phase::After {
                self.alive.push(Alive { order, item, from_free: true });
            }
            map.insert(key, Slot::Later { size: item.size() });
        }
        phase == Phase::In
    }

    /// What the fold found, once the whole stream has been taken.
    pub(crate) fn finish(mut self) -> Folded<T> {
        let mut blocks_at_end = FxHashSet::default();
        let mut segments_at_end = Vec::new();
        for (key, slot) in self.blocks {
            blocks_at_end.insert(key);
            self.alive.extend(slot.alive());
        }
        for (key, slot) in self.segments {
            segments_at_end.push((key, slot.size()));
            self.alive.extend(slot.alive());
        }
        segments_at_end.sort_unstable();
        self.alive.sort_by_key(|a| a.order);
        Folded {
            alive: self.alive,
            blocks_at_end,
            touched_after: self.touched_after,
            segments_at_end,
            before: self.before,
            after: self.after,
        }
    }
}

/// The bytes of a final segment that no mapping alive at the end covers: reserved before the
/// trace and never released. Returns where to put it (an address no mapping uses) and its size.
pub(crate) fn uncovered(
    segments_at_end: &[(Key, u64)],
    owner: (u32, i16),
    address: u64,
    size: u64,
) -> Option<(u64, u64)> {
    let (process, device) = owner;
    let end = address.saturating_add(size);
    let first = segments_at_end.partition_point(|&(k, _)| k < (process, device, address));
    let inside =
        segments_at_end.get(first..).unwrap_or_default().iter().take_while(|&&(k, _)| k < (process, device, end));
    let mut covered = 0u64;
    let mut at_start = false;
    for &((_, _, a), s) in inside {
        covered = covered.saturating_add(s);
        at_start |= a == address;
    }
    let left = size.saturating_sub(covered);
    (left > 0).then(|| (if at_start { end - left } else { address }, left))
}

/// The event that stands for a block or segment alive at the range's start.
fn at_start(alive: &Alive<Event>, time_ns: i64) -> Event {
    let mut event = alive.item;
    event.kind = match event.kind {
        k if is_segment(k) => EventKind::SegmentAlloc,
        _ => EventKind::Alloc,
    };
    if alive.from_free {
        event.stack = crate::model::ids::StackId(0);
        event.context = crate::model::ids::ContextId(0);
    }
    event.time_ns = time_ns;
    event.flags |= event_flags::BEFORE_RANGE;
    event
}

/// Cuts a trace read whole to a range: its events, and everything else in time with them.
///
/// Blocks and segments alive at the range's start become allocations at its start; tags learnt
/// before it for those blocks are kept at its start; counters keep their value at the start;
/// spans are clipped; OOMs and markers outside it go. A running total the source reported for
/// the trace's start is moved to the range's. The source's final state goes when the range ends
/// before the trace.
pub fn apply(trace: &mut Trace, range: TraceRange) -> Result<()> {
    let mut classifier = Classifier::new(range);
    let mut fold: Fold<Event> = Fold::new();
    let events = std::mem::take(&mut trace.events);
    let mut kept = Vec::new();
    // Per device: bytes allocated (+) and freed (-) before the range, for running totals.
    let mut net_before: FxHashMap<DeviceId, i128> = FxHashMap::default();
    for (order, event) in events.into_iter().enumerate() {
        let phase = classifier.phase(Some(event.time_ns));
        if phase == Phase::Before {
            let sign = match event.kind {
                EventKind::Alloc => 1,
                EventKind::FreeCompleted => -1,
                _ => 0,
            };
            *net_before.entry(event.device).or_default() += sign * i128::from(event.size_bytes);
        }
        if fold.take(phase, order as u64, event) {
            kept.push(event);
        }
    }
    // A trace without events (a memory timeline) has only its counters' times.
    let counters_only = kept.is_empty() && fold.before == 0 && fold.after == 0;
    if counters_only {
        if matches!(range, TraceRange::Events { .. }) {
            return Err(Error::Structure(format!(
                "this trace has no allocator events to count ({range}): open a range of time instead (+A..+B)"
            )));
        }
        let first = trace.counters.iter().filter_map(|c| c.samples.first()).map(|s| s.time_ns).min();
        if let Some(first) = first {
            classifier.phase(Some(first));
        }
    }
    classifier.check()?;
    let folded = fold.finish();
    let cut = folded.after > 0;
    let start_ns = classifier.start_ns().unwrap_or(0);
    let end_ns = match (counters_only, range) {
        (true, TraceRange::Time { to_ns: Some(to), .. }) => start_ns.max(
            trace
                .counters
                .iter()
                .filter_map(|c| c.samples.first())
                .map(|s| s.time_ns)
                .min()
                .unwrap_or(0)
                .saturating_add(to),
        ),
        (true, _) => i64::MAX,
        _ => classifier.end_ns(cut).unwrap_or(i64::MAX),
    };
    // What stands for the blocks alive at the start comes just before it: never at the time of an
    // allocation inside the range, which the attribution tells apart by its address and time.
    let before_start = start_ns.saturating_sub(1);

    let mut synthetic: Vec<Event> = folded.alive.iter().map(|a| at_start(a, before_start)).collect();
    if cut {
        // The final state is the trace's end, not the range's: what in it the trace never
        // touched was alive all along.
        for segment in &trace.segments {
            for block in segment.blocks.iter().filter(|b| b.state != BlockState::Inactive) {
                if !folded.blocks_at_end.contains(&(segment.process.0, segment.device.0, block.address)) {
                    let mut event =
                        Event::new(EventKind::Alloc, before_start, segment.device, block.address, block.size_bytes);
                    event.requested_bytes = block.requested_bytes;
                    event.stack = block.stack;
                    event.stream = segment.stream;
                    event.process = segment.process;
                    event.flags = event_flags::BEFORE_RANGE;
                    synthetic.push(event);
                }
            }
            let owner = (segment.process.0, segment.device.0);
            if let Some((address, size)) =
                uncovered(&folded.segments_at_end, owner, segment.address, segment.size_bytes)
            {
                let mut event = Event::new(EventKind::SegmentAlloc, before_start, segment.device, address, size);
                event.process = segment.process;
                event.flags = event_flags::BEFORE_RANGE;
                synthetic.push(event);
            }
        }
        trace.segments.clear();
    }
    // Running totals reported for the trace's start move to the range's start, less what the
    // allocations at the start now show.
    for info in &mut trace.metadata.devices {
        if let Some(initial) = info.initial_allocated_bytes {
            let at_start = i128::from(initial) + net_before.get(&info.device).copied().unwrap_or(0);
            let shown: i128 = synthetic
                .iter()
                .filter(|e| e.device == info.device && e.kind == EventKind::Alloc)
                .map(|e| i128::from(e.size_bytes))
                .sum();
            info.initial_allocated_bytes = Some(u64::try_from((at_start - shown).max(0)).unwrap_or(0));
        }
    }
    let alive_at_start = synthetic.len() as u64;
    synthetic.extend(kept);
    trace.events = synthetic;
    trace.sort_events();

    // Tags learnt before the range for blocks alive at its start are kept at the start.
    let alive_since: FxHashMap<Key, i64> =
        folded.alive.iter().filter(|a| !a.from_free).map(|a| (a.item.key(), a.item.time_ns)).collect();
    trace.tags.retain_mut(|tag| {
        if tag.time_ns > end_ns {
            return false;
        }
        if tag.time_ns >= start_ns {
            return true;
        }
        match alive_since.get(&(tag.process.0, tag.device.0, tag.address)) {
            Some(&since) if tag.time_ns >= since => {
                tag.time_ns = start_ns;
                true
            }
            _ => false,
        }
    });
    trace.annotations.retain_mut(|a| {
        if a.end_ns < start_ns || a.start_ns > end_ns {
            return false;
        }
        a.start_ns = a.start_ns.max(start_ns);
        a.end_ns = a.end_ns.min(end_ns).max(a.start_ns);
        true
    });
    trace.ooms.retain(|o| (start_ns..=end_ns).contains(&o.time_ns));
    for series in &mut trace.counters {
        let first_in = series.samples.partition_point(|s| s.time_ns < start_ns);
        let last = series.samples.partition_point(|s| s.time_ns <= end_ns);
        let held = first_in.checked_sub(1).and_then(|i| series.samples.get(i)).copied();
        let mut samples: Vec<_> = held
            .map(|mut s| {
                s.time_ns = start_ns;
                s
            })
            .into_iter()
            .collect();
        samples.extend(series.samples.get(first_in..last.max(first_in)).unwrap_or_default().iter().copied());
        series.samples = samples;
    }
    trace.metadata.range = Some(RangeInfo {
        range,
        events_before: folded.before,
        events_after: folded.after,
        alive_at_start,
        final_state_dropped: cut,
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
            let range: std::result::Result<TraceRange, String> = text.parse();
            match text {
                "+0.5us..+7ns" => assert!(range.is_err(), "{text} ends before it starts"),
                _ => assert_eq!(range.map(|r| r.to_string()).as_deref(), Ok(shown), "{text}"),
            }
        }
        for bad in ["+2s", "..", "#5..+2s", "2..3", "+2x..", "#a..", "-1s..", "#5..#5", "..#0", "+NaNs..", "+1e30s.."] {
            let range: std::result::Result<TraceRange, String> = bad.parse();
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
            event(FreeRequested, 50, 0x9000, 4096), // from before the trace, freed inside
            event(Alloc, 100, 0x4000, 8192),        // inside
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
