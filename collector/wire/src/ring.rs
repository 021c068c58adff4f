//! The flight recorder's ring: a file of fixed size per process, `flight.<pid>.ring`, that the
//! hook writes its records into round and round, so that however long the program runs the file
//! holds the last stretch of its driver calls and never grows; and enough state to know what was
//! alive where that stretch begins.
//!
//! | offset | size | what |
//! |---|---|---|
//! | 0 | 4096 | the file's header (first 64 bytes used, the rest zero) |
//! | 4096 + i × S | S | segment i of K, each S bytes |
//!
//! File header: magic `VSFLIGHT` (8), version u32 (1), segments K u32, segment bytes S u64, pid
//! u32, reserved u32, created (`CLOCK_MONOTONIC` ns) u64, the process's distributed rank + 1 u32
//! and world size u32 (0: none; `RANK` and `WORLD_SIZE` as a launcher such as torchrun set them).
//!
//! A segment begins with a 64-byte header: magic `VSSG`, a checksum of the header u32 (bytes 8..64),
//! generation u64 (1, 2, 3, … in the order segments were begun; 0: never used), begun at u64 (ns),
//! alive u32 (how many records follow that are the allocations alive when it began, in the hook's
//! record format with their own times), flags u32 (bit 0: the alive list was cut short, it did not
//! fit), and how many records the segment before it holds, u64 (alive list and events: a reader
//! tells from it that the one before lost none). Then records of 64 bytes ([`crate::record`]), each sealed with its segment's generation
//! (bytes 56..60, the low 32 bits) and a checksum of bytes 0..60 (bytes 60..64), until the segment
//! is full: the writer then begins the next one (after the last, the first), writing its header
//! first, which makes the records left there from before invalid (their generation is older).
//!
//! So a reader takes each segment's records up to the first that is not whole (torn by a kill, or
//! left from before), puts the segments in generation order, and keeps the newest run of
//! consecutive generations: a prefix of what was written from the oldest segment's start, with
//! the allocations alive then. Nothing is ever written outside the file's fixed size.

use crate::record::{RECORD_BYTES, Record};

/// The file header's size (a page).
pub const FILE_HEADER_BYTES: u64 = 4096;
/// Segments per ring.
pub const SEGMENTS: u32 = 8;
/// The file header's magic.
pub const FILE_MAGIC: [u8; 8] = *b"VSFLIGHT";
/// A segment header's magic.
pub const SEGMENT_MAGIC: [u8; 4] = *b"VSSG";
/// The smallest segment: a header and 15 records.
pub const MIN_SEGMENT_BYTES: u64 = 1024;
/// Flag: the alive list was cut short.
pub const ALIVE_CUT_SHORT: u32 = 1;

