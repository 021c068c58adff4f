//! Reading `.vtrace` files, recovering everything before the first damaged chunk.

use std::fmt;

use super::codec::{Cursor, Malformed};
use super::{ANNOTATION_ALL_DEVICES, CHUNK_HEADER_BYTES, ChunkKind, HEADER_BYTES, MAGIC, MAX_CHUNK_BYTES, VERSION};
use crate::error::{Error, Result};
use crate::memory::Limit;
use crate::model::annotation::{Annotation, AnnotationKind};
use crate::model::category::Category;
use crate::model::counter::{CounterKind, CounterSample, CounterSeries};
use crate::model::event::{Event, EventKind};
use crate::model::ids::{ContextId, DeviceId, FrameId, ProcessId, StackId, StringId};
use crate::model::interner::{Context, Frame};
use crate::model::oom::Oom;
use crate::model::segment::{Block, BlockState, Segment, SegmentPool};
use crate::model::tag::Tag;
use crate::model::trace::Trace;
use crate::progress::Progress;

/// Where a file stops being readable, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// Byte offset of the first chunk that could not be read.
    pub offset: u64,
    /// What is wrong there.
    pub reason: String,
    /// Bytes from `offset` to the end of the file, which were not loaded.
    pub bytes_lost: u64,
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.bytes_lost == 0 {
            write!(
                f,
                "the trace was cut short at byte {}: {}; everything before it was loaded",
                self.offset, self.reason
            )
        } else {
            write!(
                f,
                "the file is damaged from byte {} on ({}); everything before it was loaded, the last {} bytes were not",
                self.offset, self.reason, self.bytes_lost
            )
        }
    }
}

/// A trace read from a `.vtrace`.
#[derive(Debug)]
pub struct Loaded {
    /// Everything that could be read.
    pub trace: Trace,
    /// Where reading stopped early, if it did (including a stream that ended without its end
    /// marker: a recording cut short).
    pub damage: Option<Damage>,
}

fn too_much(needed_bytes: u64, up_to: usize, limit: Limit) -> Error {
    Error::Memory { what: format!("what its chunks hold up to byte {up_to}"), needed_bytes, limit }
}

/// Memory left for the model while a chunk is decoded, taken record by record from the counts
/// and lengths the chunk declares, before anything of that size is allocated.
struct Room {
    left: u64,
    /// Bytes a record needed when there was not room for it.
    short: Option<u64>,
}

impl Room {
    fn take(&mut self, bytes: u64) -> Result<(), String> {
        if bytes > self.left {
            self.short = Some(bytes);
            return Err("not enough memory".to_owned());
        }
        self.left -= bytes;
        Ok(())
    }

    fn records<T>(&mut self, n: usize) -> Result<(), String> {
        self.take((n as u64).saturating_mul(size_of::<T>() as u64))
    }
}

/// Bytes an interned string of `len` bytes holds: the text twice (the table and its index),
/// two boxes and a hash slot.
const fn string_bytes(len: usize) -> u64 {
    2 * len as u64 + 64
}
/// Bytes an interned frame, stack (beside its frames) or context holds: the entry and its hash slot.
const INTERNED_ENTRY_BYTES: u64 = 48;

fn malformed(_: Malformed) -> String {
    "a record is truncated or malformed".to_owned()
}

struct Ids {
    strings: usize,
    stacks: usize,
    contexts: usize,
}

impl Ids {
    fn of(trace: &Trace) -> Self {
        Self {
            strings: trace.interner.string_count(),
            stacks: trace.interner.stack_count(),
            contexts: trace.interner.context_count(),
        }
    }

    fn string(&self, v: u64) -> Result<StringId, String> {
        if (v as usize) < self.strings && v <= u64::from(u32::MAX) {
            Ok(StringId(v as u32))
        } else {
            Err(format!("string id {v} is not defined"))
        }
    }

    fn stack(&self, v: u64) -> Result<StackId, String> {
        if (v as usize) < self.stacks && v <= u64::from(u32::MAX) {
            Ok(StackId(v as u32))
        } else {
            Err(format!("stack id {v} is not defined"))
        }
    }
}

