//! The allocator's segments and their fragmentation.
//!
//! The numbers follow PyTorch's `torch/cuda/_memory_viz.py` `segsum` and its allocator, so they
//! can be compared with them: a block counts as allocated only when `active_allocated` (what
//! `memory_allocated()` and a segment's `allocated_size` count); its internal waste is
//! `size - requested_size`; a block the program freed that waits for its streams
//! (`active_pending_free`) is neither allocated nor free (it is active: PyTorch's `active_bytes`
//! counts it, and nothing can use its memory until its streams are done), where `segsum` calls it
//! free; an `inactive` block is external free space. So `reserved = requested + free_internal +
//! awaiting_free + free_external`.

use vramscope_trace_format::{BlockState, DeviceId, Segment, Trace};

/// Fragmentation of one segment (or of all of a device's, added up).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct Fragmentation {
    /// Bytes reserved.
    pub reserved_bytes: u64,
    /// Bytes of blocks allocated and not freed by the program (`active_allocated`).
    pub allocated_bytes: u64,
    /// Bytes of blocks the program freed that still wait for their streams
    /// (`active_pending_free`): active, not allocated, not free either.
    pub awaiting_free_bytes: u64,
    /// Requested bytes of the allocated blocks.
    pub requested_bytes: u64,
    /// `allocated - requested`: rounding waste inside allocated blocks.
    pub free_internal_bytes: u64,
    /// Bytes of blocks that are not allocated (`inactive`).
    pub free_external_bytes: u64,
    /// The largest run of contiguous free bytes.
    pub largest_free_bytes: u64,
}

impl Fragmentation {
    /// Adds another segment's numbers to these totals (the largest free range is the larger).
    pub fn add(&mut self, other: &Self) {
        self.reserved_bytes = self.reserved_bytes.saturating_add(other.reserved_bytes);
        self.allocated_bytes = self.allocated_bytes.saturating_add(other.allocated_bytes);
        self.awaiting_free_bytes = self.awaiting_free_bytes.saturating_add(other.awaiting_free_bytes);
        self.requested_bytes = self.requested_bytes.saturating_add(other.requested_bytes);
        self.free_internal_bytes = self.free_internal_bytes.saturating_add(other.free_internal_bytes);
        self.free_external_bytes = self.free_external_bytes.saturating_add(other.free_external_bytes);
        self.largest_free_bytes = self.largest_free_bytes.max(other.largest_free_bytes);
    }

    /// `1 - largest free / total free`: 0 when all free space is one range, near 1 when it is
    /// scattered. 0 when nothing is free.
    pub fn external_fragmentation(&self) -> f64 {
        if self.free_external_bytes == 0 {
            0.0
        } else {
            1.0 - self.largest_free_bytes as f64 / self.free_external_bytes as f64
        }
    }
}

/// Fragmentation of one segment.
pub fn segment_fragmentation(segment: &Segment) -> Fragmentation {
    let mut f = Fragmentation { reserved_bytes: segment.size_bytes, ..Fragmentation::default() };
    let mut run = 0u64;
    let mut run_end = None;
    for block in &segment.blocks {
        if block.state == BlockState::ActivePendingFree {
            // Taken until its streams are done: it breaks a free range.
            f.awaiting_free_bytes += block.size_bytes;
            run = 0;
            run_end = None;
        } else if block.state == BlockState::ActiveAllocated {
            f.allocated_bytes += block.size_bytes;
            f.requested_bytes += block.requested_bytes;
            f.free_internal_bytes += block.size_bytes.saturating_sub(block.requested_bytes);
            run = 0;
            run_end = None;
        } else {
            f.free_external_bytes += block.size_bytes;
            // Only address-adjacent free blocks form one range.
            run = if run_end == Some(block.address) { run + block.size_bytes } else { block.size_bytes };
            run_end = Some(block.address.saturating_add(block.size_bytes));
            f.largest_free_bytes = f.largest_free_bytes.max(run);
        }
    }
    f
}

/// The final segment state of a device.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FinalState {
    /// Number of segments.
    pub segments: usize,
    /// Totals over the segments (`largest_free_bytes` is the largest of any segment).
    pub total: Fragmentation,
    /// Segments of private pools (`segment_pool_id` other than (0, 0): CUDA graphs, `MemPool`),
    /// which only their own pool's allocations can use.
    pub private_pool_segments: usize,
    /// Bytes those segments reserve.
    pub private_pool_reserved_bytes: u64,
}

/// The final segment state of a device, or `None` when the trace recorded no segments at all.
pub fn final_state(trace: &Trace, device: DeviceId) -> Option<FinalState> {
    if trace.segments.is_empty() {
        return None;
    }
    let mut state = FinalState::default();
    for segment in trace.segments.iter().filter(|s| s.device == device) {
        state.segments += 1;
        state.total.add(&segment_fragmentation(segment));
        if segment.pool_id != (0, 0) {
            state.private_pool_segments += 1;
            state.private_pool_reserved_bytes = state.private_pool_reserved_bytes.saturating_add(segment.size_bytes);
        }
    }
    Some(state)
}

#[cfg(test)]
mod tests {
    use vramscope_trace_format::{Block, StackId};

    use super::*;

    fn block(address: u64, size_bytes: u64, requested_bytes: u64, state: BlockState) -> Block {
        Block { address, size_bytes, requested_bytes, state, stack: StackId(0) }
    }

    #[test]
    fn hand_computed_segment() {
        // 2 MiB segment: [512 alloc (req 100)] [1024 free] [1536 freed, its free pending (req
        // 1000)] [rest alloc (req exact)]
        let base = 0x1000_0000;
        let rest = (2 << 20) - 512 - 1024 - 1536;
        let segment = Segment::new(
            DeviceId(0),
            base,
            2 << 20,
            vec![
                block(base, 512, 100, BlockState::ActiveAllocated),
                block(base + 512, 1024, 0, BlockState::Inactive),
                block(base + 1536, 1536, 1000, BlockState::ActivePendingFree),
                block(base + 3072, rest, rest, BlockState::ActiveAllocated),
            ],
        );
        let f = segment_fragmentation(&segment);
        // The pending free is not allocated (memory_allocated() dropped it at the request), and
        // still holds its memory: not free, and not part of a free range.
        assert_eq!(f.allocated_bytes, 512 + rest);
        assert_eq!(f.awaiting_free_bytes, 1536);
        assert_eq!(f.requested_bytes, 100 + rest);
        assert_eq!(f.free_internal_bytes, 412);
        assert_eq!(f.free_external_bytes, 1024);
        assert_eq!(f.largest_free_bytes, 1024);
        assert_eq!(
            f.reserved_bytes,
            f.requested_bytes + f.free_internal_bytes + f.awaiting_free_bytes + f.free_external_bytes
        );
        assert_eq!(f.external_fragmentation(), 0.0);
    }
}
