//! Compressed containers (gzip, zstd) around any supported format: inflated in a stream under a
//! budget, then recognised again by their content.
//!
//! A container is not a format: `torch.profiler.tensorboard_trace_handler(use_gzip=True)` writes
//! Chrome traces as `.pt.trace.json.gz`, the profiler's raw memory timeline is `.raw.json.gz`,
//! and people gzip snapshot pickles to share them. What is inside decides how it is read.

use std::cell::{Cell, RefCell};
use std::io::Read;
use std::rc::Rc;

use crate::error::{Error, Result};
use crate::memory::Limit;
use crate::progress::Progress;

/// The gzip magic.
pub(crate) const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
/// The zstd frame magic (little-endian 0xFD2FB528).
pub(crate) const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// Inflated bytes allowed per compressed byte, shared by every nested layer. One layer of gzip
/// cannot inflate more than 1032 to 1 (deflate's ceiling), so a valid gzip file is never refused
/// for its ratio, however repetitive the trace inside; only layers nested in each other or zstd
/// can go past it, and a file that does is a decompression bomb. Real traces and snapshots
/// compress 4 to 18 times (gzip -9 of the fixtures and of real profiler output).
pub const MAX_INFLATE_RATIO: u64 = 1100;
/// Inflated bytes allowed on top of the ratio, so that small files are never refused.
pub const INFLATE_ALLOWANCE_BYTES: u64 = 64 << 20;
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

/// The budget for inflating `compressed_bytes` of data: time, not memory, since JSON content is
/// parsed as it is inflated. Content that is held whole is also bounded by memory
/// ([`Inflating::hold_within`]).
pub fn inflate_budget(compressed_bytes: u64) -> u64 {
    compressed_bytes.saturating_mul(MAX_INFLATE_RATIO).saturating_add(INFLATE_ALLOWANCE_BYTES)
}

/// Counts the compressed bytes the decoder has consumed, for progress.
struct Counting<'a> {
    data: &'a [u8],
    consumed: Rc<Cell<u64>>,
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

/// A container's content as a stream: inflated piece by piece, never past the budget, with
/// progress over the first half of the compressed bytes' range ([`Inner`] maps what reads the
/// content onto the second half). Why a read failed (over budget, cancelled, corrupt) is kept
/// in [`Inflating::failure`], so that a parser's error can be told apart from the stream's.
pub struct Inflating<'a> {
    decoder: Box<dyn Read + 'a>,
    kind: Compression,
    consumed: Rc<Cell<u64>>,
    total: u64,
    produced: u64,
    budget: Budget,
    progress: &'a dyn Progress,
    next_report: u64,
    failure: Rc<RefCell<Option<Error>>>,
    /// The memory what is inflated may take, once it is held whole rather than parsed as it comes.
    held: Option<Limit>,
}

impl<'a> Inflating<'a> {
    /// Starts inflating `data`.
    pub fn new(kind: Compression, data: &'a [u8], budget: Budget, progress: &'a dyn Progress) -> Result<Self> {
        let consumed = Rc::new(Cell::new(0u64));
        let source = Counting { data, consumed: Rc::clone(&consumed) };
        let decoder: Box<dyn Read + 'a> = match kind {
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
        Ok(Self {
            decoder,
            kind,
            consumed,
            total: data.len() as u64,
            produced: 0,
            budget,
            progress,
            next_report: PIECE_BYTES as u64,
            failure: Rc::default(),
            held: None,
        })
    }

    /// From now on what is inflated is held whole (it is not JSON, which is parsed as it comes):
    /// it may not take more than `limit`.
    pub fn hold_within(&mut self, limit: Limit) {
        self.held = Some(limit);
    }

    /// Bytes inflated so far.
    pub fn produced(&self) -> u64 {
        self.produced
    }

    /// Why the stream failed, if it did (taken once).
    pub fn failure(&self) -> Rc<RefCell<Option<Error>>> {
        Rc::clone(&self.failure)
    }

    fn fail(&self, error: Error) -> std::io::Error {
        let message = error.to_string();
        *self.failure.borrow_mut() = Some(error);
        std::io::Error::other(message)
    }

    fn over_budget(&self) -> Error {
        Error::Structure(format!(
            "the {} data inflates to more than vramscope allows for a file of {} bytes ({} MiB in all: \
             {MAX_INFLATE_RATIO} times the file plus {} MiB, more than one layer of gzip can hold), far more \
             than any real trace of that size: a decompression bomb; refusing it",
            self.kind.name(),
            self.budget.file_bytes,
            inflate_budget(self.budget.file_bytes) >> 20,
            INFLATE_ALLOWANCE_BYTES >> 20,
        ))
    }
}

impl Read for Inflating<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        // One byte past the budget is asked for, to tell "exactly at it" from "beyond it".
        let room = self.budget.left.saturating_add(1).saturating_sub(self.produced);
        if room == 0 {
            return Err(self.fail(self.over_budget()));
        }
        let want = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let n = match self.decoder.read(&mut buf[..want]) {
            Ok(n) => n,
            Err(e) => {
                let error = Error::Structure(format!(
                    "the {} data cannot be decompressed after {} inflated bytes (truncated or corrupt?): {e}",
                    self.kind.name(),
                    self.produced
                ));
                return Err(self.fail(error));
            }
        };
        self.produced += n as u64;
        if self.produced > self.budget.left {
            return Err(self.fail(self.over_budget()));
        }
        if let Some(limit) = self.held.filter(|l| self.produced > l.bytes) {
            let what = format!("the {} data's content, held whole once decompressed", self.kind.name());
            return Err(self.fail(Error::Memory { what, needed_bytes: self.produced, limit }));
        }
        if self.produced >= self.next_report {
            self.next_report = self.produced + PIECE_BYTES as u64;
            if !self.progress.update(self.consumed.get() / 2, self.total) {
                return Err(self.fail(Error::Cancelled));
            }
        }
        Ok(n)
    }
}

/// Reads the first `n` bytes of a stream (fewer if it ends), with its own failure as the error.
pub fn read_head(stream: &mut Inflating<'_>, n: usize) -> Result<Vec<u8>> {
    let failure = stream.failure();
    let mut head = Vec::with_capacity(n);
    Read::take(&mut *stream, n as u64)
        .read_to_end(&mut head)
        .map_err(|e| failure.borrow_mut().take().unwrap_or(Error::Io(e)))?;
    Ok(head)
}

/// Reads the rest of a stream, with its own failure as the error.
pub fn read_to_end(stream: &mut Inflating<'_>, out: &mut Vec<u8>) -> Result<()> {
    let failure = stream.failure();
    stream.read_to_end(out).map_err(|e| failure.borrow_mut().take().unwrap_or(Error::Io(e)))?;
    Ok(())
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
