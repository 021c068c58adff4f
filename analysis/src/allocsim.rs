//! A model of PyTorch's CUDA caching allocator, to replay a trace's allocations and frees
//! through and see what it would reserve: under the settings the run had (to check the model
//! against what the trace recorded) or under others (to project a setting before trying it).
//!
//! The rules are those of `c10/cuda/CUDACachingAllocator.cpp` as `docs/ALLOCATOR-MODEL.md`
//! states them: sizes rounded to 512 bytes (or by `roundup_power2_divisions`); a small pool
//! (rounded sizes up to 1 MiB) and a large one, each with its free blocks per stream; the best
//! fit (smallest free block on the stream, then lowest address); new segments of 2 MiB (small),
//! 20 MiB (requests under 10 MiB) or the request rounded to 2 MiB; a block split when what is
//! left is at least 512 bytes (small pool) or more than 1 MiB (large pool, below
//! `max_split_size`); the `max_split_size` limits on which cached blocks serve which requests;
//! a free block merged with its free neighbours in its segment. Segments are released where the
//! run released them: at each segment free the trace recorded (`empty_cache`, or the retry
//! after a failed `cudaMalloc`), every wholly free segment goes, as `release_cached_blocks`
//! does.
//!
//! With `expandable_segments`, each pool and stream has one virtual range, mapped in pages (2 MiB
//! small, 20 MiB large) as blocks need them: a request takes the best free mapped block, else the
//! lowest place where a free mapped block and the unmapped pages after it hold it, mapping just
//! the pages missing; blocks split when 512 bytes or more are left; a release (`segment_unmap` in
//! the trace, or a segment free) unmaps the whole pages inside free blocks. Segments from before
//! the trace stay fixed segments, used first.
//!
//! Not modelled: private pools (CUDA graphs), garbage collection (it acts only under a
//! per-process memory fraction),
//! and blocks still in use by other streams after their free (`record_stream`): a block is
//! reusable at its `free_completed`.

use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::FxHashMap as HashMap;
use serde::Serialize;
use vramscope_trace_format::{DeviceId, EventKind, SegmentPool, Trace};

use crate::replay;

/// Every size is a multiple of this.
pub const MIN_BLOCK_BYTES: u64 = 512;
/// Rounded sizes up to this go to the small pool.
pub const SMALL_SIZE_BYTES: u64 = 1 << 20;
/// A small pool's segment.
pub const SMALL_BUFFER_BYTES: u64 = 2 << 20;
/// A large pool's segment for requests under [`MIN_LARGE_ALLOC_BYTES`].
pub const LARGE_BUFFER_BYTES: u64 = 20 << 20;
/// Requests from this size get a segment of their own size, rounded to [`ROUND_LARGE_BYTES`].
pub const MIN_LARGE_ALLOC_BYTES: u64 = 10 << 20;
/// What larger segments are rounded to.
pub const ROUND_LARGE_BYTES: u64 = 2 << 20;

/// The settings the model follows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Settings {
    /// `max_split_size_mb` in bytes (`None`: unlimited, the default).
    pub max_split_size_bytes: Option<u64>,
    /// `roundup_power2_divisions` per power-of-two interval from 1 MiB (index 0: below 2 MiB, up
    /// to index 15: 32 GiB and more); 0 or 1: plain rounding to 512 bytes.
    pub roundup_power2_divisions: [u32; 16],
    /// `expandable_segments:True`: one range per pool and stream, mapped page by page.
    pub expandable_segments: bool,
}

/// The virtual range each expandable segment reserves (far more than any device holds).
const EXPANDABLE_RANGE_BYTES: u64 = 1 << 42;

/// What a piece of an expandable range is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PageState {
    Free,
    Allocated,
    Unmapped,
}

/// One pool and stream's expandable range: its pieces by address, covering it, with the free
/// ones by (size, address) and the unmapped ones by address.
#[derive(Clone, Debug)]
struct Expandable {
    base: u64,
    page: u64,
    pieces: BTreeMap<u64, (u64, PageState)>,
    free: BTreeSet<(u64, u64)>,
    unmapped: BTreeSet<u64>,
}

impl Expandable {
    fn new(base: u64, page: u64) -> Self {
        let mut range = Self { base, page, pieces: BTreeMap::new(), free: BTreeSet::new(), unmapped: BTreeSet::new() };
        range.put(base, EXPANDABLE_RANGE_BYTES, PageState::Unmapped);
        range
    }