fn device(v: i64) -> Result<DeviceId, String> {
    i16::try_from(v).map(DeviceId).map_err(|_| format!("device {v} is out of range"))
}

/// An annotation's device: `i16::MIN` on disk is every device.
fn annotation_device(v: i64) -> Result<Option<DeviceId>, String> {
    device(v).map(|d| (d.0 != ANNOTATION_ALL_DEVICES).then_some(d))
}

fn process(v: u64) -> Result<ProcessId, String> {
    u32::try_from(v).map(ProcessId).map_err(|_| format!("process {v} is out of range"))
}

fn first_id(c: &mut Cursor<'_>, expected: usize, table: &str) -> Result<usize, String> {
    let first = c.uv().map_err(malformed)?;
    if first != expected as u64 {
        return Err(format!("{table} chunk starts at id {first}, expected {expected} (a chunk is missing)"));
    }
    c.count(1).map_err(malformed)
}

fn decode_chunk(trace: &mut Trace, kind: ChunkKind, payload: &[u8], room: &mut Room) -> Result<(), String> {
    let mut c = Cursor::new(payload);
    let ids = Ids::of(trace);
    match kind {
        ChunkKind::Metadata => {
            trace.metadata = serde_json::from_slice(payload).map_err(|e| format!("metadata is not valid: {e}"))?;
            return Ok(());
        }
        ChunkKind::Strings => {
            let n = first_id(&mut c, trace.interner.string_count(), "strings")?;
            for _ in 0..n {
                let len = c.count(1).map_err(malformed)?;
                room.take(string_bytes(len))?;
                let bytes = c.bytes(len).map_err(malformed)?;
                let text = std::str::from_utf8(bytes).map_err(|_| "a string is not UTF-8".to_owned())?;
                let expected = trace.interner.string_count();
                if trace.interner.string(text).index() != expected {
                    return Err("a string is stored twice".to_owned());
                }
            }
        }
        ChunkKind::Frames => {
            let n = first_id(&mut c, trace.interner.frame_count(), "frames")?;
            room.take((n as u64).saturating_mul(INTERNED_ENTRY_BYTES))?;
            for _ in 0..n {
                let function = ids.string(c.uv().map_err(malformed)?)?;
                let file = ids.string(c.uv().map_err(malformed)?)?;
                let line = u32::try_from(c.uv().map_err(malformed)?).map_err(|_| "line out of range".to_owned())?;
                let expected = trace.interner.frame_count();
                if trace.interner.frame(Frame { function, file, line }).index() != expected {
                    return Err("a frame is stored twice".to_owned());
                }
            }
        }
        ChunkKind::Stacks => {
            let n = first_id(&mut c, trace.interner.stack_count(), "stacks")?;
            let mut frames = Vec::new();
            for _ in 0..n {
                let len = c.count(1).map_err(malformed)?;
                room.take(INTERNED_ENTRY_BYTES + 4 * len as u64)?;
                frames.clear();
                for _ in 0..len {
                    let f = c.uv().map_err(malformed)?;
                    if f as usize >= trace.interner.frame_count() {
                        return Err(format!("frame id {f} is not defined"));
                    }
                    frames.push(FrameId(f as u32));
                }
                let expected = trace.interner.stack_count();
                if trace.interner.stack(&frames).index() != expected {
                    return Err("a stack is stored twice".to_owned());
                }
            }
        }
        ChunkKind::Contexts => {
            let n = first_id(&mut c, trace.interner.context_count(), "contexts")?;
            room.take((n as u64).saturating_mul(INTERNED_ENTRY_BYTES))?;
            for _ in 0..n {
                let compile_context = ids.string(c.uv().map_err(malformed)?)?;
                let user_metadata = ids.string(c.uv().map_err(malformed)?)?;
                let expected = trace.interner.context_count();
                if trace.interner.context(Context { compile_context, user_metadata }).index() != expected {
                    return Err("a context is stored twice".to_owned());
                }
            }
        }
        ChunkKind::Events => decode_events(&mut c, &ids, &mut trace.events, room)
            .map_err(|e| e.unwrap_or_else(|| malformed(Malformed)))?,
        ChunkKind::Segments => decode_segments(&mut c, &ids, &mut trace.segments, room)?,
        ChunkKind::Annotations => {
            let n = c.count(7).map_err(malformed)?;
            room.records::<Annotation>(n)?;
            let mut previous = 0i64;
            for _ in 0..n {
                let kind = AnnotationKind::from_u8(c.u8().map_err(malformed)?).ok_or("unknown annotation kind")?;
                let device = annotation_device(c.sv().map_err(malformed)?)?;
                let process = process(c.uv().map_err(malformed)?)?;
                let start_ns = previous.wrapping_add(c.sv().map_err(malformed)?);
                let end_ns = start_ns.wrapping_add(c.uv().map_err(malformed)? as i64);
                let name = ids.string(c.uv().map_err(malformed)?)?;
                let stack = ids.stack(c.uv().map_err(malformed)?)?;
                previous = start_ns;
                trace.annotations.push(Annotation { kind, device, process, start_ns, end_ns, name, stack });
            }
        }
        ChunkKind::Ooms => {
            let n = c.count(7).map_err(malformed)?;
            room.records::<Oom>(n)?;
            let mut previous = 0i64;
            for _ in 0..n {
                let time_ns = previous.wrapping_add(c.sv().map_err(malformed)?);
                let oom = Oom {
                    time_ns,
                    device: device(c.sv().map_err(malformed)?)?,
                    process: process(c.uv().map_err(malformed)?)?,
                    stream: c.uv().map_err(malformed)?,
                    requested_bytes: c.uv().map_err(malformed)?,
                    device_free_bytes: c.uv().map_err(malformed)?.checked_sub(1),
                    stack: ids.stack(c.uv().map_err(malformed)?)?,
                };
                previous = time_ns;
                trace.ooms.push(oom);
            }
        }
        ChunkKind::Counters => decode_counters(&mut c, &ids, &mut trace.counters, room)?,
        ChunkKind::Tags => {
            let n = c.count(6).map_err(malformed)?;
            room.records::<Tag>(n)?;
            let mut previous = 0i64;
            for _ in 0..n {
                let time_ns = previous.wrapping_add(c.sv().map_err(malformed)?);
                let tag = Tag {
                    time_ns,
                    device: device(c.sv().map_err(malformed)?)?,
                    process: process(c.uv().map_err(malformed)?)?,
                    address: c.uv().map_err(malformed)?,
                    category: Category::from_u8(c.u8().map_err(malformed)?).ok_or("unknown category")?,
                    name: ids.string(c.uv().map_err(malformed)?)?,
                };
                previous = time_ns;
                trace.tags.push(tag);
            }
        }
        ChunkKind::End => {}
    }
    if !c.at_end() {
        return Err("the chunk has bytes after its last record".to_owned());
    }
    Ok(())
}