/// FNV-1a, 32 bits: enough to tell a torn or stale slot from a whole record.
pub fn checksum(bytes: &[u8]) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for &b in bytes {
        hash ^= u32::from(b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

/// A record sealed for segment `generation`.
pub fn seal(mut record: [u8; RECORD_BYTES], generation: u64) -> [u8; RECORD_BYTES] {
    record[56..60].copy_from_slice(&(generation as u32).to_le_bytes());
    let sum = checksum(&record[..60]);
    record[60..64].copy_from_slice(&sum.to_le_bytes());
    record
}

fn sealed_for(bytes: &[u8], generation: u64) -> bool {
    bytes.len() == RECORD_BYTES
        && bytes[56..60] == (generation as u32).to_le_bytes()
        && bytes[60..64] == checksum(&bytes[..60]).to_le_bytes()
}

/// A process's place in a distributed run: its rank and the run's size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Place {
    /// `RANK`.
    pub rank: Option<u32>,
    /// `WORLD_SIZE`.
    pub world_size: Option<u32>,
}

/// The file's header.
pub fn file_header(segment_bytes: u64, pid: u32, created_ns: u64, place: Place) -> [u8; 64] {
    let mut out = [0u8; 64];
    out[0..8].copy_from_slice(&FILE_MAGIC);
    out[8..12].copy_from_slice(&1u32.to_le_bytes());
    out[12..16].copy_from_slice(&SEGMENTS.to_le_bytes());
    out[16..24].copy_from_slice(&segment_bytes.to_le_bytes());
    out[24..28].copy_from_slice(&pid.to_le_bytes());
    out[32..40].copy_from_slice(&created_ns.to_le_bytes());
    out[40..44].copy_from_slice(&place.rank.map_or(0, |r| r.saturating_add(1)).to_le_bytes());
    out[44..48].copy_from_slice(&place.world_size.unwrap_or(0).to_le_bytes());
    out
}

/// A segment's header; `before` is how many records the segment before it holds.
pub fn segment_header(generation: u64, begun_ns: u64, alive: u32, flags: u32, before: u64) -> [u8; 64] {
    let mut out = [0u8; 64];
    out[0..4].copy_from_slice(&SEGMENT_MAGIC);
    out[8..16].copy_from_slice(&generation.to_le_bytes());
    out[16..24].copy_from_slice(&begun_ns.to_le_bytes());
    out[24..28].copy_from_slice(&alive.to_le_bytes());
    out[28..32].copy_from_slice(&flags.to_le_bytes());
    out[32..40].copy_from_slice(&before.to_le_bytes());
    let sum = checksum(&out[8..64]);
    out[4..8].copy_from_slice(&sum.to_le_bytes());
    out
}

/// Where segment `index` begins in a ring of `segment_bytes` segments.
pub fn segment_offset(index: u32, segment_bytes: u64) -> u64 {
    FILE_HEADER_BYTES + u64::from(index) * segment_bytes
}

/// A ring's whole size for segments of `segment_bytes`.
pub fn file_bytes(segment_bytes: u64) -> u64 {
    FILE_HEADER_BYTES + u64::from(SEGMENTS) * segment_bytes
}

/// The segment size that keeps a ring within `budget` bytes (at least [`MIN_SEGMENT_BYTES`],
/// a whole number of records).
pub fn segment_bytes_for(budget: u64) -> u64 {
    let per = budget.saturating_sub(FILE_HEADER_BYTES) / u64::from(SEGMENTS);
    (per / RECORD_BYTES as u64 * RECORD_BYTES as u64).max(MIN_SEGMENT_BYTES)
}

/// What a ring holds, read back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ring {
    /// The process.
    pub pid: u32,
    /// Its place in a distributed run, as its environment said.
    pub place: Place,
    /// When the oldest segment kept began (`CLOCK_MONOTONIC` ns): nothing before it is known but
    /// what was alive then.
    pub from_ns: u64,
    /// The allocations alive at `from_ns` (each with the time it was made).
    pub alive: Vec<Record>,
    /// Whether that list was cut short (it did not fit in the segment).
    pub alive_cut_short: bool,
    /// The records from `from_ns` on, in the order written.
    pub records: Vec<Record>,
    /// Segments overwritten since the ring began (0: it never wrapped).
    pub overwritten: u64,
}

/// Why a file is not a ring.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RingError {
    /// Not a flight recorder's ring (its header).
    NotARing,
    /// A ring of a version this reader does not know.
    Version(u32),
    /// Its header names a shape the file does not have.
    Shape(String),
}

impl std::fmt::Display for RingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotARing => write!(f, "not a flight recorder's ring (no VSFLIGHT header)"),
            Self::Version(v) => {
                write!(f, "a flight recorder's ring of version {v}, which this vramscope does not read")
            }
            Self::Shape(why) => write!(f, "a damaged flight recorder's ring: {why}"),
        }
    }
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    bytes.get(at..at + 4).and_then(|b| b.try_into().ok()).map_or(0, u32::from_le_bytes)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    bytes.get(at..at + 8).and_then(|b| b.try_into().ok()).map_or(0, u64::from_le_bytes)
}

