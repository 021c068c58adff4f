//! A device's memory over time, by category, with a level-of-detail index.
//!
//! One point per event (plus the state before the first). Drawing a column of pixels asks for
//! the range of points under it: the minimum and maximum of each curve over that range, and the
//! split by category at the range's highest allocated point, so the peak survives any zoom. Ranges
//! are answered from per-block summaries (64 points, then 4,096), so a column costs about the
//! same at any zoom and a frame costs about the same on 10M events as on 10K.
//!
//! Categories: one category changes per allocator event, by the change in allocated bytes, so a
//! point stores only which one (one byte); full per-category totals are kept every 64 points and
//! the rest replayed from there. Sources whose categories come as counters (the profiler's memory
//! timeline) keep full totals at every point.
//!
//! The curves themselves: a timeline built over a shared trace ([`Timeline::build_shared`], the
//! app's) keeps the state at the first point of each block and replays at most 63 events from
//! there when a point is asked for, so a point costs one byte (its category) where it cost 17;
//! one that outlives its trace ([`Timeline::build`]: the terminal view's, a report's) or that
//! comes from counters keeps every point's time and bytes.

use std::sync::Arc;

use vramscope_trace_format::{Category, DeviceId, Trace};

use self::points::Points;
use super::replay;

mod categories;
mod outline;
mod points;

use self::categories::Categorizer;
pub use self::categories::{Categories, PendingCategories};

/// Number of categories.
pub const CATEGORIES: usize = Category::ALL.len();

/// Bytes per category, indexed by the category's discriminant.
pub type ByCategory = [u64; CATEGORIES];

const BLOCK: usize = 64;
const SUPER: usize = BLOCK * 64;

/// Minimum and maximum of the curves over a range of points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    /// Smallest allocated bytes.
    pub allocated_min: u64,
    /// Largest allocated bytes.
    pub allocated_max: u64,
    /// The point where allocated is largest (the first, on ties).
    pub allocated_max_point: usize,
    /// Largest requested bytes.
    pub requested_max: u64,
    /// Smallest reserved bytes.
    pub reserved_min: u64,
    /// Largest reserved bytes.
    pub reserved_max: u64,
}

impl Range {
    const EMPTY: Self = Self {
        allocated_min: u64::MAX,
        allocated_max: 0,
        allocated_max_point: usize::MAX,
        requested_max: 0,
        reserved_min: u64::MAX,
        reserved_max: 0,
    };

    fn merge(&mut self, other: &Self) {
        self.allocated_min = self.allocated_min.min(other.allocated_min);
        if other.allocated_max > self.allocated_max || self.allocated_max_point == usize::MAX {
            self.allocated_max = other.allocated_max;
            self.allocated_max_point = other.allocated_max_point;
        }
        self.requested_max = self.requested_max.max(other.requested_max);
        self.reserved_min = self.reserved_min.min(other.reserved_min);
        self.reserved_max = self.reserved_max.max(other.reserved_max);
    }
}

/// One column of a drawn timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Column {
    /// The curves over the column.
    pub range: Range,
    /// Allocated bytes by category at the column's highest allocated point.
    pub categories: ByCategory,
}

/// A point of a timeline: the memory after one of its device's events, in order (the first point
/// holds before any, from the state the trace starts in). Not an index into `Trace::events`:
/// [`Timeline::event`] gives the event a point follows, [`Timeline::point_at`] the point of a time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Point(pub usize);

impl Point {
    /// `n` points later.
    pub fn later(self, n: usize) -> Point {
        Point(self.0.saturating_add(n))
    }

    /// `n` points earlier (at least the first).
    pub fn earlier(self, n: usize) -> Point {
        Point(self.0.saturating_sub(n))
    }
}

