//! Writing `.vtrace` files, whole or as a stream of chunks.

use std::io::Write;

use super::codec::{put_sv, put_uv};
use super::{ANNOTATION_ALL_DEVICES, CHUNK_HEADER_BYTES, ChunkKind, EVENTS_PER_CHUNK, MAGIC, VERSION};
use crate::error::{Error, Result};
use crate::model::annotation::Annotation;
use crate::model::counter::CounterSeries;
use crate::model::event::Event;
use crate::model::interner::Interner;
use crate::model::metadata::Metadata;
use crate::model::oom::Oom;
use crate::model::segment::Segment;
use crate::model::tag::Tag;
use crate::model::trace::Trace;

/// zstd level: level 3 is the library's default balance of speed and ratio.
const ZSTD_LEVEL: i32 = 3;
/// Table entries per chunk, so that a chunk stays well under a mebibyte.
const TABLE_ENTRIES_PER_CHUNK: usize = 1 << 14;
/// Records per chunk for the smaller tables.
const RECORDS_PER_CHUNK: usize = 1 << 15;

/// Appends chunks to a `.vtrace` stream.
///
/// Interned tables are written incrementally: before each chunk of records, the entries added to
/// the [`Interner`] since the last chunk are written, so a reader never meets an id it cannot
/// resolve, and a stream cut anywhere stays readable up to its last whole chunk.
pub struct Writer<W: Write> {
    out: W,
    strings_written: usize,
    frames_written: usize,
    stacks_written: usize,
    contexts_written: usize,
    payload: Vec<u8>,
}

impl<W: Write> Writer<W> {
    /// Writes the file header and the metadata.
    pub fn new(mut out: W, metadata: &Metadata) -> Result<Self> {
        let mut header = [0u8; super::HEADER_BYTES];
        header[..8].copy_from_slice(&MAGIC);
        header[8..10].copy_from_slice(&VERSION.to_le_bytes());
        out.write_all(&header)?;
        let mut writer = Self {
            out,
            // Id 0 of strings, stacks and contexts is implicit in every reader.
            strings_written: 1,
            frames_written: 0,
            stacks_written: 1,
            contexts_written: 1,
            payload: Vec::new(),
        };
        writer.write_metadata(metadata)?;
        Ok(writer)
    }

    fn chunk(&mut self, kind: ChunkKind) -> Result<()> {
        let raw_len = u32::try_from(self.payload.len())
            .ok()
            .filter(|&n| n <= super::MAX_CHUNK_BYTES)
            .ok_or_else(|| Error::Structure("internal: chunk payload too large".to_owned()))?;
        let (codec, stored) = if self.payload.len() < 64 {
            (0u8, std::mem::take(&mut self.payload))
        } else {
            (1u8, zstd::bulk::compress(&self.payload, ZSTD_LEVEL)?)
        };
        let mut header = [0u8; CHUNK_HEADER_BYTES];
        header[0] = kind as u8;
        header[1] = codec;
        header[4..8].copy_from_slice(&(stored.len() as u32).to_le_bytes());
        header[8..12].copy_from_slice(&raw_len.to_le_bytes());
        let mut crc = crc32fast::Hasher::new();
        crc.update(&header[..12]);
        crc.update(&stored);
        header[12..16].copy_from_slice(&crc.finalize().to_le_bytes());
        self.out.write_all(&header)?;
        self.out.write_all(&stored)?;
        self.payload.clear();
        Ok(())
    }

    /// Writes (or replaces, for readers) the trace's metadata.
    pub fn write_metadata(&mut self, metadata: &Metadata) -> Result<()> {
        self.payload = serde_json::to_vec(metadata)?;
        self.chunk(ChunkKind::Metadata)
    }

    /// Writes interned entries added since the last call.
    pub fn sync_tables(&mut self, interner: &Interner) -> Result<()> {
        while self.strings_written < interner.string_count() {
            let end = (self.strings_written + TABLE_ENTRIES_PER_CHUNK).min(interner.string_count());
            put_uv(&mut self.payload, self.strings_written as u64);
            put_uv(&mut self.payload, (end - self.strings_written) as u64);
            for text in interner.strings().skip(self.strings_written).take(end - self.strings_written) {
                put_uv(&mut self.payload, text.len() as u64);
                self.payload.extend_from_slice(text.as_bytes());
            }
            self.strings_written = end;
            self.chunk(ChunkKind::Strings)?;
        }
        while self.frames_written < interner.frame_count() {
            let end = (self.frames_written + TABLE_ENTRIES_PER_CHUNK).min(interner.frame_count());
            put_uv(&mut self.payload, self.frames_written as u64);
            put_uv(&mut self.payload, (end - self.frames_written) as u64);
            for frame in &interner.frames()[self.frames_written..end] {
                put_uv(&mut self.payload, u64::from(frame.function.0));
                put_uv(&mut self.payload, u64::from(frame.file.0));
                put_uv(&mut self.payload, u64::from(frame.line));
            }
            self.frames_written = end;
            self.chunk(ChunkKind::Frames)?;
        }
        while self.stacks_written < interner.stack_count() {
            let end = (self.stacks_written + TABLE_ENTRIES_PER_CHUNK).min(interner.stack_count());
            put_uv(&mut self.payload, self.stacks_written as u64);
            put_uv(&mut self.payload, (end - self.stacks_written) as u64);
            for frames in interner.stacks().skip(self.stacks_written).take(end - self.stacks_written) {
                put_uv(&mut self.payload, frames.len() as u64);
                for frame in frames {
                    put_uv(&mut self.payload, u64::from(frame.0));
                }
            }
            self.stacks_written = end;
            self.chunk(ChunkKind::Stacks)?;
        }
        while self.contexts_written < interner.context_count() {
            let end = (self.contexts_written + TABLE_ENTRIES_PER_CHUNK).min(interner.context_count());
            put_uv(&mut self.payload, self.contexts_written as u64);
            put_uv(&mut self.payload, (end - self.contexts_written) as u64);
            for context in &interner.contexts()[self.contexts_written..end] {
                put_uv(&mut self.payload, u64::from(context.compile_context.0));
                put_uv(&mut self.payload, u64::from(context.user_metadata.0));
            }
            self.contexts_written = end;
            self.chunk(ChunkKind::Contexts)?;
        }
        Ok(())
    }

