//! The allocator's segments and their blocks at one instant (a snapshot's final state).

use super::ids::{DeviceId, ProcessId, StackId};

/// State of a block inside a segment.
///
/// The discriminants are stored in `.vtrace` files: never renumber them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum BlockState {
    /// Handed out to a tensor.
    ActiveAllocated = 0,
    /// Freed by its owner, waiting for streams that used it.
    ActivePendingFree = 1,
    /// Free: cached by the allocator for reuse.
    Inactive = 2,
}

impl BlockState {
    /// The state stored as `byte` in a file, if it is one.
    pub fn from_u8(byte: u8) -> Option<Self> {
        match byte {
            0 => Some(Self::ActiveAllocated),
            1 => Some(Self::ActivePendingFree),
            2 => Some(Self::Inactive),
            _ => None,
        }
    }

    /// The name PyTorch's snapshots use.
    pub fn pytorch_name(self) -> &'static str {
        match self {
            Self::ActiveAllocated => "active_allocated",
            Self::ActivePendingFree => "active_pending_free",
            Self::Inactive => "inactive",
        }
    }
}

/// Which of the caching allocator's pools a segment belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum SegmentPool {
    /// Not known.
    #[default]
    Unknown = 0,
    /// The small-allocation pool (2 MiB segments, blocks up to 1 MiB).
    Small = 1,
    /// The large-allocation pool.
    Large = 2,
}

impl SegmentPool {
    /// The pool stored as `byte` in a file, if it is one.
    pub fn from_u8(byte: u8) -> Option<Self> {
        match byte {
            0 => Some(Self::Unknown),
            1 => Some(Self::Small),
            2 => Some(Self::Large),
            _ => None,
        }
    }
}

/// A block inside a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    /// Device address.
    pub address: u64,
    /// Size of the block as the allocator carved it.
    pub size_bytes: u64,
    /// Size the program asked for (0 for free blocks).
    pub requested_bytes: u64,
    /// Allocated, pending free, or free.
    pub state: BlockState,
    /// Where it was allocated (the empty stack when not recorded).
    pub stack: StackId,
}

/// A segment: one reservation from the driver, cut into blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Device index; -1 for host memory.
    pub device: DeviceId,
    /// Which process of the trace.
    pub process: ProcessId,
    /// Device address of the segment's start.
    pub address: u64,
    /// Bytes reserved.
    pub size_bytes: u64,
    /// Stream the segment is bound to.
    pub stream: u64,
    /// Small or large pool.
    pub pool: SegmentPool,
    /// Memory pool id (PyTorch's `segment_pool_id`, non-zero for CUDA graph pools).
    pub pool_id: (u64, u64),
    /// Whether the segment grows by mapping pages (`expandable_segments`).
    pub is_expandable: bool,
    /// Where the segment was allocated.
    pub stack: StackId,
    /// Blocks in address order.
    pub blocks: Vec<Block>,
}

/// The largest segment of the caching allocator's small pool (its segments are 2 MiB; the large
/// pool's are 20 MiB, or 10 MiB and more).
const SMALL_SEGMENT_BYTES: u64 = 2 << 20;

impl Segment {
    /// A segment of the default pool (small when it is 2 MiB or less) on the default stream, of
    /// the first process, with no recorded stack, holding `blocks`.
    pub fn new(device: DeviceId, address: u64, size_bytes: u64, blocks: Vec<Block>) -> Self {
        Self {
            device,
            process: ProcessId(0),
            address,
            size_bytes,
            stream: 0,
            pool: if size_bytes <= SMALL_SEGMENT_BYTES { SegmentPool::Small } else { SegmentPool::Large },
            pool_id: (0, 0),
            is_expandable: false,
            stack: StackId(0),
            blocks,
        }
    }
}

impl Block {
    /// A block with no recorded stack.
    pub fn new(address: u64, size_bytes: u64, requested_bytes: u64, state: BlockState) -> Self {
        Self { address, size_bytes, requested_bytes, state, stack: StackId(0) }
    }
}
