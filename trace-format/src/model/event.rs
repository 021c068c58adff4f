//! Allocator and driver events: the rows of a trace's timeline.

use super::ids::{ContextId, DeviceId, ProcessId, StackId};

/// What happened to memory at one instant.
///
/// The discriminants are stored in `.vtrace` files: never renumber them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum EventKind {
    /// A block was handed out by the framework's allocator (a tensor's storage).
    Alloc = 0,
    /// The block's owner freed it; the allocator may still wait for streams using it.
    FreeRequested = 1,
    /// The block is really free (stream-ordered frees complete here). Allocated memory drops here.
    FreeCompleted = 2,
    /// Memory was reserved from the driver (`cudaMalloc`) as a new segment.
    SegmentAlloc = 3,
    /// A segment was returned to the driver (`cudaFree`).
    SegmentFree = 4,
    /// Physical memory was mapped into an expandable segment.
    SegmentMap = 5,
    /// Physical memory was unmapped from an expandable segment.
    SegmentUnmap = 6,
}

impl EventKind {
    /// Every kind, in discriminant order.
    pub const ALL: [Self; 7] = [
        Self::Alloc,
        Self::FreeRequested,
        Self::FreeCompleted,
        Self::SegmentAlloc,
        Self::SegmentFree,
        Self::SegmentMap,
        Self::SegmentUnmap,
    ];

    /// The kind stored as `byte` in a file, if it is one.
    pub fn from_u8(byte: u8) -> Option<Self> {
        Self::ALL.get(byte as usize).copied()
    }

    /// The name PyTorch's snapshots use for this action.
    pub fn pytorch_name(self) -> &'static str {
        match self {
            Self::Alloc => "alloc",
            Self::FreeRequested => "free_requested",
            Self::FreeCompleted => "free_completed",
            Self::SegmentAlloc => "segment_alloc",
            Self::SegmentFree => "segment_free",
            Self::SegmentMap => "segment_map",
            Self::SegmentUnmap => "segment_unmap",
        }
    }
}

/// Bits of [`Event::flags`].
pub mod event_flags {
    /// `size_bytes` was not recorded but inferred (from the allocator's rounding rules).
    pub const SIZE_ESTIMATED: u8 = 1;
    /// Allocated before the range the trace was opened at ([`crate::range`]), at a time the
    /// trace no longer holds: the event stands for the block (or segment) alive at the range's
    /// start, and its time is 1 ns before that start.
    pub const BEFORE_RANGE: u8 = 2;
    /// Not reported by the source as an event: memory its running totals count but none of its
    /// events allocate (an `Alloc` standing for that difference, and the `FreeCompleted` that
    /// ends it), or the free of one of its blocks that the totals show but no event reports.
    pub const UNREPORTED: u8 = 4;
}

/// One allocator or driver event.
///
/// For `Alloc` and the frees, `size_bytes` is the block's size as the allocator handed it out and
/// `requested_bytes` what the program asked for; for segment events both are the segment's (or
/// mapping's) size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// Time of the event on the trace's clock, in nanoseconds.
    pub time_ns: i64,
    /// Device address of the block or segment.
    pub address: u64,
    /// Size of the block or segment.
    pub size_bytes: u64,
    /// Size the program requested (equal to `size_bytes` for segment events).
    pub requested_bytes: u64,
    /// CUDA stream (as the raw handle value; 0 is the default stream).
    pub stream: u64,
    /// Where it was allocated.
    pub stack: StackId,
    /// Compile context and user metadata.
    pub context: ContextId,
    /// Which process of the trace.
    pub process: ProcessId,
    /// Device index; -1 for host (CPU) memory.
    pub device: DeviceId,
    /// What happened.
    pub kind: EventKind,
    /// [`event_flags`] bits.
    pub flags: u8,
}

impl Event {
    /// An event with the given kind, time and place and everything else zero.
    pub fn new(kind: EventKind, time_ns: i64, device: impl Into<DeviceId>, address: u64, size_bytes: u64) -> Self {
        Self {
            time_ns,
            address,
            size_bytes,
            requested_bytes: size_bytes,
            stream: 0,
            stack: StackId(0),
            context: ContextId(0),
            process: ProcessId(0),
            device: device.into(),
            kind,
            flags: 0,
        }
    }
}
