//! The flight recorder's writer: the process's records go round a ring file of fixed size
//! (`vramscope_wire::ring`) instead of growing a file, with what is alive kept in memory so that
//! each segment begins with the allocations alive then. Called from the buffer's flush, under
//! its lock, on the writer thread (or at exit): a driver call itself only appends to the buffer.
//! The file is synced to disk at most every [`SYNC_EVERY_NS`], so a machine that loses power
//! loses at most that much more than a killed process does.

use std::collections::HashMap;

use libc::c_int;
use vramscope_wire::ring::{self, ALIVE_CUT_SHORT, SEGMENTS};
use vramscope_wire::{Api, RECORD_BYTES};

/// How often the ring is synced to disk.
pub const SYNC_EVERY_NS: u64 = 250_000_000;

/// What a record leaves alive, and what ends it: allocations (by address), physical memory (by
/// handle), mappings and address ranges (by address), a pool's reserved bytes (by handle).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Key {
    Allocation(u64),
    Handle(u64),
    Mapping(u64),
    Range(u64),
    Pool(u64),
}

/// A ring being written.
pub struct Ring {
    fd: c_int,
    segment_bytes: u64,
    /// Begin a segment when the current one is older than this (a time bound), if set.
    span_ns: Option<u64>,
    /// The segment written now, its generation and when it began.
    index: u32,
    generation: u64,
    begun_ns: u64,
    /// Records in it (the alive list and events).
    count: u64,
    /// Allocations alive, each as the record that made it (device in bytes 24..28).
    live: HashMap<Key, [u8; RECORD_BYTES]>,
    synced_ns: u64,
}

