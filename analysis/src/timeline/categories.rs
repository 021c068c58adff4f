//! A timeline's categories apart from its curves: what they are worked out from when a
//! timeline is built without them ([`Timeline::build_outline`]), the replay that decides each
//! point's category, and setting them on the timeline.

use std::sync::Arc;

use vramscope_trace_format::{Category, DeviceId, EventKind, Trace};

use super::{BLOCK, ByCategory, CATEGORIES, Timeline};
use crate::attribution::Attributor;
use crate::replay;

/// What the categories of a timeline built without them ([`Timeline::build_outline`]) are
/// worked out from, on any thread: [`PendingCategories::work_out`], then
/// [`Timeline::set_categories`].
#[derive(Debug)]
pub struct PendingCategories {
    pub(super) device: DeviceId,
    /// The state the device's replay starts from, worked out for the curves already.
    pub(super) initial: replay::Initial,
}

/// The categories of a timeline's points, worked out apart from its curves.
#[derive(Debug)]
pub struct Categories {
    /// The category whose bytes change at each point.
    pub(super) category: Vec<u8>,
    /// Totals by category every [`BLOCK`] points.
    pub(super) checkpoints: Vec<ByCategory>,
}

impl PendingCategories {
    /// Works out the categories of the timeline of the same device of `trace` (the trace the
    /// timeline was built from): the attribution of every block, replayed as the curves were.
    pub fn work_out(&self, trace: &Trace) -> Categories {
        let device_events = replay::device_events(trace, self.device);
        let mut categorizer = Categorizer::new(trace, self.device, &device_events, &self.initial);
        replay::replay_from(trace, self.device, &device_events, &self.initial, |event, _| categorizer.step(event));
        categorizer.finish()
    }
}

/// Decides each point's category as a device's events are replayed: the category of each block
/// at its alloc, looked up by address at its free, with totals every [`BLOCK`] points.
pub(super) struct Categorizer<'a> {
    trace: &'a Trace,
    attributor: Attributor<'a>,
    end_ns: i64,
    /// Tags count only within a block's lifetime: each alloc's free, by the alloc's index.
    until_ns: rustc_hash::FxHashMap<usize, i64>,
    totals: ByCategory,
    /// The category of each live block, by address.
    live: rustc_hash::FxHashMap<u64, u8>,
    /// Whether the device's frees come in two steps (allocated memory drops at the request).
    two_step: bool,
    point_index: usize,
    out: Categories,
}

impl<'a> Categorizer<'a> {
    pub(super) fn new(
        trace: &'a Trace,
        device: DeviceId,
        device_events: &replay::DeviceEvents,
        initial: &replay::Initial,
    ) -> Self {
        let mut attributor = Attributor::new(trace, device);
        let end_ns = trace.events.last().map_or(i64::MAX, |e| e.time_ns);
        let two_step = trace.frees_in_two_steps(device);
        let mut until_ns: rustc_hash::FxHashMap<usize, i64> = Default::default();
        if !trace.tags.is_empty() {
            let mut next_free: rustc_hash::FxHashMap<u64, i64> = Default::default();
            for i in device_events.iter().rev().map(|i| i as usize) {
                let Some(e) = trace.events.get(i) else { continue };
                match e.kind {
                    EventKind::FreeRequested | EventKind::FreeCompleted if e.ends_allocation(two_step) => {
                        next_free.insert(e.address, e.time_ns);
                    }
                    EventKind::Alloc => {
                        until_ns.insert(i, next_free.remove(&e.address).unwrap_or(end_ns));
                    }
                    _ => {}
                }
            }
        }
        attributor.prepare_persistent(device_events, initial);
        let mut totals: ByCategory = [0; CATEGORIES];
        let mut live: rustc_hash::FxHashMap<u64, u8> = Default::default();
        // Blocks waiting for their streams at the start are not allocated.
        for block in initial.blocks.iter().filter(|b| !b.awaiting) {
            let stack = block.stack(trace);
            let until = block.freed_by.and_then(|i| trace.events.get(i)).map_or(end_ns, |e| e.time_ns);
            let category = attributor.block(block.address, i64::MIN, until, stack).category as u8;
            totals[category as usize] += block.size_bytes;
            if block.address != 0 {
                live.insert(block.address, category);
            }
        }
        let n = device_events.len() + 1;
        let mut out =
            Categories { category: Vec::with_capacity(n), checkpoints: Vec::with_capacity(n.div_ceil(BLOCK)) };
        out.checkpoints.push(totals);
        Self { trace, attributor, end_ns, until_ns, totals, live, two_step, point_index: 0, out }
    }

    /// The category of the point after `event` (`None`: the first point, the initial state).
    pub(super) fn step(&mut self, event: Option<usize>) {
        let trace = self.trace;
        let category = match event.and_then(|i| trace.events.get(i)) {
            Some(e) if e.kind == EventKind::Alloc => {
                let until = event.and_then(|i| self.until_ns.get(&i)).copied().unwrap_or(self.end_ns);
                let c = self.attributor.block(e.address, e.time_ns, until, e.stack).category as u8;
                self.live.insert(e.address, c);
                self.totals[c as usize] = self.totals[c as usize].saturating_add(e.size_bytes);
                c
            }
            Some(e) if e.ends_allocation(self.two_step) => {
                let c = self.live.remove(&e.address).unwrap_or(Category::Unknown as u8);
                self.totals[c as usize] = self.totals[c as usize].saturating_sub(e.size_bytes);
                c
            }
            _ => Category::Unknown as u8,
        };
        // The first point is the initial state, already checkpointed.
        if self.point_index > 0 {
            self.out.category.push(category);
            if self.point_index.is_multiple_of(BLOCK) {
                self.out.checkpoints.push(self.totals);
            }
        } else {
            self.out.category.push(Category::Unknown as u8);
        }
        self.point_index += 1;
    }

    pub(super) fn finish(self) -> Categories {
        self.out
    }
}

impl Timeline {
    /// Whether the categories are worked out ([`Self::build_outline`] leaves them pending).
    pub fn has_categories(&self) -> bool {
        self.pending.is_none()
    }

    /// What to work the categories out from, while they are pending.
    pub fn pending_categories(&self) -> Option<Arc<PendingCategories>> {
        self.pending.clone()
    }

    /// Sets the categories worked out from [`Self::pending_categories`]; false (and nothing
    /// set) when they are not this timeline's (another number of points) or it has them.
    pub fn set_categories(&mut self, categories: Categories) -> bool {
        if self.pending.is_none() || categories.category.len() != self.len() {
            return false;
        }
        self.category = categories.category;
        self.checkpoints = categories.checkpoints;
        self.pending = None;
        true
    }
}