    fn put(&mut self, address: u64, size: u64, state: PageState) {
        match state {
            PageState::Free => {
                self.free.insert((size, address));
            }
            PageState::Unmapped => {
                self.unmapped.insert(address);
            }
            PageState::Allocated => {}
        }
        self.pieces.insert(address, (size, state));
    }

    fn take(&mut self, address: u64) -> Option<(u64, PageState)> {
        let (size, state) = self.pieces.remove(&address)?;
        self.free.remove(&(size, address));
        self.unmapped.remove(&address);
        Some((size, state))
    }

    /// Merges the piece at `address` with its neighbours of the same state; where it begins now.
    fn merge(&mut self, address: u64) -> u64 {
        let Some((own, state)) = self.take(address) else { return address };
        let (mut begin, mut size) = (address, own);
        if let Some((&prev, &(prev_size, prev_state))) = self.pieces.range(..address).next_back()
            && prev_state == state
            && prev + prev_size == address
        {
            self.take(prev);
            begin = prev;
            size += prev_size;
        }
        if let Some(&(next_size, next_state)) = self.pieces.get(&(address + own))
            && next_state == state
        {
            self.take(address + own);
            size += next_size;
        }
        self.put(begin, size, state);
        begin
    }

    /// Allocates `rounded` bytes: the smallest free mapped piece that holds it (lowest address
    /// among equals), else the lowest free piece before unmapped pages (or unmapped pages alone)
    /// with pages mapped to make up the rest. Returns the address and the bytes newly mapped.
    fn malloc(&mut self, rounded: u64) -> (u64, u64) {
        let best = self.free.range((rounded, 0)..).next().map(|&(_, address)| address);
        let (start, mapped) = match best {
            Some(address) => (address, 0),
            None => {
                let mut found = None;
                for &address in &self.unmapped {
                    let Some(&(size, _)) = self.pieces.get(&address) else { continue };
                    let before = self.pieces.range(..address).next_back();
                    let (start, have) = match before {
                        Some((&p, &(p_size, PageState::Free))) if p + p_size == address => (p, p_size),
                        _ => (address, 0),
                    };
                    let need = rounded.saturating_sub(have).div_ceil(self.page) * self.page;
                    if need <= size {
                        found = Some((start, address, need));
                        break;
                    }
                }
                // The range is larger than any device: its last piece is unmapped and holds it.
                let Some((start, unmapped_at, need)) = found else { return (self.base, 0) };
                let Some((size, _)) = self.take(unmapped_at) else { return (self.base, 0) };
                self.put(unmapped_at, need, PageState::Free);
                if size > need {
                    self.put(unmapped_at + need, size - need, PageState::Unmapped);
                }
                let start = if start == unmapped_at { start } else { self.merge(unmapped_at) };
                (start, need)
            }
        };
        let Some((size, _)) = self.take(start) else { return (start, mapped) };
        let remaining = size - rounded;
        let taken = if remaining >= MIN_BLOCK_BYTES { rounded } else { size };
        self.put(start, taken, PageState::Allocated);
        if taken < size {
            self.put(start + taken, size - taken, PageState::Free);
        }
        (start, mapped)
    }

    /// Frees the block at `address`; its size.
    fn free(&mut self, address: u64) -> Option<u64> {
        let &(size, state) = self.pieces.get(&address)?;
        if state != PageState::Allocated {
            return None;
        }
        self.take(address);
        self.put(address, size, PageState::Free);
        self.merge(address);
        Some(size)
    }

    /// Unmaps the whole pages inside free pieces; the bytes unmapped.
    fn release(&mut self) -> u64 {
        let free: Vec<(u64, u64)> = self.free.iter().map(|&(size, address)| (address, size)).collect();
        let mut unmapped = 0;
        for (address, size) in free {
            let first = (address - self.base).div_ceil(self.page) * self.page + self.base;
            let end = (address + size - self.base) / self.page * self.page + self.base;
            if end <= first {
                continue;
            }
            self.take(address);
            if first > address {
                self.put(address, first - address, PageState::Free);
            }
            self.put(first, end - first, PageState::Unmapped);
            if address + size > end {
                self.put(end, address + size - end, PageState::Free);
            }
            self.merge(first);
            unmapped += end - first;
        }
        unmapped
    }
}