/// Reads a ring from its bytes: what it holds, whole up to its first torn record.
pub fn read(bytes: &[u8]) -> Result<Ring, RingError> {
    if bytes.get(0..8) != Some(&FILE_MAGIC[..]) {
        return Err(RingError::NotARing);
    }
    let version = u32_at(bytes, 8);
    if version != 1 {
        return Err(RingError::Version(version));
    }
    let segments = u32_at(bytes, 12);
    let segment_bytes = u64_at(bytes, 16);
    if segments == 0
        || segments > 64
        || segment_bytes < MIN_SEGMENT_BYTES
        || !segment_bytes.is_multiple_of(RECORD_BYTES as u64)
    {
        return Err(RingError::Shape(format!("{segments} segments of {segment_bytes} bytes")));
    }
    let pid = u32_at(bytes, 24);
    let place =
        Place { rank: u32_at(bytes, 40).checked_sub(1), world_size: Some(u32_at(bytes, 44)).filter(|&w| w > 0) };
    let mut found: Vec<Segment> = Vec::new();
    for index in 0..segments {
        let start = segment_offset(index, segment_bytes);
        let Some(segment) = usize::try_from(start)
            .ok()
            .and_then(|s| bytes.get(s..s.saturating_add(usize::try_from(segment_bytes).unwrap_or(0)).min(bytes.len())))
        else {
            continue;
        };
        let Some(header) = segment.get(0..64) else { continue };
        if header[0..4] != SEGMENT_MAGIC || u32_at(header, 4) != checksum(&header[8..64]) {
            continue;
        }
        let generation = u64_at(header, 8);
        if generation == 0 {
            continue;
        }
        let (begun, alive_n, flags) = (u64_at(header, 16), u32_at(header, 24) as usize, u32_at(header, 28));
        let mut alive = Vec::new();
        let mut records = Vec::new();
        for (i, slot) in segment[64..].chunks(RECORD_BYTES).enumerate() {
            if !sealed_for(slot, generation) {
                break;
            }
            let Some(record) = Record::decode(slot) else { break };
            if i < alive_n { alive.push(record) } else { records.push(record) }
        }
        let cut_short = flags & ALIVE_CUT_SHORT != 0 || alive.len() < alive_n;
        found.push(Segment { generation, begun, alive, cut_short, records, before: u64_at(header, 32) });
    }
    found.sort_by_key(|f| f.generation);
    // The newest run of consecutive generations, each of which the next says it kept whole.
    let mut first = found.len().saturating_sub(1);
    while first > 0 {
        let (older, newer) = (&found[first - 1], &found[first]);
        let whole = (older.alive.len() + older.records.len()) as u64 == newer.before;
        if older.generation + 1 != newer.generation || !whole {
            break;
        }
        first -= 1;
    }
    let kept = found.split_off(first);
    let Some(oldest) = kept.first() else {
        return Ok(Ring { pid, place, ..Ring::default() });
    };
    let overwritten = oldest.generation.saturating_sub(1);
    let (from_ns, alive, alive_cut_short) = (oldest.begun, oldest.alive.clone(), oldest.cut_short);
    let records = kept.into_iter().flat_map(|k| k.records).collect();
    Ok(Ring { pid, place, from_ns, alive, alive_cut_short, records, overwritten })
}

/// A segment as read.
struct Segment {
    generation: u64,
    begun: u64,
    alive: Vec<Record>,
    cut_short: bool,
    records: Vec<Record>,
    before: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Api;

    fn record(n: u64) -> Record {
        Record {
            api: Api::MemAlloc,
            time_ns: n,
            pid: 7,
            tid: 7,
            device: 0,
            result: 0,
            address: n,
            size_bytes: 512,
            stream: 0,
        }
    }

    /// A ring of 8 segments of 15 records each (the smallest), written as the hook writes.
    struct Writer {
        bytes: Vec<u8>,
        index: u32,
        generation: u64,
        count: u64,
    }

    const SEG: u64 = MIN_SEGMENT_BYTES;
    const PER: u64 = (SEG - 64) / 64;