/// Decodes a segments chunk's records into `out`.
fn decode_segments(c: &mut Cursor<'_>, ids: &Ids, out: &mut Vec<Segment>, room: &mut Room) -> Result<(), String> {
    let n = c.count(11).map_err(malformed)?;
    room.records::<Segment>(n)?;
    for _ in 0..n {
        let mut s = Segment {
            device: device(c.sv().map_err(malformed)?)?,
            process: process(c.uv().map_err(malformed)?)?,
            address: c.uv().map_err(malformed)?,
            size_bytes: c.uv().map_err(malformed)?,
            stream: c.uv().map_err(malformed)?,
            pool: SegmentPool::from_u8(c.u8().map_err(malformed)?).ok_or("unknown segment pool")?,
            pool_id: (c.uv().map_err(malformed)?, c.uv().map_err(malformed)?),
            is_expandable: c.u8().map_err(malformed)? != 0,
            stack: ids.stack(c.uv().map_err(malformed)?)?,
            blocks: Vec::new(),
        };
        let blocks = c.count(5).map_err(malformed)?;
        room.records::<Block>(blocks)?;
        s.blocks.reserve(blocks);
        let mut cursor = s.address;
        for _ in 0..blocks {
            let address = cursor.wrapping_add(c.sv().map_err(malformed)? as u64);
            let b = Block {
                address,
                size_bytes: c.uv().map_err(malformed)?,
                requested_bytes: c.uv().map_err(malformed)?,
                state: BlockState::from_u8(c.u8().map_err(malformed)?).ok_or("unknown block state")?,
                stack: ids.stack(c.uv().map_err(malformed)?)?,
            };
            cursor = address.wrapping_add(b.size_bytes);
            s.blocks.push(b);
        }
        out.push(s);
    }
    Ok(())
}