/// What the model reserved.
#[derive(Clone, Debug, Default, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Simulation {
    /// The highest reserved bytes.
    pub peak_reserved_bytes: u64,
    /// Reserved bytes at the end.
    pub end_reserved_bytes: u64,
    /// Reserved bytes when allocated bytes (as the model rounds them) were highest.
    pub reserved_at_allocated_peak_bytes: u64,
    /// Segments it allocated (after the start), by size.
    pub segment_alloc_sizes: Vec<u64>,
    /// Segments it released.
    pub segment_frees: usize,
    /// With expandable segments: each page it mapped, by size (the allocator maps a page per
    /// handle, and a trace records a `segment_map` for each).
    pub segment_map_sizes: Vec<u64>,
    /// Frees of blocks it never saw allocated (skipped).
    pub unmatched_frees: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Piece {
    size: u64,
    allocated: bool,
}

#[derive(Clone, Debug)]
struct SimSegment {
    size: u64,
    stream: u64,
    small: bool,
    /// Blocks by address, covering the segment.
    blocks: BTreeMap<u64, Piece>,
}

/// The allocator's state.
struct Allocator {
    settings: Settings,
    segments: BTreeMap<u64, SimSegment>,
    /// Free blocks per pool: (small, stream, size, address).
    free: BTreeSet<(bool, u64, u64, u64)>,
    reserved: u64,
    allocated: u64,
    next_address: u64,
    /// With expandable segments: the range of each (small pool, stream).
    expandable: BTreeMap<(bool, u64), Expandable>,
    out: Simulation,
}

impl Allocator {
    fn round(&self, size: u64) -> u64 {
        if size < MIN_BLOCK_BYTES {
            return MIN_BLOCK_BYTES;
        }
        let interval = (63 - size.leading_zeros() as usize).saturating_sub(20).min(15);
        let divisions = u64::from(self.settings.roundup_power2_divisions[interval]);
        if divisions > 1 && size > MIN_BLOCK_BYTES * divisions {
            if size.is_power_of_two() {
                return size;
            }
            let floor = 1u64 << (63 - size.leading_zeros());
            let step = floor / divisions;
            if step == 0 {
                return floor * 2;
            }
            return size.div_ceil(step) * step;
        }
        size.div_ceil(MIN_BLOCK_BYTES) * MIN_BLOCK_BYTES
    }

    fn segment_size(rounded: u64) -> u64 {
        if rounded <= SMALL_SIZE_BYTES {
            SMALL_BUFFER_BYTES
        } else if rounded < MIN_LARGE_ALLOC_BYTES {
            LARGE_BUFFER_BYTES
        } else {
            rounded.div_ceil(ROUND_LARGE_BYTES) * ROUND_LARGE_BYTES
        }
    }

    fn max_split(&self) -> u64 {
        self.settings.max_split_size_bytes.unwrap_or(u64::MAX)
    }

    /// The best free block for `rounded` on `stream`, under the `max_split_size` rules.
    fn best_fit(&self, small: bool, stream: u64, rounded: u64) -> Option<(u64, u64)> {
        let &(s, st, size, address) = self.free.range((small, stream, rounded, 0)..).next()?;
        if s != small || st != stream {
            return None;
        }
        let max_split = self.max_split();
        if rounded < max_split && size >= max_split {
            return None;
        }
        if rounded >= max_split && size >= rounded.saturating_add(LARGE_BUFFER_BYTES) {
            return None;
        }
        Some((address, size))
    }

    fn segment_of(&self, address: u64) -> Option<u64> {
        let (&start, segment) = self.segments.range(..=address).next_back()?;
        (address < start + segment.size).then_some(start)
    }

    /// The expandable range `address` is in, if any.
    fn expandable_of(&mut self, address: u64) -> Option<&mut Expandable> {
        self.expandable.values_mut().find(|e| (e.base..e.base + EXPANDABLE_RANGE_BYTES).contains(&address))
    }

