//! Allocator and driver events: the rows of a trace's timeline.

use super::ids::{ContextId, DeviceId, ProcessId, StackId};
use super::stream::StreamId;

/// What happened to memory at one instant.
///
/// The discriminants are stored in `.vtrace` files: never renumber them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum EventKind {
    /// A block was handed out by the framework's allocator (a tensor's storage).
    Alloc = 0,
    /// The block's owner freed it; the allocator may still wait for streams using it. Allocated
    /// memory (PyTorch's `memory_allocated()`) drops here; active memory stays until the free
    /// completes.
    FreeRequested = 1,
    /// The block is really free (stream-ordered frees complete here): active memory drops here,
    /// and so does allocated memory on a device whose source reports only this free
    /// ([`Event::ends_allocation`]).
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
/// [`Event::requested_bytes`] what the program asked for; for segment events both are the
/// segment's (or mapping's) size.
///
/// 48 bytes: a trace holds tens of millions of them. What the program asked for is kept as what
/// the allocator added to it (`slack_bytes`, below 4 GiB for any allocator's rounding) and the
/// stream as a [`StreamId`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// Time of the event on the trace's clock, in nanoseconds.
    pub time_ns: i64,
    /// Device address of the block or segment.
    pub address: u64,
    /// Size of the block or segment.
    pub size_bytes: u64,
    /// What the allocator added to the program's request: `size_bytes` less the requested size
    /// (0 for segment events). Read and set through [`Event::requested_bytes`] and
    /// [`Event::set_requested_bytes`].
    pub slack_bytes: u32,
    /// CUDA stream ([`StreamId::raw`] is its handle; 0 is the default stream).
    pub stream: StreamId,
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
            slack_bytes: 0,
            stream: StreamId::DEFAULT,
            stack: StackId(0),
            context: ContextId(0),
            process: ProcessId(0),
            device: device.into(),
            kind,
            flags: 0,
        }
    }

    /// Whether this event ends its block's allocation as the program sees it: the free the
    /// program requested, or, on a device whose source reports frees in one step
    /// (`two_step` false: [`crate::Trace::frees_in_two_steps`]), the completed free.
    /// PyTorch's `memory_allocated()` drops there.
    pub fn ends_allocation(&self, two_step: bool) -> bool {
        match self.kind {
            EventKind::FreeRequested => true,
            EventKind::FreeCompleted => !two_step,
            _ => false,
        }
    }

    /// The size the program requested: `size_bytes` less what the allocator added.
    pub fn requested_bytes(&self) -> u64 {
        self.size_bytes.saturating_sub(u64::from(self.slack_bytes))
    }

    /// Records that the program requested `requested` bytes of this block of `size_bytes`. A
    /// request above the block's size (no allocator hands out less than asked) reads back as
    /// the block's size, and one 4 GiB or more below it as 4 GiB below.
    pub fn set_requested_bytes(&mut self, requested: u64) {
        self.slack_bytes = u32::try_from(self.size_bytes.saturating_sub(requested)).unwrap_or(u32::MAX);
    }

    /// This event with `requested` as its requested size (see [`Event::set_requested_bytes`]).
    pub fn with_requested_bytes(mut self, requested: u64) -> Self {
        self.set_requested_bytes(requested);
        self
    }
}

const _: () = assert!(size_of::<Event>() == 48, "an Event takes 48 bytes: tens of millions of them are held");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requested_bytes_are_kept_as_what_the_allocator_added() {
        let mut e = Event::new(EventKind::Alloc, 0, 0, 0x1000, 1536);
        assert_eq!(e.requested_bytes(), 1536, "a new event requested its size");
        e.set_requested_bytes(1000);
        assert_eq!((e.requested_bytes(), e.slack_bytes), (1000, 536));
        // Above the block's size: the block's size.
        e.set_requested_bytes(4096);
        assert_eq!(e.requested_bytes(), 1536);
        // 4 GiB or more below it: 4 GiB below (no allocator rounds that far).
        let mut huge = Event::new(EventKind::Alloc, 0, 0, 0x1000, 10 << 30);
        huge.set_requested_bytes(1);
        assert_eq!(huge.requested_bytes(), (10 << 30) - u64::from(u32::MAX));
        huge.set_requested_bytes(7 << 30);
        assert_eq!(huge.requested_bytes(), 7 << 30);
        assert_eq!(Event { size_bytes: 0, ..e }.requested_bytes(), 0);
    }
}
