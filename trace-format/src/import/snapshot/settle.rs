//! Sizes of a snapshot's events: its trace entries record what the program requested; a block
//! alive at the end has its real size in the final segment state, and every other size is the
//! allocator's default rounding of the request, flagged as estimated. Frees take their
//! allocation's size. Used by the one-thread build (`build.rs`) and the build in halves
//! (`halves.rs`) alike.

use rustc_hash::FxHashMap;

use crate::model::event::{Event, EventKind, event_flags};
use crate::model::segment::{Block, BlockState};

/// The smallest block the CUDA caching allocator hands out; sizes round up to a multiple of it.
const MIN_BLOCK_BYTES: u64 = 512;

/// Rounds a requested size the way the CUDA caching allocator rounds block sizes by default.
fn estimated_block_size(requested: u64) -> u64 {
    requested.max(1).div_ceil(MIN_BLOCK_BYTES).saturating_mul(MIN_BLOCK_BYTES)
}

/// Pairs frees with their allocations as a device's events are built, for [`settle_sizes`].
#[derive(Default)]
pub(super) struct Pairing {
    /// The allocation open at each address, by its index.
    live: FxHashMap<u64, u32>,
    /// Requests to free a block allocated before the trace, not completed since, by address:
    /// the index of the request (the block may still wait for its streams at the end, where the
    /// final state knows its size).
    requests: FxHashMap<u64, u32>,
}

/// While events are built, `size_bytes` holds the size the entry recorded (what the program
/// requested) and a free's `slack_bytes` the index of its allocation (this when it has none);
/// [`settle_sizes`] then gives each event its block's size and what the allocator added.
pub(super) const UNPAIRED: u32 = u32::MAX;
/// A flag bit [`settle_sizes`] uses for a moment: the allocation's size is the final state's.
pub(super) const EXACT: u8 = 0x80;

impl Pairing {
    /// Notes `event`, to be pushed at `index`.
    pub(super) fn note(&mut self, index: usize, event: &mut Event) {
        match event.kind {
            EventKind::Alloc => {
                self.live.insert(event.address, index as u32);
            }
            EventKind::FreeRequested => {
                event.slack_bytes = self.live.get(&event.address).copied().unwrap_or(UNPAIRED);
                if event.slack_bytes == UNPAIRED {
                    self.requests.insert(event.address, index as u32);
                }
            }
            EventKind::FreeCompleted => {
                event.slack_bytes = self.live.remove(&event.address).unwrap_or(UNPAIRED);
                if !self.requests.is_empty() {
                    self.requests.remove(&event.address);
                }
            }
            _ => {}
        }
    }
}

/// Trace entries record the requested size only. A block still alive at the end of the trace is
/// in the final segment state with its real size; every other size is estimated with the
/// allocator's default rounding and flagged as such. Frees take the size of their alloc.
pub(super) fn settle_sizes(events: &mut [Event], pairing: Pairing, final_blocks: &FxHashMap<u64, Block>) {
    mark_exact(events, &pairing.live, final_blocks);
    settle_part(events, 0);
    settle_waiting(events, &pairing.requests, final_blocks);
}

/// Gives the requests to free a block allocated before the trace (`requests`: by address, their
/// index) whose block still waits for its streams at the end the final state's size of it: the
/// size its allocation had, which allocated memory then drops by.
pub(super) fn settle_waiting(
    events: &mut [Event],
    requests: &FxHashMap<u64, u32>,
    final_blocks: &FxHashMap<u64, Block>,
) {
    for (address, &i) in requests {
        if let (Some(block), Some(event)) = (final_blocks.get(address), events.get_mut(i as usize))
            && block.state == BlockState::ActivePendingFree
        {
            event.size_bytes = block.size_bytes;
            event.set_requested_bytes(block.requested_bytes);
            event.flags &= !event_flags::SIZE_ESTIMATED;
        }
    }
}

/// Gives the allocations open at the end (`live`: by address, their index) whose block the
/// final state holds that block's size, marked [`EXACT`] for [`settle_part`].
pub(super) fn mark_exact(events: &mut [Event], live: &FxHashMap<u64, u32>, final_blocks: &FxHashMap<u64, Block>) {
    for (address, &i) in live {
        if let (Some(block), Some(event)) = (final_blocks.get(address), events.get_mut(i as usize)) {
            let requested = event.size_bytes;
            event.size_bytes = block.size_bytes;
            event.set_requested_bytes(requested);
            event.flags |= EXACT;
        }
    }
}

/// Settles the sizes of `events`, the events of a device from index `base` on: each
/// allocation's by its own, each free's by its allocation's. A free whose allocation comes
/// before `base` is left for the caller ([`settle_free`]).
pub(super) fn settle_part(events: &mut [Event], base: usize) {
    for i in 0..events.len() {
        let event = events[i];
        if event.kind == EventKind::Alloc {
            // Not settled yet: the size the entry recorded.
            let requested = event.size_bytes;
            if event.flags & EXACT == 0 {
                events[i].size_bytes = estimated_block_size(requested);
                events[i].set_requested_bytes(requested);
                events[i].flags |= event_flags::SIZE_ESTIMATED;
            }
            events[i].flags &= !EXACT;
        } else if matches!(event.kind, EventKind::FreeRequested | EventKind::FreeCompleted) {
            // The allocation comes earlier, so it is settled already.
            let alloc = match event.slack_bytes {
                UNPAIRED => None,
                a if (a as usize) < base => continue,
                a => Some(a as usize - base).filter(|&a| a < i).and_then(|a| events.get(a)).copied(),
            };
            settle_free(&mut events[i], alloc);
        }
    }
}

/// Settles a free's size by its allocation's (settled already), or estimates it.
pub(super) fn settle_free(free: &mut Event, alloc: Option<Event>) {
    let requested = free.size_bytes;
    match alloc {
        Some(alloc) => {
            free.size_bytes = alloc.size_bytes;
            free.flags |= alloc.flags & event_flags::SIZE_ESTIMATED;
        }
        None => {
            free.size_bytes = estimated_block_size(requested);
            free.flags |= event_flags::SIZE_ESTIMATED;
        }
    }
    free.set_requested_bytes(requested);
}
