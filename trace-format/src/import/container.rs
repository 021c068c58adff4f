//! Compressed containers (gzip, zstd) around any supported format: inflated in a stream under a
//! budget, then recognised again by their content.
//!
//! A container is not a format: `torch.profiler.tensorboard_trace_handler(use_gzip=True)` writes
//! Chrome traces as `.pt.trace.json.gz`, the profiler's raw memory timeline is `.raw.json.gz`,
//! and people gzip snapshot pickles to share them. What is inside decides how it is read.

use std::cell::Cell;
use std::io::Read;

use crate::error::{Error, Result};
use crate::progress::Progress;

/// The gzip magic.
pub(crate) const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
/// The zstd frame magic (little-endian 0xFD2FB528).
pub(crate) const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// Inflated bytes allowed per compressed byte: real traces compress 5 to 40 times; a file that
/// inflates far beyond that is a decompression bomb, not a trace.
pub const MAX_INFLATE_RATIO: u64 = 256;
/// Inflated bytes allowed on top of the ratio, so that small files are never refused.
pub const INFLATE_ALLOWANCE_BYTES: u64 = 64 << 20;
/// Inflated bytes allowed at most, whatever the file's size.
pub const MAX_INFLATED_BYTES: u64 = 8 << 30;
/// Inflated in pieces of this size, with progress and cancellation between them.
const PIECE_BYTES: usize = 4 << 20;

/// A compression format around a file's content.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// gzip (RFC 1952), one member or several.
    Gzip,
    /// Zstandard frames.
    Zstd,
}

impl Compression {
    /// Its common name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Gzip => "gzip",
            Self::Zstd => "zstd",
        }
    }
}

/// The budget for inflating `compressed_bytes` of data.
pub fn inflate_budget(compressed_bytes: u64) -> u64 {
    compressed_bytes.saturating_mul(MAX_INFLATE_RATIO).saturating_add(INFLATE_ALLOWANCE_BYTES).min(MAX_INFLATED_BYTES)
}

/// Counts the compressed bytes the decoder has consumed, for progress.
struct Counting<'a> {
    data: &'a [u8],
    consumed: &'a Cell<u64>,
}

impl Read for Counting<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.data.read(buf)?;
        self.consumed.set(self.consumed.get() + n as u64);
        Ok(n)
    }
}

/// How much inflating may still produce, out of the [`inflate_budget`] of the file it started
/// from (shared by every layer of nested containers).
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// Bytes inflating may still produce.
    pub left: u64,
    /// Size of the file on disk.
    pub file_bytes: u64,
}

/// Inflates `data` completely, refusing more than `budget.left` bytes of output. Progress goes
/// over the first half of the compressed bytes' range; [`Inner`] maps the inner read onto the
/// second half.
pub fn inflate(kind: Compression, data: &[u8], budget: Budget, progress: &dyn Progress) -> Result<Vec<u8>> {
    let total = data.len() as u64;
    let consumed = Cell::new(0u64);
    let source = Counting { data, consumed: &consumed };
    let mut decoder: Box<dyn Read + '_> = match kind {
        Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(source)),
        Compression::Zstd => {
            let mut decoder = zstd::stream::read::Decoder::new(source)
                .map_err(|e| Error::Structure(format!("the zstd data cannot be decompressed: {e}")))?;
            // The window a frame may ask for is held in memory: no more than the budget allows.
            let window_log = (64 - budget.left.max(1 << 10).leading_zeros()).clamp(10, 27);
            decoder
                .window_log_max(window_log)
                .map_err(|e| Error::Structure(format!("the zstd data cannot be decompressed: {e}")))?;
            Box::new(decoder)
        }
    };
    let mut out = Vec::new();
    loop {
        let room = budget.left.saturating_add(1).saturating_sub(out.len() as u64);
        if room == 0 {
            return Err(Error::Structure(format!(
                "the {} data inflates to more than vramscope allows for a file of {} bytes ({} MiB in all: \
                 {MAX_INFLATE_RATIO} times the file plus {} MiB, at most {} GiB), far more than any real trace \
                 of that size; refusing it",
                kind.name(),
                budget.file_bytes,
                inflate_budget(budget.file_bytes) >> 20,
                INFLATE_ALLOWANCE_BYTES >> 20,
                MAX_INFLATED_BYTES >> 30
            )));
        }
        let want = room.min(PIECE_BYTES as u64);
        let read = decoder.by_ref().take(want).read_to_end(&mut out).map_err(|e| {
            Error::Structure(format!(
                "the {} data cannot be decompressed after {} inflated bytes (truncated or corrupt?): {e}",
                kind.name(),
                out.len()
            ))
        })?;
        if read == 0 {
            break;
        }
        if !progress.update(consumed.get() / 2, total) {
            return Err(Error::Cancelled);
        }
    }
    if out.is_empty() {
        return Err(Error::Structure(format!("the {} data is empty once decompressed", kind.name())));
    }
    Ok(out)
}

/// Progress of reading what a container held, reported on the container's scale: the second half
/// of its bytes (the first went to inflating them).
pub struct Inner<'a> {
    /// The container's progress.
    pub outer: &'a dyn Progress,
    /// Bytes of the container.
    pub outer_total: u64,
}

impl Progress for Inner<'_> {
    fn update(&self, done: u64, total: u64) -> bool {
        let half = self.outer_total / 2;
        let scaled = if total == 0 { 0 } else { (done.min(total) as u128 * half as u128 / total as u128) as u64 };
        self.outer.update(half + scaled, self.outer_total)
    }
}
