//! Trace entries as the sink collects them: compact, in chunks that the trace builder frees as
//! it goes, so a snapshot of millions of entries never holds its entries and its events whole
//! at the same time.

use crate::model::event::{Event, EventKind};
use crate::model::ids::{ContextId, DeviceId, ProcessId, StackId, StringId};
use crate::model::oom::Oom;
use crate::range::{Alive, Classifier, Fold, Foldable, Folded, TraceRange};

/// A trace entry's action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Action {
    Event(EventKind),
    Snapshot,
    Oom,
    Annotate,
    Unknown(StringId),
}

/// A trace entry as recorded, before sizes are settled and times converted.
#[derive(Clone, Copy, Debug)]
pub(super) struct Entry {
    pub(super) action: Action,
    pub(super) addr: u64,
    pub(super) size: u64,
    pub(super) stream: u64,
    pub(super) time_us: Option<i64>,
    pub(super) stack: StackId,
    pub(super) context: ContextId,
    pub(super) device_free: Option<u64>,
    pub(super) name: StringId,
}

impl Entry {
    /// The event this entry of `kind` is on `device` at `time_ns`, its size the one recorded
    /// (settled later) and nothing paired yet.
    pub(super) fn event(&self, kind: EventKind, time_ns: i64, device: DeviceId, flags: u8) -> Event {
        Event {
            time_ns,
            address: self.addr,
            size_bytes: self.size,
            slack_bytes: 0,
            stream: self.stream.into(),
            stack: self.stack,
            context: self.context,
            process: ProcessId(0),
            device,
            kind,
            flags,
        }
    }

    /// The out-of-memory error this `oom` entry records on `device` at `time_ns`.
    pub(super) fn oom(&self, time_ns: i64, device: DeviceId) -> Oom {
        Oom {
            time_ns,
            device,
            process: ProcessId(0),
            stream: self.stream,
            requested_bytes: self.size,
            device_free_bytes: self.device_free,
            stack: self.stack,
        }
    }
}

/// Entries per chunk.
const CHUNK: usize = 1 << 16;
/// `time_us` of an entry without one.
const NO_TIME: i64 = i64::MIN;
/// `rare` of an entry without rare fields.
const NO_RARE: u32 = u32::MAX;

/// `Compact::code_stream`'s stream index when the stream is kept with the entry's rare fields
/// (a snapshot of more distinct streams than 24 bits count).
const STREAM_IN_RARE: u32 = (1 << 24) - 1;

/// An entry as stored: 40 bytes, where [`Entry`] takes 80.
#[derive(Clone, Copy, Debug)]
pub(super) struct Compact {
    addr: u64,
    size: u64,
    time_us: i64,
    stack: StackId,
    context: ContextId,
    /// Index into [`Entries::rare`], or [`NO_RARE`].
    rare: u32,
    /// The action in the top 8 bits: an [`EventKind`] (0..=6), or 7 snapshot, 8 OOM, 9
    /// annotate, 10 unknown. The rest: the stream's index in [`Entries::streams`], or
    /// [`STREAM_IN_RARE`].
    code_stream: u32,
}

const _: () = assert!(size_of::<Compact>() == 40);

impl Compact {
    fn new(code: u8, stream: u32) -> Self {
        Self {
            addr: 0,
            size: 0,
            time_us: NO_TIME,
            stack: StackId(0),
            context: ContextId(0),
            rare: NO_RARE,
            code_stream: (u32::from(code) << 24) | (stream & STREAM_IN_RARE),
        }
    }

    fn code(&self) -> u8 {
        (self.code_stream >> 24) as u8
    }

    fn stream_index(&self) -> u32 {
        self.code_stream & STREAM_IN_RARE
    }

    fn with_stream_index(self, stream: u32) -> Self {
        Self { code_stream: (self.code_stream & !STREAM_IN_RARE) | (stream & STREAM_IN_RARE), ..self }
    }
}