    /// Allocates `requested` bytes on `stream`; the address of the block and its size.
    fn malloc(&mut self, requested: u64, stream: u64) -> (u64, u64) {
        let rounded = self.round(requested);
        let small = rounded <= SMALL_SIZE_BYTES;
        let fixed = self.best_fit(small, stream, rounded);
        if self.settings.expandable_segments && fixed.is_none() {
            let next = &mut self.next_address;
            let range = self.expandable.entry((small, stream)).or_insert_with(|| {
                let base = *next;
                *next += EXPANDABLE_RANGE_BYTES;
                Expandable::new(base, if small { SMALL_BUFFER_BYTES } else { LARGE_BUFFER_BYTES })
            });
            let (address, mapped) = range.malloc(rounded);
            let taken = range.pieces.get(&address).map_or(rounded, |p| p.0);
            // One page per handle, as the allocator maps them.
            let page = range.page;
            self.out.segment_map_sizes.extend(std::iter::repeat_n(page, (mapped / page) as usize));
            self.reserved += mapped;
            self.allocated += taken;
            return (address, taken);
        }
        let (address, size) = match fixed {
            Some(found) => found,
            None => {
                let size = Self::segment_size(rounded);
                let address = self.next_address;
                self.next_address += size.div_ceil(ROUND_LARGE_BYTES) * ROUND_LARGE_BYTES;
                let blocks = BTreeMap::from([(address, Piece { size, allocated: false })]);
                self.segments.insert(address, SimSegment { size, stream, small, blocks });
                self.free.insert((small, stream, size, address));
                self.reserved += size;
                self.out.segment_alloc_sizes.push(size);
                (address, size)
            }
        };
        self.free.remove(&(small, stream, size, address));
        let remaining = size - rounded;
        let split = if small {
            remaining >= MIN_BLOCK_BYTES
        } else {
            rounded < self.max_split() && remaining > SMALL_SIZE_BYTES
        };
        let taken = if split { rounded } else { size };
        if let Some(segment) = self.segment_of(address).and_then(|s| self.segments.get_mut(&s)) {
            segment.blocks.insert(address, Piece { size: taken, allocated: true });
            if split {
                segment.blocks.insert(address + taken, Piece { size: remaining, allocated: false });
                self.free.insert((small, stream, remaining, address + taken));
            }
        }
        self.allocated += taken;
        (address, taken)
    }

    /// Frees the block at `address`, merging it with free neighbours.
    fn free_block(&mut self, address: u64) {
        if let Some(range) = self.expandable_of(address) {
            if let Some(size) = range.free(address) {
                self.allocated -= size;
            }
            return;
        }
        let Some(start) = self.segment_of(address) else { return };
        let Some(segment) = self.segments.get_mut(&start) else { return };
        let Some(piece) = segment.blocks.get(&address).copied().filter(|p| p.allocated) else { return };
        self.allocated -= piece.size;
        let (small, stream) = (segment.small, segment.stream);
        let (mut begin, mut size) = (address, piece.size);
        if let Some((&prev, &p)) = segment.blocks.range(..address).next_back()
            && !p.allocated
            && prev + p.size == address
        {
            self.free.remove(&(small, stream, p.size, prev));
            segment.blocks.remove(&address);
            begin = prev;
            size += p.size;
        }
        let next = address + piece.size;
        if let Some(&n) = segment.blocks.get(&next).filter(|n| !n.allocated) {
            self.free.remove(&(small, stream, n.size, next));
            segment.blocks.remove(&next);
            size += n.size;
        }
        segment.blocks.insert(begin, Piece { size, allocated: false });
        self.free.insert((small, stream, size, begin));
    }

    /// `release_cached_blocks`: every wholly free segment is given back, and the whole pages
    /// inside the expandable ranges' free blocks are unmapped.
    fn release_cached(&mut self) {
        let unmapped: u64 = self.expandable.values_mut().map(Expandable::release).sum();
        self.reserved -= unmapped;
        let empty: Vec<u64> = self
            .segments
            .iter()
            .filter(|(_, s)| s.blocks.len() == 1 && s.blocks.values().all(|p| !p.allocated))
            .map(|(&a, _)| a)
            .collect();
        for address in empty {
            if let Some(segment) = self.segments.remove(&address) {
                self.free.remove(&(segment.small, segment.stream, segment.size, address));
                self.reserved -= segment.size;
                self.out.segment_frees += 1;
            }
        }
    }

    fn note(&mut self, best_allocated: &mut u64) {
        self.out.peak_reserved_bytes = self.out.peak_reserved_bytes.max(self.reserved);
        if self.allocated > *best_allocated {
            *best_allocated = self.allocated;
            self.out.reserved_at_allocated_peak_bytes = self.reserved;
        }
    }
}