/// Decodes a counters chunk's series into `out`.
fn decode_counters(c: &mut Cursor<'_>, ids: &Ids, out: &mut Vec<CounterSeries>, room: &mut Room) -> Result<(), String> {
    let n = c.count(6).map_err(malformed)?;
    room.records::<CounterSeries>(n)?;
    for _ in 0..n {
        let kind_bytes = [c.u8().map_err(malformed)?, c.u8().map_err(malformed)?];
        let kind = CounterKind::from_bytes(kind_bytes).ok_or("unknown counter kind")?;
        let name = ids.string(c.uv().map_err(malformed)?)?;
        let device = device(c.sv().map_err(malformed)?)?;
        let process = process(c.uv().map_err(malformed)?)?;
        let count = c.count(2).map_err(malformed)?;
        room.records::<CounterSample>(count)?;
        let mut samples = Vec::with_capacity(count);
        let (mut time_ns, mut value) = (0i64, 0i64);
        for _ in 0..count {
            time_ns = time_ns.wrapping_add(c.sv().map_err(malformed)?);
            value = value.wrapping_add(c.sv().map_err(malformed)?);
            samples.push(CounterSample { time_ns, value });
        }
        // A long series is split over chunks: continue the previous part.
        match out.last_mut() {
            Some(last)
                if last.kind == kind && last.name == name && last.device == device && last.process == process =>
            {
                last.samples.extend(samples);
            }
            _ => out.push(CounterSeries { kind, name, device, process, samples }),
        }
    }
    Ok(())
}

/// Decodes an events chunk into `out`; on error `out` is left as it was.
fn decode_events(c: &mut Cursor<'_>, ids: &Ids, out: &mut Vec<Event>, room: &mut Room) -> Result<(), Option<String>> {
    let n = c.count(10).map_err(|_| None)?;
    room.records::<Event>(n).map_err(Some)?;
    let base = out.len();
    let kinds = c.bytes(n).map_err(|_| None)?;
    let result = (|| -> Result<(), Option<String>> {
        out.reserve(n);
        for &byte in kinds {
            let kind =
                EventKind::from_u8(byte & 0x0f).ok_or_else(|| Some(format!("unknown event kind {}", byte & 0x0f)))?;
            let mut event = Event::new(kind, 0, 0, 0, 0);
            event.flags = byte >> 4;
            out.push(event);
        }
        let events = &mut out[base..];
        let mut previous = 0i64;
        for e in events.iter_mut() {
            previous = previous.wrapping_add(c.sv().map_err(|_| None)?);
            e.time_ns = previous;
        }
        let mut previous = 0i64;
        for e in events.iter_mut() {
            previous = previous.wrapping_add(c.sv().map_err(|_| None)?);
            e.device = device(previous).map_err(Some)?;
        }
        for e in events.iter_mut() {
            e.process = process(c.uv().map_err(|_| None)?).map_err(Some)?;
        }
        let mut previous = 0u64;
        for e in events.iter_mut() {
            previous = previous.wrapping_add(c.sv().map_err(|_| None)? as u64);
            e.address = previous;
        }
        for e in events.iter_mut() {
            e.size_bytes = c.uv().map_err(|_| None)?;
        }
        for e in events.iter_mut() {
            // What the allocator added; a request above the block's size (older files could hold
            // one) reads as the block's size.
            e.slack_bytes = u32::try_from(c.sv().map_err(|_| None)?.max(0)).unwrap_or(u32::MAX);
        }
        let mut previous = 0u64;
        for e in events.iter_mut() {
            previous = previous.wrapping_add(c.sv().map_err(|_| None)? as u64);
            e.stream = previous.into();
        }
        for e in events.iter_mut() {
            e.stack = ids.stack(c.uv().map_err(|_| None)?).map_err(Some)?;
        }
        for e in events.iter_mut() {
            let v = c.uv().map_err(|_| None)?;
            if v as usize >= ids.contexts {
                return Err(Some(format!("context id {v} is not defined")));
            }
            e.context = ContextId(v as u32);
        }
        Ok(())
    })();
    if result.is_err() {
        out.truncate(base);
    }
    result
}