/// Fields only OOMs, annotations and unknown actions have (and streams past the table's room).
#[derive(Clone, Copy, Debug, Default)]
struct Rare {
    device_free: Option<u64>,
    name: StringId,
    unknown_action: StringId,
    stream: u64,
}

impl Foldable for Compact {
    fn event_kind(&self) -> Option<EventKind> {
        EventKind::from_u8(self.code())
    }
    // Trace entries do not say their device (the list holding them does); CUDA's addresses are
    // unique across the devices of a process.
    fn key(&self) -> crate::range::Key {
        (0, 0, self.addr)
    }
    fn size(&self) -> u64 {
        self.size
    }
    fn with_size(self, size: u64) -> Self {
        Self { size, ..self }
    }
}

/// Entries kept for a range of the trace ([`crate::range`]): those outside it are folded as
/// they are pushed, and only those inside are stored.
#[derive(Debug)]
struct Windowed {
    /// Where entries lie and what those outside left behind; taken when the pickle is read.
    folding: Option<(Classifier, Fold<Compact>)>,
    /// The index of each stored entry, in order.
    kept: Vec<u32>,
}

/// The entries of a snapshot, in the order the pickle holds them.
#[derive(Debug, Default)]
pub(super) struct Entries {
    chunks: Vec<Vec<Compact>>,
    rare: Vec<Rare>,
    /// The streams entries name, each once (a snapshot has a handful).
    streams: Vec<u64>,
    stream_slots: rustc_hash::FxHashMap<u64, u32>,
    /// The stream of the entry pushed last and its index.
    last_stream: Option<(u64, u32)>,
    len: usize,
    /// Entries that stand for nothing: the padding before a piece's chunks.
    unused: usize,
    /// Chunks below this one have been freed.
    freed_below: usize,
    /// When only a range is kept.
    window: Option<Box<Windowed>>,
    /// Entries stored with a time, and `annotate` entries stored.
    timed: usize,
    annotations: usize,
}

/// What the entries outside a range left behind.
pub(super) struct RangeFolded {
    pub(super) range: TraceRange,
    pub(super) classifier: Classifier,
    pub(super) folded: Folded<Compact>,
}

impl Entries {
    /// Number of entries pushed.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Entries stored with a time.
    pub(super) fn timed(&self) -> usize {
        self.timed
    }

    /// `annotate` entries stored.
    pub(super) fn annotations(&self) -> usize {
        self.annotations
    }

    /// Entries stored (read, less those a range left out).
    pub(super) fn stored(&self) -> usize {
        self.window.as_ref().map_or(self.read(), |w| w.kept.len())
    }

    /// Number of entries read from the pickle (pushed, or taken in from pieces).
    pub(super) fn read(&self) -> usize {
        self.len - self.unused
    }

    /// Entries that keep only `range` of the trace: the rest is folded as it is pushed.
    pub(super) fn in_range(range: TraceRange) -> Self {
        Self {
            window: Some(Box::new(Windowed { folding: Some((Classifier::new(range), Fold::new())), kept: Vec::new() })),
            ..Self::default()
        }
    }

    /// Whether every entry is stored (no range is kept).
    pub(super) fn stores_all(&self) -> bool {
        self.window.is_none()
    }

    /// Whether the entry at `index` was stored (always, unless a range is kept).
    pub(super) fn is_stored(&self, index: u32) -> bool {
        self.window.as_ref().is_none_or(|w| w.kept.binary_search(&index).is_ok())
    }

    /// What the entries outside the range left behind (`None` when the whole trace is kept).
    pub(super) fn take_folded(&mut self) -> Option<RangeFolded> {
        let (classifier, fold) = self.window.as_mut()?.folding.take()?;
        Some(RangeFolded { range: classifier.range(), classifier, folded: fold.finish() })
    }

    /// The entry an alive block of a range came from.
    pub(super) fn expand(&self, alive: &Alive<Compact>) -> Entry {
        self.entry_of(&alive.item, None)
    }