/// A device's memory over time.
#[derive(Clone, Default)]
pub struct Timeline {
    /// The device.
    pub device: DeviceId,
    /// The points' times, allocated and requested bytes.
    points: Points,
    /// Reserved bytes where they change: (point, value), the first at point 0. Reserved moves
    /// only on segment events, a few per thousand.
    reserved_changes: Vec<(u32, u64)>,
    /// Index in `Trace::events` of the event after which each point holds (`u32::MAX`: none);
    /// empty while point `i` follows event `i - 1` (one device, the usual case).
    event: Vec<u32>,
    /// The category whose bytes change at each point (allocator sources).
    category: Vec<u8>,
    /// Totals by category every `checkpoint_every` points.
    checkpoints: Vec<ByCategory>,
    checkpoint_every: usize,
    blocks: Vec<Range>,
    supers: Vec<Range>,
    /// Time of the first point of each block: a search by time looks here first, in 1/64 of
    /// the memory, before looking inside one block.
    block_start_ns: Vec<i64>,
    /// Built without its categories ([`Self::build_outline`]): what working them out starts
    /// from.
    pending: Option<Arc<PendingCategories>>,
}

impl std::fmt::Debug for Timeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Timeline")
            .field("device", &self.device)
            .field("points", &self.len())
            .field("replayed", &matches!(self.points, Points::Replayed { .. }))
            .finish_non_exhaustive()
    }
}

impl Timeline {
    /// Builds the timeline of `device`, keeping every point: it outlives the trace.
    pub fn build(trace: &Trace, device: DeviceId) -> Self {
        Self::build_with(trace, device, None, true)
    }

    /// Builds the timeline of `device` over a trace it keeps: points are replayed from the
    /// trace's events when asked for, not kept (a timeline of counters keeps them).
    pub fn build_shared(trace: &Arc<Trace>, device: DeviceId) -> Self {
        Self::build_with(trace, device, Some(trace), true)
    }

    /// [`Self::build_shared`] without the categories: the curves (allocated, requested,
    /// reserved) and their index, at about a third of the cost on a long trace; the categories
    /// are worked out afterwards from [`Self::pending_categories`] and set with
    /// [`Self::set_categories`]. Until then [`Self::categories`] is all zero. A timeline of
    /// counters (cheap, and categorised by them) comes whole.
    pub fn build_outline(trace: &Arc<Trace>, device: DeviceId) -> Self {
        Self::build_outline_given(trace, device, None)
    }

    /// [`Self::build_outline`], given the devices that have events where they are known
    /// already ([`Trace::event_devices`]: one pass less over the events).
    pub fn build_outline_given(trace: &Arc<Trace>, device: DeviceId, event_devices: Option<&[DeviceId]>) -> Self {
        Self::build_with_given(trace, device, Some(trace), false, event_devices)
    }

    fn build_with(trace: &Trace, device: DeviceId, shared: Option<&Arc<Trace>>, categorize: bool) -> Self {
        Self::build_with_given(trace, device, shared, categorize, None)
    }

    fn build_with_given(
        trace: &Trace,
        device: DeviceId,
        shared: Option<&Arc<Trace>>,
        categorize: bool,
        event_devices: Option<&[DeviceId]>,
    ) -> Self {
        let device_events = replay::device_events_given(trace, device, event_devices);
        let counters = replay::replays_counters(trace, device, &device_events);
        if let Some(shared) = shared
            && !categorize
            && !counters
            && let Some(t) = Self::outline_beside_initial(shared, device, &device_events)
        {
            return t;
        }
        let mut t = Self::empty(device, &device_events, shared.filter(|_| !counters));
        if counters {
            t.category.reserve_exact(device_events.len() + 1);
            t.build_from_counters(trace, device);
        } else {
            t.build_from_events(trace, device, &device_events, categorize);
        }
        t.index();
        t
    }

    /// A timeline with room for a point per event and one before (sized once, not grown by
    /// doubling: each doubling of a curve of tens of millions of points is hundreds of MB of
    /// fresh pages, copied), replayed from `shared` or keeping its points.
    fn empty(device: DeviceId, device_events: &replay::DeviceEvents, shared: Option<&Arc<Trace>>) -> Self {
        let mut t = Self { device, checkpoint_every: BLOCK, ..Self::default() };
        let points = device_events.len() + 1;
        match (shared, &mut t.points) {
            (Some(shared), _) => {
                t.points = Points::Replayed {
                    trace: Arc::clone(shared),
                    first_time_ns: 0,
                    block_state: Vec::with_capacity(points.div_ceil(BLOCK)),
                    len: 0,
                };
            }
            (None, Points::Stored { times, allocated, requested }) => {
                times.reserve_exact(points);
                allocated.reserve_exact(points);
                requested.reserve_exact(points);
            }
            (None, Points::Replayed { .. }) => {}
        }
        t.block_start_ns.reserve_exact(points.div_ceil(BLOCK));
        t.blocks.reserve_exact(points.div_ceil(BLOCK));
        t
    }