/// Replays the allocations and frees of `device` through the model under `settings`. It
/// starts from the segments the trace shows alive before its first event (from the final state,
/// and the segments freed in the window that were allocated before it), with the blocks
/// allocated before the trace in place; then each allocation is placed by the model, not where
/// the trace says it went.
pub fn simulate(trace: &Trace, device: DeviceId, settings: Settings) -> Simulation {
    let events = replay::device_events(trace, device);
    let initial = replay::initial_state(trace, device, &events);
    let top = trace
        .segments
        .iter()
        .map(|s| s.address + s.size_bytes)
        .chain(trace.events.iter().map(|e| e.address + e.size_bytes))
        .max()
        .unwrap_or(0);
    let mut sim = Allocator {
        settings,
        segments: BTreeMap::new(),
        free: BTreeSet::new(),
        reserved: 0,
        allocated: 0,
        next_address: (top + (1 << 40)).div_ceil(EXPANDABLE_RANGE_BYTES) * EXPANDABLE_RANGE_BYTES,
        expandable: BTreeMap::new(),
        out: Simulation::default(),
    };
    // The segments from before the trace: in the final state and never allocated in it, or
    // freed in it without having been allocated in it.
    let mut allocated_in_window: BTreeSet<u64> = BTreeSet::new();
    let mut before: BTreeMap<u64, (u64, u64, bool)> = BTreeMap::new();
    for i in events.iter().map(|i| i as usize) {
        let Some(e) = trace.events.get(i) else { continue };
        match e.kind {
            EventKind::SegmentAlloc => {
                allocated_in_window.insert(e.address);
            }
            EventKind::SegmentFree if !allocated_in_window.contains(&e.address) => {
                before.entry(e.address).or_insert((e.size_bytes, e.stream.raw(), e.size_bytes <= SMALL_BUFFER_BYTES));
            }
            _ => {}
        }
    }
    for segment in trace.segments.iter().filter(|s| s.device == device && !allocated_in_window.contains(&s.address)) {
        let small = segment.pool == SegmentPool::Small;
        before.entry(segment.address).or_insert((segment.size_bytes, segment.stream, small));
    }
    for (&address, &(size, stream, small)) in &before {
        let blocks = BTreeMap::from([(address, Piece { size, allocated: false })]);
        sim.segments.insert(address, SimSegment { size, stream, small, blocks });
        sim.free.insert((small, stream, size, address));
        sim.reserved += size;
    }
    // Where the trace's blocks are in the model: by the trace's address.
    let mut placed: HashMap<u64, u64> = HashMap::default();
    for block in &initial.blocks {
        let Some(start) = sim.segment_of(block.address) else { continue };
        // Carve the block out of its segment's free range at its own address.
        let Some((&free_at, &piece)) =
            sim.segments.get(&start).and_then(|s| s.blocks.range(..=block.address).next_back())
        else {
            continue;
        };
        let size = block.size_bytes.max(MIN_BLOCK_BYTES);
        if piece.allocated || free_at + piece.size < block.address + size {
            continue;
        }
        let Some(segment) = sim.segments.get_mut(&start) else { continue };
        let (small, stream) = (segment.small, segment.stream);
        sim.free.remove(&(small, stream, piece.size, free_at));
        segment.blocks.remove(&free_at);
        if block.address > free_at {
            segment.blocks.insert(free_at, Piece { size: block.address - free_at, allocated: false });
            sim.free.insert((small, stream, block.address - free_at, free_at));
        }
        segment.blocks.insert(block.address, Piece { size, allocated: true });
        let tail = free_at + piece.size - (block.address + size);
        if tail > 0 {
            segment.blocks.insert(block.address + size, Piece { size: tail, allocated: false });
            sim.free.insert((small, stream, tail, block.address + size));
        }
        sim.allocated += size;
        placed.insert(block.address, block.address);
    }
    let mut best_allocated = 0;
    sim.note(&mut best_allocated);
    let mut releasing = false;
    for i in events.iter().map(|i| i as usize) {
        let Some(e) = trace.events.get(i) else { continue };
        match e.kind {
            EventKind::Alloc => {
                let requested = if e.requested_bytes() > 0 { e.requested_bytes() } else { e.size_bytes };
                let (address, _) = sim.malloc(requested, e.stream.raw());
                placed.insert(e.address, address);
                releasing = false;
            }
            EventKind::FreeCompleted => {
                match placed.remove(&e.address) {
                    Some(address) => sim.free_block(address),
                    None => sim.out.unmatched_frees += 1,
                }
                releasing = false;
            }
            // The run gave back its cached segments here (`empty_cache`, or the retry after a
            // failed cudaMalloc): so does the model, once for the run of frees.
            EventKind::SegmentFree | EventKind::SegmentUnmap => {
                if !releasing {
                    sim.release_cached();
                }
                releasing = true;
            }
            _ => {}
        }
        sim.note(&mut best_allocated);
    }
    sim.out.end_reserved_bytes = sim.reserved;
    sim.out
}

#[cfg(test)]
mod tests;
