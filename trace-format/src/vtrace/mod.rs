//! The `.vtrace` file format: chunked, append-only, compressed. `docs/FORMAT.md` specifies it
//! byte by byte; this is the summary.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `89 56 54 52 41 43 45 0a` (`\x89VTRACE\n`) |
//! | 8 | 2 | format version, little-endian (this build writes 1, reads 1) |
//! | 10 | 2 | flags, 0 |
//! | 12 | 4 | reserved, 0 |
//! | 16 | .. | chunks until the end of the file |
//!
//! Each chunk is a 16-byte header followed by its stored payload:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 1 | kind ([`ChunkKind`]) |
//! | 1 | 1 | codec: 0 stored, 1 zstd |
//! | 2 | 2 | reserved, 0 |
//! | 4 | 4 | stored payload length (LE) |
//! | 8 | 4 | payload length after decompression (LE, at most 256 MiB) |
//! | 12 | 4 | CRC-32 (IEEE) of header bytes 0..12 followed by the stored payload |
//!
//! A writer appends chunks and never rewrites one, so a writer killed mid-run leaves every
//! chunk but the last intact; a reader loads chunks in order and stops at the first damaged one,
//! reporting where the damage starts. Interned tables (strings, frames, stacks, contexts) are
//! written as they grow, before the first chunk that refers to their new entries.

mod codec;
mod reader;
mod writer;

pub use reader::{Damage, Loaded, read, read_within};
pub use writer::{Writer, write};

/// The first eight bytes of every `.vtrace` file.
pub const MAGIC: [u8; 8] = *b"\x89VTRACE\n";
/// The format version this build writes.
pub const VERSION: u16 = 1;
/// Size of the file header.
pub const HEADER_BYTES: usize = 16;
/// Size of a chunk header.
pub const CHUNK_HEADER_BYTES: usize = 16;
/// Largest decompressed chunk payload a reader accepts.
pub const MAX_CHUNK_BYTES: u32 = 256 << 20;
/// Events per events chunk written by [`Writer`].
pub const EVENTS_PER_CHUNK: usize = 1 << 16;
/// An annotation's device on disk when it applies to every device of its process.
pub const ANNOTATION_ALL_DEVICES: i16 = i16::MIN;

/// What a chunk holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ChunkKind {
    /// The trace's [`crate::Metadata`] as JSON; a later one replaces an earlier one.
    Metadata = 1,
    /// New interned strings.
    Strings = 2,
    /// New interned frames.
    Frames = 3,
    /// New interned stacks.
    Stacks = 4,
    /// New interned event contexts.
    Contexts = 5,
    /// Allocator and driver events.
    Events = 6,
    /// Segments of the final allocator state.
    Segments = 7,
    /// Annotations.
    Annotations = 8,
    /// Out-of-memory events.
    Ooms = 9,
    /// Counter series.
    Counters = 10,
    /// Tags.
    Tags = 11,
    /// The writer finished cleanly; nothing follows.
    End = 12,
}

impl ChunkKind {
    fn from_u8(byte: u8) -> Option<Self> {
        use ChunkKind::{
            Annotations, Contexts, Counters, End, Events, Frames, Metadata, Ooms, Segments, Stacks, Strings, Tags,
        };
        [Metadata, Strings, Frames, Stacks, Contexts, Events, Segments, Annotations, Ooms, Counters, Tags, End]
            .get(usize::from(byte).wrapping_sub(1))
            .copied()
    }
}