    /// Writes events (in chunks of [`EVENTS_PER_CHUNK`]), after any new interned entries.
    pub fn write_events(&mut self, interner: &Interner, events: &[Event]) -> Result<()> {
        self.sync_tables(interner)?;
        for chunk in events.chunks(EVENTS_PER_CHUNK) {
            encode_events(&mut self.payload, chunk);
            self.chunk(ChunkKind::Events)?;
        }
        Ok(())
    }

    /// Writes segments of the final allocator state.
    pub fn write_segments(&mut self, interner: &Interner, segments: &[Segment]) -> Result<()> {
        self.sync_tables(interner)?;
        for chunk in segments.chunks(1024) {
            put_uv(&mut self.payload, chunk.len() as u64);
            for s in chunk {
                put_sv(&mut self.payload, i64::from(s.device.0));
                put_uv(&mut self.payload, u64::from(s.process.0));
                put_uv(&mut self.payload, s.address);
                put_uv(&mut self.payload, s.size_bytes);
                put_uv(&mut self.payload, s.stream);
                self.payload.push(s.pool as u8);
                put_uv(&mut self.payload, s.pool_id.0);
                put_uv(&mut self.payload, s.pool_id.1);
                self.payload.push(u8::from(s.is_expandable));
                put_uv(&mut self.payload, u64::from(s.stack.0));
                put_uv(&mut self.payload, s.blocks.len() as u64);
                let mut cursor = s.address;
                for b in &s.blocks {
                    put_sv(&mut self.payload, b.address.wrapping_sub(cursor) as i64);
                    put_uv(&mut self.payload, b.size_bytes);
                    put_uv(&mut self.payload, b.requested_bytes);
                    self.payload.push(b.state as u8);
                    put_uv(&mut self.payload, u64::from(b.stack.0));
                    cursor = b.address.wrapping_add(b.size_bytes);
                }
            }
            self.chunk(ChunkKind::Segments)?;
        }
        Ok(())
    }

    /// Writes annotations.
    pub fn write_annotations(&mut self, interner: &Interner, annotations: &[Annotation]) -> Result<()> {
        self.sync_tables(interner)?;
        for chunk in annotations.chunks(RECORDS_PER_CHUNK) {
            put_uv(&mut self.payload, chunk.len() as u64);
            let mut previous = 0i64;
            for a in chunk {
                self.payload.push(a.kind as u8);
                put_sv(&mut self.payload, i64::from(a.device.map_or(ANNOTATION_ALL_DEVICES, |d| d.0)));
                put_uv(&mut self.payload, u64::from(a.process.0));
                put_sv(&mut self.payload, a.start_ns.wrapping_sub(previous));
                put_uv(&mut self.payload, a.end_ns.wrapping_sub(a.start_ns) as u64);
                put_uv(&mut self.payload, u64::from(a.name.0));
                put_uv(&mut self.payload, u64::from(a.stack.0));
                previous = a.start_ns;
            }
            self.chunk(ChunkKind::Annotations)?;
        }
        Ok(())
    }

    /// Writes out-of-memory events.
    pub fn write_ooms(&mut self, interner: &Interner, ooms: &[Oom]) -> Result<()> {
        self.sync_tables(interner)?;
        for chunk in ooms.chunks(RECORDS_PER_CHUNK) {
            put_uv(&mut self.payload, chunk.len() as u64);
            let mut previous = 0i64;
            for o in chunk {
                put_sv(&mut self.payload, o.time_ns.wrapping_sub(previous));
                put_sv(&mut self.payload, i64::from(o.device.0));
                put_uv(&mut self.payload, u64::from(o.process.0));
                put_uv(&mut self.payload, o.stream);
                put_uv(&mut self.payload, o.requested_bytes);
                // 0 means unknown; a known value is stored plus one.
                put_uv(&mut self.payload, o.device_free_bytes.map_or(0, |v| v.saturating_add(1)));
                put_uv(&mut self.payload, u64::from(o.stack.0));
                previous = o.time_ns;
            }
            self.chunk(ChunkKind::Ooms)?;
        }
        Ok(())
    }