fn pwrite_all(fd: c_int, mut bytes: &[u8], mut offset: u64) {
    while !bytes.is_empty() {
        let Ok(at) = libc::off_t::try_from(offset) else { return };
        // SAFETY: `bytes` is valid for its length.
        let n = unsafe { libc::pwrite(fd, bytes.as_ptr().cast(), bytes.len(), at) };
        if n <= 0 {
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        bytes = bytes.get(n as usize..).unwrap_or_default();
        offset += n as u64;
    }
}

fn field_u64(record: &[u8], at: usize) -> u64 {
    record.get(at..at + 8).and_then(|b| b.try_into().ok()).map_or(0, u64::from_le_bytes)
}

fn field_u32(record: &[u8], at: usize) -> u32 {
    record.get(at..at + 4).and_then(|b| b.try_into().ok()).map_or(0, u32::from_le_bytes)
}

impl Ring {
    /// Makes the ring `path` (a NUL-terminated path) of at most `budget` bytes, replacing what
    /// a process of the same pid left there; `None` where it cannot be made.
    pub fn create(path: &std::ffi::CStr, budget: u64, span_ns: Option<u64>, pid: u32, now_ns: u64) -> Option<Self> {
        let segment_bytes = ring::segment_bytes_for(budget);
        // SAFETY: a NUL-terminated path; the flags and mode are plain integers.
        let fd =
            unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC, 0o644) };
        if fd < 0 {
            return None;
        }
        let size = libc::off_t::try_from(ring::file_bytes(segment_bytes)).ok()?;
        // SAFETY: `fd` was just opened for writing.
        if unsafe { libc::ftruncate(fd, size) } != 0 {
            // SAFETY: `fd` is ours.
            unsafe { libc::close(fd) };
            return None;
        }
        let number = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u32>().ok());
        let place = ring::Place { rank: number("RANK"), world_size: number("WORLD_SIZE") };
        pwrite_all(fd, &ring::file_header(segment_bytes, pid, now_ns, place), 0);
        let mut ring = Self {
            fd,
            segment_bytes,
            span_ns: span_ns.map(|s| (s / u64::from(SEGMENTS - 1)).max(1)),
            index: SEGMENTS - 1,
            generation: 0,
            begun_ns: now_ns,
            count: 0,
            live: HashMap::new(),
            synced_ns: now_ns,
        };
        ring.begin_segment(now_ns);
        Some(ring)
    }

    /// Records a segment holds.
    fn capacity(&self) -> u64 {
        (self.segment_bytes - 64) / RECORD_BYTES as u64
    }

    /// Begins the next segment: its header (which makes what was left there stale), then the
    /// allocations alive now (at most half the segment: the rest is cut, and said).
    fn begin_segment(&mut self, now_ns: u64) {
        let before = self.count;
        self.index = (self.index + 1) % SEGMENTS;
        self.generation += 1;
        self.begun_ns = now_ns;
        let room = (self.capacity() / 2) as usize;
        let mut alive: Vec<&[u8; RECORD_BYTES]> = self.live.values().collect();
        // Oldest first: what has lived longest.
        alive.sort_by_key(|r| field_u64(&r[..], 8));
        let flags = if alive.len() > room { ALIVE_CUT_SHORT } else { 0 };
        alive.truncate(room);
        let n = u32::try_from(alive.len()).unwrap_or(u32::MAX);
        let mut bytes = Vec::with_capacity(64 + alive.len() * RECORD_BYTES);
        bytes.extend_from_slice(&ring::segment_header(self.generation, now_ns, n, flags, before));
        for record in alive {
            bytes.extend_from_slice(&ring::seal(*record, self.generation));
        }
        pwrite_all(self.fd, &bytes, ring::segment_offset(self.index, self.segment_bytes));
        self.count = u64::from(n);
    }

    /// What the record leaves alive or ends.
    fn follow(&mut self, record: &[u8; RECORD_BYTES]) {
        let api = record.get(4..6).and_then(|b| b.try_into().ok()).map(u16::from_le_bytes).and_then(Api::from_u16);
        if field_u32(record, 28) != 0 {
            return;
        }
        let address = field_u64(record, 32);
        match api {
            Some(a) if a.allocates() => {
                self.live.insert(Key::Allocation(address), *record);
            }
            Some(Api::MemFree | Api::MemFreeAsync | Api::MemFreeHost) => {
                self.live.remove(&Key::Allocation(address));
            }
            Some(Api::MemCreate) => {
                self.live.insert(Key::Handle(address), *record);
            }
            Some(Api::MemRelease) => {
                self.live.remove(&Key::Handle(address));
            }
            Some(Api::MemMap) => {
                self.live.insert(Key::Mapping(address), *record);
            }
            Some(Api::MemUnmap) => {
                self.live.remove(&Key::Mapping(address));
            }
            Some(Api::AddressReserve) => {
                self.live.insert(Key::Range(address), *record);
            }
            Some(Api::AddressFree) => {
                self.live.remove(&Key::Range(address));
            }
            Some(Api::PoolReserved) => {
                self.live.insert(Key::Pool(address), *record);
            }
            Some(Api::ContextDestroy) => {
                let device = field_u32(record, 24);
                self.live.retain(|_, r| field_u32(&r[..], 24) != device);
            }
            _ => {}
        }
    }

    /// Writes `records` (whole records, back to back) into the ring, beginning segments as they
    /// fill (or age past the span).
    pub fn write(&mut self, records: &[u8]) {
        let mut run: Vec<u8> = Vec::with_capacity(records.len());
        let mut run_at = self.slot_offset();
        for chunk in records.chunks_exact(RECORD_BYTES) {
            let Ok(record) = <[u8; RECORD_BYTES]>::try_from(chunk) else { continue };
            let aged = self.span_ns.is_some_and(|span| field_u64(&record, 8).saturating_sub(self.begun_ns) > span);
            if self.count >= self.capacity() || (aged && self.count > 0) {
                pwrite_all(self.fd, &run, run_at);
                run.clear();
                self.begin_segment(field_u64(&record, 8).max(self.begun_ns));
                run_at = self.slot_offset();
            }
            run.extend_from_slice(&ring::seal(record, self.generation));
            self.count += 1;
            self.follow(&record);
        }
        pwrite_all(self.fd, &run, run_at);
    }

    /// The file to sync now, when it is time (the caller syncs it after letting the buffer's
    /// lock go: a sync can take milliseconds, and no driver call should wait for it).
    pub fn sync_due(&mut self, now_ns: u64) -> Option<c_int> {
        (now_ns.saturating_sub(self.synced_ns) >= SYNC_EVERY_NS).then(|| {
            self.synced_ns = now_ns;
            self.fd
        })
    }

    /// Where the next record of the current segment goes.
    fn slot_offset(&self) -> u64 {
        ring::segment_offset(self.index, self.segment_bytes) + 64 + self.count * RECORD_BYTES as u64
    }
}