    fn push(&mut self, event: Option<usize>, point: replay::Point) {
        let index = self.len();
        if index.is_multiple_of(BLOCK) {
            self.block_start_ns.push(point.time_ns);
        }
        let block_start = self.block_start_ns.last().copied().unwrap_or(point.time_ns);
        match &mut self.points {
            Points::Stored { times, allocated, requested } => {
                times.push(point.time_ns, block_start, &self.block_start_ns);
                requested.push(point.requested_bytes, point.allocated_bytes, allocated);
                allocated.push(point.allocated_bytes);
            }
            Points::Replayed { first_time_ns, block_state, len, .. } => {
                if index == 0 {
                    *first_time_ns = point.time_ns;
                }
                if index.is_multiple_of(BLOCK) {
                    block_state.push((point.allocated_bytes, point.requested_bytes));
                }
                *len += 1;
            }
        }
        if self.reserved_changes.last().map(|c| c.1) != Some(point.reserved_bytes) {
            self.reserved_changes.push((index as u32, point.reserved_bytes));
        }
        // The block's summary as its points come (not a second replay of them afterwards).
        if index.is_multiple_of(BLOCK) {
            self.blocks.push(Range::EMPTY);
        }
        if let Some(block) = self.blocks.last_mut() {
            block.merge(&Range {
                allocated_min: point.allocated_bytes,
                allocated_max: point.allocated_bytes,
                allocated_max_point: index,
                requested_max: point.requested_bytes,
                reserved_min: point.reserved_bytes,
                reserved_max: point.reserved_bytes,
            });
        }
        let identity = if index == 0 { event.is_none() } else { event == Some(index - 1) };
        if self.event.is_empty() && identity {
            return;
        }
        if self.event.is_empty() {
            self.event = (0..index).map(|j| if j == 0 { u32::MAX } else { (j - 1) as u32 }).collect();
        }
        self.event.push(event.and_then(|e| u32::try_from(e).ok()).unwrap_or(u32::MAX));
    }

    /// Calls `visit` with each point of `start..end` and its allocated and requested bytes, in
    /// order.
    fn walk(&self, start: usize, end: usize, mut visit: impl FnMut(usize, u64, u64)) {
        let end = end.min(self.len());
        match &self.points {
            Points::Stored { allocated, requested, .. } => {
                for i in start..end {
                    let (Some(&a), Some(q)) = (allocated.get(i), requested.get(i, allocated)) else { break };
                    visit(i, a, q);
                }
            }
            Points::Replayed { trace, block_state, .. } => {
                if start >= end {
                    return;
                }
                let first = start / BLOCK * BLOCK;
                let Some(&(allocated_bytes, requested_bytes)) = block_state.get(start / BLOCK) else { return };
                let mut point = replay::Point { allocated_bytes, requested_bytes, ..replay::Point::default() };
                let two_step = trace.frees_in_two_steps(self.device);
                for i in first..end {
                    if i > first
                        && let Some(e) = self.event(Point(i)).and_then(|e| trace.events.get(e))
                    {
                        replay::apply(&mut point, e, two_step);
                    }
                    if i >= start {
                        visit(i, point.allocated_bytes, point.requested_bytes);
                    }
                }
            }
        }
    }

    fn reserved_at(&self, i: usize) -> u64 {
        let k = self.reserved_changes.partition_point(|c| c.0 as usize <= i);
        k.checked_sub(1).and_then(|k| self.reserved_changes.get(k)).map_or(0, |c| c.1)
    }

    /// The curves from the device's events, and (`categorize`) the category of each point in
    /// the same replay; without, the categories are left pending (see [`Self::pending_categories`]).
    fn build_from_events(
        &mut self,
        trace: &Trace,
        device: DeviceId,
        device_events: &replay::DeviceEvents,
        categorize: bool,
    ) {
        let initial = replay::initial_state(trace, device, device_events);
        let mut categorizer = categorize.then(|| Categorizer::new(trace, device, device_events, &initial));
        replay::replay_from(trace, device, device_events, &initial, |event, point| {
            if let Some(c) = categorizer.as_mut() {
                c.step(event);
            }
            self.push(event, point);
        });
        match categorizer {
            Some(c) => {
                let categories = c.finish();
                self.category = categories.category;
                self.checkpoints = categories.checkpoints;
            }
            None => self.pending = Some(Arc::new(PendingCategories { device, initial })),
        }
    }