/// Table sizes before a chunk is decoded, to undo a chunk that turns out damaged.
struct Lens {
    interner: [usize; 4],
    events: usize,
    segments: usize,
    annotations: usize,
    ooms: usize,
    counters: usize,
    last_counter_samples: usize,
    tags: usize,
}

impl Lens {
    fn of(trace: &Trace) -> Self {
        Self {
            interner: trace.interner.lens(),
            events: trace.events.len(),
            segments: trace.segments.len(),
            annotations: trace.annotations.len(),
            ooms: trace.ooms.len(),
            counters: trace.counters.len(),
            last_counter_samples: trace.counters.last().map_or(0, |c| c.samples.len()),
            tags: trace.tags.len(),
        }
    }

    fn restore(&self, trace: &mut Trace) {
        trace.interner.truncate(self.interner);
        trace.events.truncate(self.events);
        trace.segments.truncate(self.segments);
        trace.annotations.truncate(self.annotations);
        trace.ooms.truncate(self.ooms);
        trace.counters.truncate(self.counters);
        if let Some(last) = trace.counters.last_mut() {
            last.samples.truncate(self.last_counter_samples);
        }
        trace.tags.truncate(self.tags);
    }
}

/// Reads a `.vtrace` from its bytes, within the memory the machine has available
/// ([`Limit::of_machine`]).
///
/// A damaged or truncated tail is not an error: everything before it is returned with a
/// [`Damage`] report. Only a file whose header is unreadable, or of a newer version, fails, or
/// one whose chunks would take more memory than the limit ([`Error::Memory`]).
pub fn read(data: &[u8], progress: &dyn Progress) -> Result<Loaded> {
    read_within(data, progress, Limit::of_machine())
}