    fn entry_of(&self, c: &Compact, rare: Option<&Rare>) -> Entry {
        let stream = match c.stream_index() {
            STREAM_IN_RARE => rare.map_or(0, |r| r.stream),
            i => self.streams.get(i as usize).copied().unwrap_or(0),
        };
        let action = match c.code() {
            7 => Action::Snapshot,
            8 => Action::Oom,
            9 => Action::Annotate,
            10 => Action::Unknown(rare.map_or(StringId(0), |r| r.unknown_action)),
            code => EventKind::from_u8(code).map_or(Action::Snapshot, Action::Event),
        };
        Entry {
            action,
            addr: c.addr,
            size: c.size,
            stream,
            time_us: (c.time_us != NO_TIME).then_some(c.time_us),
            stack: c.stack,
            context: c.context,
            device_free: rare.and_then(|r| r.device_free),
            name: rare.map_or(StringId(0), |r| r.name),
        }
    }

    /// The index of `stream` in [`Entries::streams`] (added if new), or [`STREAM_IN_RARE`]
    /// when the table is full.
    fn stream_slot(&mut self, stream: u64) -> u32 {
        if let Some((last, slot)) = self.last_stream
            && last == stream
        {
            return slot;
        }
        let slot = match self.stream_slots.get(&stream) {
            Some(&slot) => slot,
            None if self.streams.len() < STREAM_IN_RARE as usize => {
                let slot = self.streams.len() as u32;
                self.streams.push(stream);
                self.stream_slots.insert(stream, slot);
                slot
            }
            None => return STREAM_IN_RARE,
        };
        self.last_stream = Some((stream, slot));
        slot
    }

    /// Appends an entry; returns its index.
    pub(super) fn push(&mut self, entry: Entry) -> u32 {
        let (code, unknown_action) = match entry.action {
            Action::Event(kind) => (kind as u8, StringId(0)),
            Action::Snapshot => (7, StringId(0)),
            Action::Oom => (8, StringId(0)),
            Action::Annotate => (9, StringId(0)),
            Action::Unknown(name) => (10, name),
        };
        let stream = self.stream_slot(entry.stream);
        let mut compact = Compact {
            addr: entry.addr,
            size: entry.size,
            time_us: entry.time_us.unwrap_or(NO_TIME),
            stack: entry.stack,
            context: entry.context,
            ..Compact::new(code, stream)
        };
        let index = self.len as u32;
        if let Some(window) = &mut self.window {
            if let Some((classifier, fold)) = &mut window.folding {
                let phase = classifier.phase(entry.time_us.map(|us| us.saturating_mul(1000)));
                if !fold.take(phase, u64::from(index), compact) {
                    self.len += 1;
                    return index;
                }
            }
            window.kept.push(index);
        }
        if entry.device_free.is_some() || entry.name != StringId(0) || code == 10 || stream == STREAM_IN_RARE {
            self.rare.push(Rare {
                device_free: entry.device_free,
                name: entry.name,
                unknown_action,
                stream: entry.stream,
            });
            compact.rare = (self.rare.len() - 1) as u32;
        }
        self.timed += usize::from(entry.time_us.is_some());
        self.annotations += usize::from(code == 9);
        match self.chunks.last_mut().filter(|c| c.len() < CHUNK) {
            Some(chunk) => chunk.push(compact),
            None => {
                // The first chunk grows as needed (most snapshots are small); later ones are
                // allocated whole.
                let mut chunk = if self.chunks.is_empty() { Vec::new() } else { Vec::with_capacity(CHUNK) };
                chunk.push(compact);
                self.chunks.push(chunk);
            }
        }
        self.len += 1;
        index
    }

    /// Where the entry at `index` is stored.
    fn slot(&self, index: u32) -> Option<usize> {
        match &self.window {
            None => Some(index as usize),
            Some(w) => w.kept.binary_search(&index).ok(),
        }
    }