    fn build_from_counters(&mut self, trace: &Trace, device: DeviceId) {
        self.checkpoint_every = 1;
        let series = super::peak::category_counters(trace, device);
        let mut next = vec![0usize; series.len()];
        let mut totals: ByCategory = [0; CATEGORIES];
        replay::replay(trace, device, |event, point| {
            for ((category, s), next) in series.iter().zip(next.iter_mut()) {
                while let Some(sample) = s.samples.get(*next).filter(|x| x.time_ns <= point.time_ns) {
                    totals[*category as usize] = sample.value.max(0) as u64;
                    *next += 1;
                }
            }
            if series.is_empty() {
                totals[Category::Unknown as usize] = point.allocated_bytes;
            }
            self.checkpoints.push(totals);
            self.category.push(Category::Unknown as u8);
            self.push(event, point);
        });
    }

    /// The summaries of 4,096 points, from those of 64 made as the points came.
    fn index(&mut self) {
        self.supers = self
            .blocks
            .chunks(SUPER / BLOCK)
            .map(|chunk| {
                let mut r = Range::EMPTY;
                chunk.iter().for_each(|b| r.merge(b));
                r
            })
            .collect();
    }

    fn scan(&self, start: usize, end: usize) -> Range {
        let mut r = Range::EMPTY;
        let mut k = self.reserved_changes.partition_point(|c| c.0 as usize <= start).saturating_sub(1);
        self.walk(start, end, |i, a, q| {
            while self.reserved_changes.get(k + 1).is_some_and(|c| c.0 as usize <= i) {
                k += 1;
            }
            let s = self.reserved_changes.get(k).map_or(0, |c| c.1);
            r.merge(&Range {
                allocated_min: a,
                allocated_max: a,
                allocated_max_point: i,
                requested_max: q,
                reserved_min: s,
                reserved_max: s,
            });
        });
        r
    }

    /// Number of points.
    pub fn len(&self) -> usize {
        match &self.points {
            Points::Stored { allocated, .. } => allocated.len(),
            Points::Replayed { len, .. } => *len,
        }
    }

    /// Whether there are no points.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Time of the first and last point.
    pub fn time_span_ns(&self) -> (i64, i64) {
        (self.time_ns(Point(0)), self.time_ns(self.last_point()))
    }

    /// The last point (the first, of a timeline without any).
    pub fn last_point(&self) -> Point {
        Point(self.len().saturating_sub(1))
    }

    /// Time of point `p`.
    pub fn time_ns(&self, Point(i): Point) -> i64 {
        match &self.points {
            Points::Stored { times, .. } => times.get(i, &self.block_start_ns).unwrap_or(0),
            Points::Replayed { len, .. } if i >= *len => 0,
            Points::Replayed { first_time_ns, .. } if i == 0 => *first_time_ns,
            Points::Replayed { trace, .. } => {
                self.event(Point(i)).and_then(|e| trace.events.get(e)).map_or(0, |e| e.time_ns)
            }
        }
    }

    /// Allocated, requested and reserved bytes at point `p`.
    pub fn values(&self, Point(i): Point) -> (u64, u64, u64) {
        let mut bytes = (0, 0);
        self.walk(i, i + 1, |_, a, q| bytes = (a, q));
        (bytes.0, bytes.1, self.reserved_at(i))
    }

    /// The trace event (an index into `Trace::events`) after which point `p` holds, if any.
    pub fn event(&self, Point(i): Point) -> Option<usize> {
        if i >= self.len() {
            return None;
        }
        if self.event.is_empty() {
            return i.checked_sub(1);
        }
        self.event.get(i).filter(|&&e| e != u32::MAX).map(|&e| e as usize)
    }

    /// The point in force at `time_ns`: the last at or before it (the first point before the start).
    pub fn point_at(&self, time_ns: i64) -> Point {
        // Times are in order: the answer is in the last block that starts at or before it.
        let block = self.block_start_ns.partition_point(|&t| t <= time_ns);
        let Some(block) = block.checked_sub(1) else { return Point(0) };
        let start = block * BLOCK;
        let end = ((block + 1) * BLOCK).min(self.len());
        Point(self.first_in(start, end, |t| t > time_ns).saturating_sub(1))
    }