    impl Writer {
        fn new() -> Self {
            let mut bytes = vec![0u8; usize::try_from(file_bytes(SEG)).unwrap_or(0)];
            bytes[..64].copy_from_slice(&file_header(SEG, 7, 0, Place { rank: Some(3), world_size: Some(4) }));
            let mut w = Self { bytes, index: SEGMENTS - 1, generation: 0, count: 0 };
            w.begin(0, &[]);
            w
        }
        fn begin(&mut self, at: u64, alive: &[Record]) {
            let before = self.count;
            self.index = (self.index + 1) % SEGMENTS;
            self.generation += 1;
            let start = usize::try_from(segment_offset(self.index, SEG)).unwrap_or(0);
            let header = segment_header(self.generation, at, alive.len() as u32, 0, before);
            self.bytes[start..start + 64].copy_from_slice(&header);
            self.count = 0;
            for r in alive {
                self.put(*r);
            }
        }
        fn put(&mut self, r: Record) {
            if self.count == PER {
                self.begin(r.time_ns, &[]);
            }
            let at = usize::try_from(segment_offset(self.index, SEG) + 64 + self.count * 64).unwrap_or(0);
            self.bytes[at..at + 64].copy_from_slice(&seal(r.encode(), self.generation));
            self.count += 1;
        }
    }

    #[test]
    fn a_ring_reads_back_the_newest_run_whole_up_to_a_torn_record() {
        let mut w = Writer::new();
        for n in 1..=200 {
            w.put(record(n));
        }
        let ring = read(&w.bytes).expect("a ring");
        // 14 segments of 15 begun (the last with 5): the newest 8 are kept.
        assert_eq!(ring.records.iter().map(|r| r.time_ns).collect::<Vec<_>>(), (91..=200).collect::<Vec<_>>());
        assert_eq!(ring.overwritten, 6);
        assert_eq!(ring.place, Place { rank: Some(3), world_size: Some(4) });
        // A torn last record: the ring ends before it.
        let at = usize::try_from(segment_offset(w.index, SEG) + 64 + 4 * 64 + 20).unwrap_or(0);
        w.bytes[at] ^= 0xff;
        let ring = read(&w.bytes).expect("a ring");
        assert_eq!(ring.records.last().map(|r| r.time_ns), Some(199));
        // The oldest segment kept lost a record: it is dropped, not stitched to the next.
        let oldest = (w.index + 1) % SEGMENTS;
        let at = usize::try_from(segment_offset(oldest, SEG) + 64 + 2 * 64).unwrap_or(0);
        w.bytes[at + 30] ^= 0xff;
        let ring = read(&w.bytes).expect("a ring");
        assert_eq!(ring.records.first().map(|r| r.time_ns), Some(106));
        assert_eq!(read(b"not a ring"), Err(RingError::NotARing));
    }

    /// Damage anywhere (a byte flipped, the file cut short) reads as less, never as a panic or as
    /// records that were not written.
    #[test]
    fn damage_anywhere_reads_as_less() {
        let mut w = Writer::new();
        for n in 1..=200 {
            w.put(record(n));
        }
        let whole = w.bytes.clone();
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..2000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let mut bytes = whole.clone();
            let at = (state as usize) % bytes.len();
            bytes[at] ^= 1 << (state % 8);
            let cut = if state.is_multiple_of(5) { (state as usize >> 8) % bytes.len() } else { bytes.len() };
            bytes.truncate(cut);
            if let Ok(ring) = read(&bytes) {
                // Whatever is read is a run of what was written, in order.
                let times: Vec<u64> = ring.records.iter().map(|r| r.time_ns).collect();
                assert!(times.windows(2).all(|p| p[1] == p[0] + 1), "{times:?}");
                assert!(times.iter().all(|&t| (1..=200).contains(&t)));
            }
        }
    }

    #[test]
    fn a_segment_begins_with_what_is_alive() {
        let mut w = Writer::new();
        w.put(record(1));
        w.put(record(2));
        w.begin(3, &[record(1)]);
        w.put(record(4));
        let ring = read(&w.bytes).expect("a ring");
        assert_eq!(ring.alive, []);
        assert_eq!(ring.records.iter().map(|r| r.time_ns).collect::<Vec<_>>(), [1, 2, 4]);
    }
}