    /// Writes counter series (a long series is split over chunks with the same header).
    pub fn write_counters(&mut self, interner: &Interner, counters: &[CounterSeries]) -> Result<()> {
        self.sync_tables(interner)?;
        for series in counters {
            let parts: Vec<_> = if series.samples.is_empty() {
                vec![&series.samples[..]]
            } else {
                series.samples.chunks(EVENTS_PER_CHUNK).collect()
            };
            for part in parts {
                put_uv(&mut self.payload, 1);
                self.payload.extend_from_slice(&series.kind.to_bytes());
                put_uv(&mut self.payload, u64::from(series.name.0));
                put_sv(&mut self.payload, i64::from(series.device.0));
                put_uv(&mut self.payload, u64::from(series.process.0));
                put_uv(&mut self.payload, part.len() as u64);
                let (mut time, mut value) = (0i64, 0i64);
                for sample in part {
                    put_sv(&mut self.payload, sample.time_ns.wrapping_sub(time));
                    put_sv(&mut self.payload, sample.value.wrapping_sub(value));
                    time = sample.time_ns;
                    value = sample.value;
                }
                self.chunk(ChunkKind::Counters)?;
            }
        }
        Ok(())
    }

    /// Writes tags.
    pub fn write_tags(&mut self, interner: &Interner, tags: &[Tag]) -> Result<()> {
        self.sync_tables(interner)?;
        for chunk in tags.chunks(RECORDS_PER_CHUNK) {
            put_uv(&mut self.payload, chunk.len() as u64);
            let mut previous = 0i64;
            for t in chunk {
                put_sv(&mut self.payload, t.time_ns.wrapping_sub(previous));
                put_sv(&mut self.payload, i64::from(t.device.0));
                put_uv(&mut self.payload, u64::from(t.process.0));
                put_uv(&mut self.payload, t.address);
                self.payload.push(t.category as u8);
                put_uv(&mut self.payload, u64::from(t.name.0));
                previous = t.time_ns;
            }
            self.chunk(ChunkKind::Tags)?;
        }
        Ok(())
    }

    /// Flushes buffered bytes to the underlying writer.
    pub fn flush(&mut self) -> Result<()> {
        self.out.flush()?;
        Ok(())
    }

    /// Writes the end marker and returns the underlying writer.
    pub fn finish(mut self) -> Result<W> {
        self.chunk(ChunkKind::End)?;
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Encodes events column by column: each column's values are alike, which zstd compresses well.
fn encode_events(out: &mut Vec<u8>, events: &[Event]) {
    put_uv(out, events.len() as u64);
    // Flags take the high nibble: four flag bits are all version 1 has room for.
    out.extend(events.iter().map(|e| (e.kind as u8) | ((e.flags & 0x0f) << 4)));
    let mut previous = 0i64;
    for e in events {
        put_sv(out, e.time_ns.wrapping_sub(previous));
        previous = e.time_ns;
    }
    let mut previous = 0i64;
    for e in events {
        put_sv(out, i64::from(e.device.0) - previous);
        previous = i64::from(e.device.0);
    }
    for e in events {
        put_uv(out, u64::from(e.process.0));
    }
    let mut previous = 0u64;
    for e in events {
        put_sv(out, e.address.wrapping_sub(previous) as i64);
        previous = e.address;
    }
    for e in events {
        put_uv(out, e.size_bytes);
    }
    for e in events {
        put_sv(out, i64::from(e.slack_bytes));
    }
    let mut previous = 0u64;
    for e in events {
        let stream = e.stream.raw();
        put_sv(out, stream.wrapping_sub(previous) as i64);
        previous = stream;
    }
    for e in events {
        put_uv(out, u64::from(e.stack.0));
    }
    for e in events {
        put_uv(out, u64::from(e.context.0));
    }
}

/// Writes a whole trace.
pub fn write<W: Write>(trace: &Trace, out: W) -> Result<W> {
    // Whether each device's frees come in two steps is written down, so that a reader never has
    // to work it out (and reads back what was written).
    let mut metadata = std::borrow::Cow::Borrowed(&trace.metadata);
    if metadata.devices.iter().any(|d| d.frees_in_two_steps.is_none()) {
        for info in &mut metadata.to_mut().devices {
            info.frees_in_two_steps.get_or_insert_with(|| trace.frees_in_two_steps(info.device));
        }
    }
    let mut writer = Writer::new(out, &metadata)?;
    writer.sync_tables(&trace.interner)?;
    writer.write_segments(&trace.interner, &trace.segments)?;
    writer.write_events(&trace.interner, &trace.events)?;
    writer.write_annotations(&trace.interner, &trace.annotations)?;
    writer.write_ooms(&trace.interner, &trace.ooms)?;
    writer.write_counters(&trace.interner, &trace.counters)?;
    writer.write_tags(&trace.interner, &trace.tags)?;
    writer.finish()
}