    /// The point of the highest allocated bytes (the first, on ties).
    pub fn peak_allocated_point(&self) -> Point {
        let mut r = Range::EMPTY;
        self.supers.iter().for_each(|s| r.merge(s));
        Point(if r.allocated_max_point == usize::MAX { 0 } else { r.allocated_max_point })
    }

    /// Curves over points `start..end`.
    pub fn range(&self, start: usize, end: usize) -> Range {
        let end = end.min(self.len());
        let mut r = Range::EMPTY;
        let mut i = start;
        while i < end {
            if i.is_multiple_of(SUPER) && i + SUPER <= end {
                if let Some(s) = self.supers.get(i / SUPER) {
                    r.merge(s);
                }
                i += SUPER;
            } else if i.is_multiple_of(BLOCK) && i + BLOCK <= end {
                if let Some(b) = self.blocks.get(i / BLOCK) {
                    r.merge(b);
                }
                i += BLOCK;
            } else {
                let stop = end.min((i / BLOCK + 1) * BLOCK);
                r.merge(&self.scan(i, stop));
                i = stop;
            }
        }
        r
    }

    /// Allocated bytes by category at point `p` (all zero while the categories are pending).
    pub fn categories(&self, Point(i): Point) -> ByCategory {
        if self.pending.is_some() {
            return [0; CATEGORIES];
        }
        let every = self.checkpoint_every.max(1);
        let base = i / every;
        let mut totals = self.checkpoints.get(base).copied().unwrap_or([0; CATEGORIES]);
        let first = base * every;
        let mut before = 0;
        self.walk(first, i + 1, |j, now, _| {
            if j > first
                && let Some(&c) = self.category.get(j)
            {
                let slot = &mut totals[(c as usize).min(CATEGORIES - 1)];
                *slot =
                    if now >= before { slot.saturating_add(now - before) } else { slot.saturating_sub(before - now) };
            }
            before = now;
        });
        totals
    }

    /// The first point of `start..end` whose time makes `after` true (`end` if none); `after`
    /// turns true once and stays so, times being in order.
    fn first_in(&self, start: usize, end: usize, after: impl Fn(i64) -> bool) -> usize {
        let (mut lo, mut hi) = (start, end.min(self.len()).max(start));
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if after(self.time_ns(Point(mid))) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    }

    /// The first point at or after `time_ns` (`len()` if none).
    fn first_not_before(&self, time_ns: f64) -> usize {
        let block = self.block_start_ns.partition_point(|&t| (t as f64) < time_ns);
        // The answer is in the block before the first block that starts at or after the time.
        let start = block.saturating_sub(1) * BLOCK;
        let end = (block * BLOCK).min(self.len());
        self.first_in(start, end, |t| t as f64 >= time_ns)
    }

    /// `columns` columns over `[start_ns, end_ns)`: each covers the points in force during its
    /// time (including the one in force at its start). `None` for columns before the first point.
    pub fn columns(&self, start_ns: f64, end_ns: f64, columns: usize) -> Vec<Option<Column>> {
        let width = (end_ns - start_ns) / columns.max(1) as f64;
        let (first_ns, last_ns) = self.time_span_ns();
        let (first_ns, last_ns) = (first_ns as f64, last_ns as f64);
        let mut out = Vec::with_capacity(columns);
        let mut lo = self.first_not_before(start_ns);
        for c in 0..columns {
            let col_end = start_ns + width * (c + 1) as f64;
            let col_start = col_end - width;
            if col_end <= first_ns || self.is_empty() || col_start > last_ns {
                out.push(None);
                lo = self.first_not_before(col_end);
                continue;
            }
            let hi = self.first_not_before(col_end).max(lo);
            let start = lo.saturating_sub(1).min(hi.saturating_sub(1));
            let range = self.range(start, hi.max(start + 1));
            let categories = self.categories(Point(range.allocated_max_point).min(self.last_point()));
            out.push(Some(Column { range, categories }));
            lo = hi;
        }
        out
    }
}

#[cfg(test)]
mod tests;