/// Reads a `.vtrace` from its bytes, holding at most `limit` for what its chunks decode to.
///
/// How much a file may decode to is what it declares, not a multiple of its size (columns of
/// alike values compress without bound): a chunk's header gives the size it inflates to (at
/// most [`MAX_CHUNK_BYTES`]), and inside, each table's count and each string's length give what
/// the model will hold. Both are taken from `limit` before anything of that size is allocated;
/// past it, the read stops with [`Error::Memory`] (the records' own sizes are counted, not a
/// vector's spare capacity).
pub fn read_within(data: &[u8], progress: &dyn Progress, limit: Limit) -> Result<Loaded> {
    if data.len() < HEADER_BYTES || data[..8] != MAGIC {
        if data.len() < HEADER_BYTES && data.starts_with(&MAGIC[..data.len().min(8)]) {
            return Err(Error::Vtrace { offset: 0, message: "the file ends inside its 16-byte header".to_owned() });
        }
        return Err(Error::Vtrace { offset: 0, message: "no .vtrace header".to_owned() });
    }
    let version = u16::from_le_bytes([data[8], data[9]]);
    if version == 0 {
        return Err(Error::Vtrace { offset: 8, message: "version 0 is not a .vtrace version".to_owned() });
    }
    if version > VERSION {
        return Err(Error::VtraceVersion { found: version, supported: VERSION });
    }
    let mut trace = Trace::default();
    let mut pos = HEADER_BYTES;
    let mut damage = None;
    let mut ended = false;
    let mut raw = Vec::new();
    let total = data.len() as u64;
    let mut held = 0u64;
    let mut next_report = 0usize;
    while pos < data.len() {
        if pos >= next_report {
            next_report = pos + (8 << 20);
            if !progress.update(pos as u64, total) {
                return Err(Error::Cancelled);
            }
        }
        let fail = |reason: String| Damage { offset: pos as u64, reason, bytes_lost: total - pos as u64 };
        if ended {
            damage = Some(fail("data after the end marker".to_owned()));
            break;
        }
        let Some(header) = data.get(pos..pos + CHUNK_HEADER_BYTES) else {
            damage = Some(fail("the file ends inside a chunk header (the writer was interrupted)".to_owned()));
            break;
        };
        let kind_byte = header[0];
        let codec = header[1];
        let stored_len = u32::from_le_bytes([header[4], header[5], header[6], header[7]]) as usize;
        let raw_len = u32::from_le_bytes([header[8], header[9], header[10], header[11]]);
        let crc = u32::from_le_bytes([header[12], header[13], header[14], header[15]]);
        let body_start = pos + CHUNK_HEADER_BYTES;
        let Some(stored) = data.get(body_start..body_start.saturating_add(stored_len)) else {
            damage = Some(fail(format!(
                "a chunk of {stored_len} bytes runs past the end of the file (the writer was interrupted)"
            )));
            break;
        };
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&header[..12]);
        hasher.update(stored);
        if hasher.finalize() != crc {
            damage = Some(fail("checksum mismatch".to_owned()));
            break;
        }
        if raw_len > MAX_CHUNK_BYTES {
            damage = Some(fail(format!("a chunk claims {raw_len} bytes, more than the limit")));
            break;
        }
        // Chunks of kinds a later minor revision may add are skipped, without decompressing.
        let Some(kind) = ChunkKind::from_u8(kind_byte) else {
            pos = body_start + stored_len;
            continue;
        };
        // The buffer a chunk inflates into is held too, at its largest so far.
        let buffer = (raw.capacity() as u64).max(if codec == 1 { u64::from(raw_len) } else { 0 });
        if held.saturating_add(buffer) > limit.bytes {
            return Err(too_much(held.saturating_add(buffer), body_start + stored_len, limit));
        }
        let payload: &[u8] = match codec {
            0 if stored.len() == raw_len as usize => stored,
            0 => {
                damage = Some(fail("a stored chunk's two lengths differ".to_owned()));
                break;
            }
            1 => {
                raw.resize(raw_len as usize, 0);
                match zstd::bulk::decompress_to_buffer(stored, raw.as_mut_slice()) {
                    Ok(n) if n == raw_len as usize => &raw,
                    _ => {
                        damage = Some(fail("a compressed chunk does not decompress to its stated size".to_owned()));
                        break;
                    }
                }
            }
            _ => {
                damage = Some(fail(format!("unknown codec {codec}")));
                break;
            }
        };
        let before = Lens::of(&trace);
        let mut room = Room { left: limit.bytes.saturating_sub(held.saturating_add(buffer)), short: None };
        if let Err(reason) = decode_chunk(&mut trace, kind, payload, &mut room) {
            if let Some(needed) = room.short {
                let held_now = limit.bytes - room.left;
                return Err(too_much(held_now.saturating_add(needed), body_start + stored_len, limit));
            }
            // A damaged chunk contributes nothing, not even its first records.
            before.restore(&mut trace);
            damage = Some(fail(reason));
            break;
        }
        held = limit.bytes - room.left - buffer;
        ended = kind == ChunkKind::End;
        pos = body_start + stored_len;
    }
    if damage.is_none() && !ended {
        damage = Some(Damage {
            offset: total,
            reason: "the file has no end marker (the recording did not finish)".to_owned(),
            bytes_lost: 0,
        });
    }
    trace.sort_events();
    trace.annotations.sort_by_key(Annotation::order);
    // Files written before it was kept do not say whether frees come in two steps.
    trace.settle_free_steps();
    progress.update(total, total);
    Ok(Loaded { trace, damage })
}
