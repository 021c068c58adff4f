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
//! does. Not modelled: expandable segments (mapped page by page, see `segment_map`), private
//! pools (CUDA graphs), garbage collection (it needs a memory fraction), and blocks still in
//! use by other streams after their free (`record_stream`): a block is reusable at its
//! `free_completed`.

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
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Settings {
    /// `max_split_size_mb` in bytes (`None`: unlimited, the default).
    pub max_split_size_bytes: Option<u64>,
    /// `roundup_power2_divisions` per power-of-two interval from 1 MiB (index 0: below 2 MiB, up
    /// to index 15: 32 GiB and more); 0 or 1: plain rounding to 512 bytes.
    pub roundup_power2_divisions: [u32; 16],
}

/// What the model reserved.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
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

    /// Allocates `requested` bytes on `stream`; the address of the block and its size.
    fn malloc(&mut self, requested: u64, stream: u64) -> (u64, u64) {
        let rounded = self.round(requested);
        let small = rounded <= SMALL_SIZE_BYTES;
        let (address, size) = match self.best_fit(small, stream, rounded) {
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

    /// `release_cached_blocks`: every wholly free segment is given back.
    fn release_cached(&mut self) {
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
        next_address: (top + (1 << 40)).div_ceil(ROUND_LARGE_BYTES) * ROUND_LARGE_BYTES,
        out: Simulation::default(),
    };
    // The segments from before the trace: in the final state and never allocated in it, or
    // freed in it without having been allocated in it.
    let mut allocated_in_window: BTreeSet<u64> = BTreeSet::new();
    let mut before: BTreeMap<u64, (u64, u64, bool)> = BTreeMap::new();
    for &i in &events {
        let Some(e) = trace.events.get(i) else { continue };
        match e.kind {
            EventKind::SegmentAlloc => {
                allocated_in_window.insert(e.address);
            }
            EventKind::SegmentFree if !allocated_in_window.contains(&e.address) => {
                before.entry(e.address).or_insert((e.size_bytes, e.stream, e.size_bytes <= SMALL_BUFFER_BYTES));
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
    for &i in &events {
        let Some(e) = trace.events.get(i) else { continue };
        match e.kind {
            EventKind::Alloc => {
                let requested = if e.requested_bytes > 0 { e.requested_bytes } else { e.size_bytes };
                let (address, _) = sim.malloc(requested, e.stream);
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
            EventKind::SegmentFree => {
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
mod tests {
    use vramscope_trace_format::Event;

    use super::*;

    fn alloc(trace: &mut Trace, t: i64, address: u64, requested: u64) {
        let mut e = Event::new(EventKind::Alloc, t, 0, address, requested.div_ceil(512) * 512);
        e.requested_bytes = requested;
        trace.events.push(e);
    }

    fn free(trace: &mut Trace, t: i64, address: u64) {
        trace.events.push(Event::new(EventKind::FreeCompleted, t, 0, address, 0));
    }

    #[test]
    fn sizes_round_as_the_allocator_rounds_them() {
        let a = Allocator {
            settings: Settings::default(),
            segments: BTreeMap::new(),
            free: BTreeSet::new(),
            reserved: 0,
            allocated: 0,
            next_address: 0,
            out: Simulation::default(),
        };
        assert_eq!(a.round(1), 512);
        assert_eq!(a.round(513), 1024);
        assert_eq!(a.round(3 << 20), 3 << 20);
        let mut divided = a;
        divided.settings.roundup_power2_divisions = [4; 16];
        // 1.2 MiB with 4 divisions of [1 MiB, 2 MiB): the next quarter, 1.25 MiB.
        assert_eq!(divided.round(1_200_000), 1_310_720);
        assert_eq!(divided.round(1 << 21), 1 << 21);
        assert_eq!(Allocator::segment_size(1 << 20), 2 << 20);
        assert_eq!(Allocator::segment_size(5 << 20), 20 << 20);
        assert_eq!(Allocator::segment_size((10 << 20) + 1), 12 << 20);
    }

    /// Hand-worked: three 1 KiB blocks share one 2 MiB small segment; a 4 MiB request gets a
    /// 20 MiB segment and splits it (16 MiB left, more than 1 MiB); a second 4 MiB request takes
    /// the rest; freeing both merges them back; `empty_cache` (a recorded segment free) gives back
    /// the free 20 MiB segment, not the small one still in use.
    #[test]
    fn a_hand_worked_replay() {
        let mut trace = Trace::default();
        // The segments as the run recorded them (the model places blocks on its own).
        trace.events.push(Event::new(EventKind::SegmentAlloc, 0, 0, 0xa000_0000, 2 << 20));
        trace.events.push(Event::new(EventKind::SegmentAlloc, 3, 0, 0xb000_0000, 20 << 20));
        alloc(&mut trace, 1, 0x10, 1000);
        alloc(&mut trace, 2, 0x20, 1000);
        alloc(&mut trace, 3, 0x30, 1000);
        alloc(&mut trace, 4, 0x40, 4 << 20);
        alloc(&mut trace, 5, 0x50, 4 << 20);
        free(&mut trace, 6, 0x40);
        free(&mut trace, 7, 0x50);
        alloc(&mut trace, 8, 0x60, 12 << 20);
        free(&mut trace, 9, 0x60);
        trace.events.push(Event::new(EventKind::SegmentFree, 10, 0, 0xb000_0000, 20 << 20));
        let sim = simulate(&trace, DeviceId(0), Settings::default());
        assert_eq!(sim.segment_alloc_sizes, vec![2 << 20, 20 << 20]);
        assert_eq!(sim.peak_reserved_bytes, 22 << 20);
        assert_eq!(sim.segment_frees, 1);
        assert_eq!(sim.end_reserved_bytes, 2 << 20);
        assert_eq!(sim.unmatched_frees, 0);
        // With max_split_size 8 MiB, the 20 MiB segment (above it) serves no 4 MiB request
        // again once freed, and is not split: the second request gets a segment of its own.
        let sim =
            simulate(&trace, DeviceId(0), Settings { max_split_size_bytes: Some(8 << 20), ..Settings::default() });
        assert_eq!(sim.segment_alloc_sizes, vec![2 << 20, 20 << 20, 20 << 20]);
    }

    /// The case `max_split_size` is for: a large block freed, split for a small request, and the
    /// large request after it needs a new segment; with the limit the small request gets its own
    /// segment and the large one reuses the cached block.
    fn split_then_large(trace: &mut Trace) {
        trace.events.push(Event::new(EventKind::SegmentAlloc, 0, 0, 0xa000_0000, 100 << 20));
        alloc(trace, 1, 0xa000_0000, 100 << 20);
        free(trace, 2, 0xa000_0000);
        alloc(trace, 3, 0xa000_0000, 5 << 20);
        trace.events.push(Event::new(EventKind::SegmentAlloc, 4, 0, 0xb000_0000, 100 << 20));
        alloc(trace, 4, 0xb000_0000, 100 << 20);
    }

    #[test]
    fn max_split_size_keeps_large_blocks_for_large_requests() {
        let mut trace = Trace::default();
        split_then_large(&mut trace);
        let plain = simulate(&trace, DeviceId(0), Settings::default());
        assert_eq!(plain.segment_alloc_sizes, vec![100 << 20, 100 << 20]);
        assert_eq!(plain.peak_reserved_bytes, 200 << 20);
        let limited =
            simulate(&trace, DeviceId(0), Settings { max_split_size_bytes: Some(64 << 20), ..Settings::default() });
        assert_eq!(limited.segment_alloc_sizes, vec![100 << 20, 20 << 20]);
        assert_eq!(limited.peak_reserved_bytes, 120 << 20);
    }
}
