//! The values of the pickle machine: what its stack, its containers and its memo hold.

use crate::model::ids::{FrameId, StackId, StringId};

/// What a record stands for; the index is into the [`Sink`]'s own tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RecordKind {
    /// A trace entry.
    Entry,
    /// A block of a segment.
    Block,
    /// A segment.
    Segment,
    /// A record of `external_annotations` (a `record_function` range's start or end).
    External,
}

impl RecordKind {
    /// The kind as a small number (packed memo slots hold it).
    pub(crate) fn code(self) -> u64 {
        match self {
            Self::Entry => 0,
            Self::Block => 1,
            Self::Segment => 2,
            Self::External => 3,
        }
    }

    /// The kind of [`RecordKind::code`].
    pub(crate) fn from_code(code: u64) -> Self {
        match code {
            1 => Self::Block,
            2 => Self::Segment,
            3 => Self::External,
            _ => Self::Entry,
        }
    }
}

/// A handle to a container: an index into the pool's container table and the slot's generation,
/// so that a stale handle to a dropped container is detected instead of reading another one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Handle {
    pub(super) index: u32,
    pub(super) generation: u32,
}

/// One value on the machine's stack or in a container.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(u64)]
pub(crate) enum Value {
    /// Python `None`.
    None,
    /// A memo slot that was never written.
    Missing,
    /// `True` / `False`.
    Bool(bool),
    /// An integer that fits `i64`.
    Int(i64),
    /// An integer in `[2^63, 2^64)` (addresses can be that large).
    UInt(u64),
    /// An integer too large for 64 bits.
    BigInt,
    /// A float.
    Float(f64),
    /// An interned string.
    Str(StringId),
    /// A bytes object of this length (its content is not kept).
    Bytes(u64),
    /// A list, tuple, dict or set.
    Container(Handle),
    /// A frame dict already interned.
    Frame(FrameId),
    /// A list of frames already interned.
    Stack(StackId),
    /// A dict already turned into a record by the sink.
    Record(RecordKind, u32),
}

impl Value {
    /// The value as an unsigned 64-bit integer, if it is a non-negative integer that fits.
    pub(crate) fn as_u64(self) -> Option<u64> {
        match self {
            Self::Int(v) => u64::try_from(v).ok(),
            Self::UInt(v) => Some(v),
            Self::Bool(b) => Some(u64::from(b)),
            _ => None,
        }
    }

    /// The value as a signed 64-bit integer, if it is an integer that fits.
    pub(crate) fn as_i64(self) -> Option<i64> {
        match self {
            Self::Int(v) => Some(v),
            Self::Bool(b) => Some(i64::from(b)),
            _ => None,
        }
    }
}

/// Which Python type a container is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ContainerKind {
    /// `list`.
    List,
    /// `tuple`.
    Tuple,
    /// `dict`; items alternate key, value.
    Dict,
    /// `set` or `frozenset`.
    Set,
}