    /// The entry at `index`, unless it was never pushed (or not kept) or its chunk was freed.
    pub(super) fn get(&self, index: u32) -> Option<Entry> {
        let slot = self.slot(index)?;
        let c = self.chunks.get(slot / CHUNK)?.get(slot % CHUNK)?;
        if c.code() > 10 {
            return None;
        }
        Some(self.entry_of(c, self.rare.get(c.rare as usize)))
    }

    /// Appends the entries of `other` (a piece of the same snapshot read on its own) with their
    /// ids mapped, moving its chunks rather than copying its entries: this table is first padded
    /// to a whole chunk with entries that no list names. Returns the index of `other`'s first.
    pub(super) fn append_moved(
        &mut self,
        other: Entries,
        stack: impl Fn(StackId) -> StackId,
        context: impl Fn(ContextId) -> ContextId,
        string: impl Fn(StringId) -> StringId,
    ) -> u32 {
        let pad = (CHUNK - self.len % CHUNK) % CHUNK;
        if let Some(last) = self.chunks.last_mut()
            && pad > 0
        {
            last.resize(CHUNK, Compact::new(7, 0));
            self.len += pad;
            self.unused += pad;
        }
        let first = self.len;
        let rare_base = self.rare.len() as u32;
        self.rare.extend(other.rare.iter().map(|r| Rare {
            device_free: r.device_free,
            name: string(r.name),
            unknown_action: string(r.unknown_action),
            stream: r.stream,
        }));
        let streams: Vec<u32> = other.streams.iter().map(|&s| self.stream_slot(s)).collect();
        for mut chunk in other.chunks {
            for c in &mut chunk {
                c.stack = stack(c.stack);
                c.context = context(c.context);
                if c.rare != NO_RARE {
                    c.rare += rare_base;
                }
                let index = c.stream_index();
                if index != STREAM_IN_RARE {
                    let slot = streams.get(index as usize).copied().unwrap_or(0);
                    if slot == STREAM_IN_RARE {
                        // The whole's table is full: the stream goes with the rare fields.
                        let stream = other.streams.get(index as usize).copied().unwrap_or(0);
                        match self.rare.get_mut(c.rare as usize) {
                            Some(rare) => rare.stream = stream,
                            None => {
                                self.rare.push(Rare { stream, ..Rare::default() });
                                c.rare = (self.rare.len() - 1) as u32;
                            }
                        }
                    }
                    *c = c.with_stream_index(slot);
                }
            }
            self.chunks.push(chunk);
        }
        self.len += other.len;
        self.timed += other.timed;
        self.annotations += other.annotations;
        first as u32
    }

    /// Takes the stored entries out, split at chunk `chunk`, for two threads that each read
    /// one part in increasing order ([`ChunkReader`]); only when all entries are kept (no
    /// range). What is left answers nothing but [`ChunkReader::get`]'s decoding.
    pub(super) fn split_readers(&mut self, chunk: usize) -> Option<(ChunkReader<'_>, ChunkReader<'_>)> {
        if self.window.is_some() || chunk == 0 || chunk >= self.chunks.len() {
            return None;
        }
        let mut head = std::mem::take(&mut self.chunks);
        let tail = head.split_off(chunk);
        let this: &Self = self;
        Some((
            ChunkReader { entries: this, chunks: head, first: 0, freed: 0 },
            ChunkReader { entries: this, chunks: tail, first: chunk, freed: 0 },
        ))
    }

    /// The chunk an entry index is stored in (all entries kept).
    pub(super) fn chunk_of(index: u32) -> usize {
        index as usize / CHUNK
    }

    /// Frees the chunks holding only entries below `index`: the caller reads entries in
    /// increasing order and will not ask for those again.
    pub(super) fn free_below(&mut self, index: u32) {
        let stored = match &self.window {
            None => index as usize,
            Some(w) => w.kept.partition_point(|&k| k < index),
        };
        let below = stored / CHUNK;
        while self.freed_below < below {
            if let Some(chunk) = self.chunks.get_mut(self.freed_below) {
                *chunk = Vec::new();
            }
            self.freed_below += 1;
        }
    }
}

