//! The fold: what is alive when a range starts, kept as allocations there; the events inside
//! it; the final state when the range runs to the trace's end. [`apply`] cuts a trace read whole.

use rustc_hash::{FxHashMap, FxHashSet};

use super::{Classifier, Phase, TraceRange};
use crate::error::{Error, Result};
use crate::model::annotation::AnnotationKind;
use crate::model::event::{Event, EventKind, event_flags};
use crate::model::ids::DeviceId;
use crate::model::metadata::{AliveSince, RangeInfo, SpanBefore};
use crate::model::segment::BlockState;
use crate::model::trace::Trace;

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
        Self { size_bytes: size, slack_bytes: 0, ..self }
    }
}

/// What the fold knows of an address.
#[derive(Clone, Copy, Debug)]
enum Slot<T> {
    /// Alive at the range's start: allocated before it (or, `from_free`, known alive only from
    /// a free before it, so allocated before the trace), `size` bytes of it still (a mapping can
    /// be unmapped in part); `requested`: the program freed it before the range and it waits for
    /// its streams there (a two-step free not completed yet).
    Before { order: u64, item: T, from_free: bool, size: u64, requested: bool },
    /// Allocated (or freed, for a block from before the trace) inside the range or after it.
    Later { size: u64 },
}

impl<T: Foldable> Slot<T> {
    /// What stands for it at the range's start, if it was alive then.
    fn alive(self) -> Option<Alive<T>> {
        match self {
            Self::Before { order, item, from_free, size, requested } => {
                let item = if size == item.size() { item } else { item.with_size(size) };
                Some(Alive { order, item, from_free, requested })
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
    /// Whether the program freed it before the range's start and it waits for its streams
    /// there: it stands for an allocation and the free's request, both before the start.
    pub(crate) requested: bool,
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
                let new = Slot::Before { order, item, from_free: false, size: item.size(), requested: false };
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
                // Freed by the program, waiting for its streams until the free completes;
                // absent, it was allocated before the trace.
                let slot = map.entry(key).or_insert(Slot::Before {
                    order,
                    item,
                    from_free: true,
                    size: item.size(),
                    requested: true,
                });
                if let Slot::Before { requested, .. } = slot {
                    *requested = true;
                }
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
                self.alive.push(Alive { order, item, from_free: true, requested: false });
            }
        } else if !present {
            if phase == Phase::After {
                self.alive.push(Alive { order, item, from_free: true, requested: false });
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

/// The events that stand for what was alive at a range's start (at `time_ns`, just before it):
/// the fold's, and, when the range ends before the trace (`cut`), the final state's blocks and
/// segments the trace never touched, whose final state then goes.
fn at_range_start(trace: &mut Trace, folded: &Folded<Event>, time_ns: i64, cut: bool) -> Vec<Event> {
    let mut synthetic: Vec<Event> = Vec::with_capacity(folded.alive.len());
    for alive in &folded.alive {
        let event = at_start(alive, time_ns);
        synthetic.push(event);
        // Freed by the program before the start and waiting for its streams there: allocated
        // no longer, active still (its free completes inside the range or later).
        if alive.requested && event.kind == EventKind::Alloc {
            synthetic.push(Event { kind: EventKind::FreeRequested, ..event });
        }
    }
    if cut {
        // The final state is the trace's end, not the range's: what in it the trace never
        // touched was alive all along.
        for segment in &trace.segments {
            for block in segment.blocks.iter().filter(|b| b.state != BlockState::Inactive) {
                if !folded.blocks_at_end.contains(&(segment.process.0, segment.device.0, block.address)) {
                    let mut event =
                        Event::new(EventKind::Alloc, time_ns, segment.device, block.address, block.size_bytes);
                    event.set_requested_bytes(block.requested_bytes);
                    event.stack = block.stack;
                    event.stream = segment.stream.into();
                    event.process = segment.process;
                    event.flags = event_flags::BEFORE_RANGE;
                    synthetic.push(event);
                    // Freed by the program, waiting for its streams all along.
                    if block.state == BlockState::ActivePendingFree {
                        synthetic.push(Event { kind: EventKind::FreeRequested, ..event });
                    }
                }
            }
            let owner = (segment.process.0, segment.device.0);
            if let Some((address, size)) =
                uncovered(&folded.segments_at_end, owner, segment.address, segment.size_bytes)
            {
                let mut event = Event::new(EventKind::SegmentAlloc, time_ns, segment.device, address, size);
                event.process = segment.process;
                event.flags = event_flags::BEFORE_RANGE;
                synthetic.push(event);
            }
        }
        trace.segments.clear();
    }
    synthetic
}

/// Cuts a trace read whole to a range: its events, and everything else in time with them.
///
/// Blocks and segments alive at the range's start become allocations at its start; tags learnt
/// before it for those blocks are kept at its start; counters keep their value at the start;
/// spans and stretches not recorded are clipped; OOMs and markers outside it go. A running
/// total the source reported for the trace's start is moved to the range's. The source's final
/// state goes when the range ends before the trace.
pub fn apply(trace: &mut Trace, range: TraceRange) -> Result<()> {
    // A part cut again counts from its source's first event, as its times are said.
    let mut classifier = Classifier::with_origin(range, trace.metadata.range.as_ref().and_then(|r| r.origin_ns));
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

    let mut synthetic = at_range_start(trace, &folded, before_start, cut);
    let (allocated_at, spans_before) = context_before(trace, &folded, start_ns);
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
    // Blocks and segments: a request standing beside its allocation is not one more.
    let alive_at_start = synthetic.iter().filter(|e| e.kind != EventKind::FreeRequested).count() as u64;
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
    // Stretches a recording did not see: those that overlap the range, clipped to it.
    trace.metadata.unrecorded.retain_mut(|g| {
        if g.end_ns < start_ns || g.begin_ns > end_ns {
            return false;
        }
        g.begin_ns = g.begin_ns.max(start_ns);
        g.end_ns = g.end_ns.min(end_ns).max(g.begin_ns);
        true
    });
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
        origin_ns: classifier.origin_ns(),
        alive_since: allocated_at,
        spans_before,
    });
    Ok(())
}

/// When the blocks alive at a range's start (`start_ns`) were allocated in the source, and the
/// source's phase and module spans before the range that the untagged ones among them need: the
/// phase each was allocated in and the phases after it up to the second forward (what decides
/// an activation from a workspace), the modules each was allocated in
/// ([`RangeInfo::alive_since`], [`RangeInfo::spans_before`]). A part cut again keeps what the
/// first cut knew of the blocks it showed allocated at its own start.
pub(crate) fn context_before(
    trace: &Trace,
    folded: &Folded<Event>,
    start_ns: i64,
) -> (Vec<AliveSince>, Vec<SpanBefore>) {
    let earlier = trace.metadata.range.as_ref();
    let known: FxHashMap<Key, i64> = earlier
        .map(|r| r.alive_since.iter().map(|a| ((a.process, a.device, a.address), a.time_ns)).collect())
        .unwrap_or_default();
    let alive_since: Vec<AliveSince> = folded
        .alive
        .iter()
        .filter(|a| !a.from_free && !is_segment(a.item.kind))
        .filter_map(|a| {
            let key = a.item.key();
            // What an earlier cut showed allocated at its start was allocated when it says, or
            // before its source.
            let time_ns =
                if a.item.flags & event_flags::BEFORE_RANGE != 0 { *known.get(&key)? } else { a.item.time_ns };
            Some(AliveSince { process: key.0, device: key.1, address: key.2, time_ns })
        })
        .collect();
    // Blocks a tag names need no span; the others' categories follow from the phase they were
    // allocated in and what came after it.
    let tagged: FxHashSet<Key> = trace.tags.iter().map(|t| (t.process.0, t.device.0, t.address)).collect();
    let mut times: Vec<i64> =
        alive_since.iter().filter(|a| !tagged.contains(&(a.process, a.device, a.address))).map(|a| a.time_ns).collect();
    times.sort_unstable();
    times.dedup();
    let Some(&earliest) = times.first() else { return (alive_since, Vec::new()) };
    let holds_one = |from: i64, to: i64| {
        let i = times.partition_point(|&t| t < from);
        times.get(i).is_some_and(|&t| t <= to)
    };
    let evaluation = trace.interner.find_string("evaluation");
    let kind_of = |a: &crate::model::annotation::Annotation| match a.kind {
        AnnotationKind::Forward => Some("forward"),
        AnnotationKind::Backward => Some("backward"),
        AnnotationKind::OptimizerStep => Some("optimizer_step"),
        AnnotationKind::UserRange if Some(a.name) == evaluation => Some("evaluation"),
        AnnotationKind::Module => Some("module"),
        _ => None,
    };
    // The phases before the range, by start; of them, those a block was allocated in, and after
    // each such one the phases up to the second forward.
    let phases: Vec<&crate::model::annotation::Annotation> = trace
        .annotations
        .iter()
        .filter(|a| a.start_ns < start_ns && a.end_ns >= earliest)
        .filter(|a| kind_of(a).is_some_and(|k| k != "module"))
        .collect();
    let mut keep = vec![false; phases.len()];
    let mut last_marked = None;
    for &t in &times {
        let i = phases.partition_point(|p| p.start_ns <= t);
        let Some(inside) = (i.saturating_sub(8)..i).rev().find(|&k| phases.get(k).is_some_and(|p| p.end_ns >= t))
        else {
            continue;
        };
        if last_marked == Some(inside) {
            continue;
        }
        last_marked = Some(inside);
        let mut forwards = 0;
        for (k, p) in phases.iter().enumerate().skip(inside) {
            keep[k] = true;
            if k > inside && p.kind == AnnotationKind::Forward {
                forwards += 1;
                if forwards == 2 {
                    break;
                }
            }
        }
    }
    let span = |a: &crate::model::annotation::Annotation, kind: &str| SpanBefore {
        kind: kind.to_owned(),
        process: a.process.0,
        device: a.device.map(|d| d.0),
        start_ns: a.start_ns,
        end_ns: a.end_ns,
        name: if a.kind == AnnotationKind::Module { trace.interner.resolve(a.name).to_owned() } else { String::new() },
    };
    let mut spans_before: Vec<SpanBefore> =
        phases.iter().zip(&keep).filter(|(_, k)| **k).filter_map(|(a, _)| Some(span(a, kind_of(a)?))).collect();
    // A module's span only where a block was allocated inside it.
    spans_before.extend(
        trace
            .annotations
            .iter()
            .filter(|a| a.kind == AnnotationKind::Module && a.start_ns < start_ns && holds_one(a.start_ns, a.end_ns))
            .map(|a| span(a, "module")),
    );
    // What an earlier cut kept of its own source's spans, where the blocks still need them.
    if let Some(r) = earlier {
        spans_before.extend(r.spans_before.iter().filter(|s| s.end_ns >= earliest).cloned());
    }
    (alive_since, spans_before)
}