/// One part of the entries taken out by [`Entries::split_readers`], read in increasing order,
/// each chunk freed once the reading has passed it.
pub(super) struct ChunkReader<'a> {
    entries: &'a Entries,
    chunks: Vec<Vec<Compact>>,
    /// The chunk of the whole that `chunks[0]` is.
    first: usize,
    /// Chunks below this one (of `chunks`) have been freed.
    freed: usize,
}

impl ChunkReader<'_> {
    /// The entry at `index`, as [`Entries::get`] reads it; chunks before its own are freed.
    pub(super) fn get(&mut self, index: u32) -> Option<Entry> {
        let chunk = (index as usize / CHUNK).checked_sub(self.first)?;
        while self.freed < chunk {
            if let Some(done) = self.chunks.get_mut(self.freed) {
                *done = Vec::new();
            }
            self.freed += 1;
        }
        let c = self.chunks.get(chunk)?.get(index as usize % CHUNK)?;
        if c.code() > 10 {
            return None;
        }
        Some(self.entries.entry_of(c, self.entries.rare.get(c.rare as usize)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_action_and_frees_chunks() {
        let mut entries = Entries::default();
        let base = Entry {
            action: Action::Event(EventKind::Alloc),
            addr: 0x7f00_0000_0000,
            size: 512,
            stream: u64::MAX,
            time_us: Some(-5),
            stack: StackId(3),
            context: ContextId(2),
            device_free: None,
            name: StringId(0),
        };
        let samples = [
            base,
            Entry { action: Action::Oom, device_free: Some(1 << 40), time_us: None, ..base },
            Entry { action: Action::Annotate, name: StringId(9), ..base },
            Entry { action: Action::Unknown(StringId(4)), ..base },
            Entry { action: Action::Event(EventKind::SegmentUnmap), ..base },
        ];
        for i in 0..3 * CHUNK {
            let pushed = entries.push(samples[i % samples.len()]);
            assert_eq!(pushed as usize, i);
        }
        for i in [0, 1, 2, 3, 4, CHUNK + 7, 3 * CHUNK - 1] {
            let got = entries.get(i as u32).expect("entry");
            let want = samples[i % samples.len()];
            assert_eq!(format!("{got:?}"), format!("{want:?}"));
        }
        entries.free_below((CHUNK + 3) as u32);
        assert!(entries.get(5).is_none());
        assert!(entries.get((CHUNK + 3) as u32).is_some());
        assert_eq!(entries.len(), 3 * CHUNK);
    }

    #[test]
    fn streams_keep_their_handles_when_a_piece_is_appended() {
        let entry = |stream: u64, addr: u64| Entry {
            action: Action::Event(EventKind::Alloc),
            addr,
            size: 512,
            stream,
            time_us: Some(1),
            stack: StackId(1),
            context: ContextId(0),
            device_free: None,
            name: StringId(0),
        };
        let mut whole = Entries::default();
        let mut piece = Entries::default();
        for (i, stream) in [0, 7, 0, u64::MAX, 7].into_iter().enumerate() {
            whole.push(entry(stream, i as u64));
        }
        // The piece meets its streams in another order, and one the whole never saw.
        for (i, stream) in [u64::MAX, 42, 0].into_iter().enumerate() {
            piece.push(entry(stream, 100 + i as u64));
        }
        let first = whole.append_moved(piece, |s| s, |c| c, |s| s);
        let stream_of = |i: u32| whole.get(i).map(|e| (e.addr, e.stream));
        assert_eq!(stream_of(1), Some((1, 7)));
        assert_eq!(stream_of(3), Some((3, u64::MAX)));
        assert_eq!(stream_of(first), Some((100, u64::MAX)));
        assert_eq!(stream_of(first + 1), Some((101, 42)));
        assert_eq!(stream_of(first + 2), Some((102, 0)));
        assert_eq!(whole.streams.len(), 4);
    }
}
