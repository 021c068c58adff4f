//! Importer of PyTorch memory snapshots (`torch.cuda.memory._dump_snapshot`).
//!
//! A snapshot is a pickled dict: `segments` (the allocator's state when the snapshot was taken),
//! `device_traces` (one list of trace entries per device: the allocator's history, often a ring
//! buffer that dropped the start of the run), `allocator_settings` and `external_annotations`.
//! Older snapshots are a bare list of segments whose blocks carry a `history` instead of `frames`.
//!
//! The pickle is run by the `pickle` module with a sink (`sink.rs`) that turns frame dicts,
//! trace entries, blocks and segments into compact records the moment each dict is complete,
//! interning frames and stacks as it goes; `build.rs` then assembles the trace.

mod build;
mod entries;
mod fx;
mod halves;
mod json;
pub use self::halves::BUILT_IN_HALVES;
mod keys;
mod listed;
mod settle;
mod sink;

use self::build::{RangeBuild, build_trace};
use self::entries::Entries;
use self::json::{MAX_JSON_NODES, to_json};
use self::listed::Listed;
use self::sink::SnapshotSink;
use super::Imported;
use super::pickle::{self, ContainerKind, Handle, RecordKind, Store, Value};
use crate::error::{Error, Result};
use crate::model::ids::{FrameId, StackId, StringId};
use crate::model::interner::Interner;
use crate::model::metadata::SourceFormat;
use crate::model::segment::Segment;
use crate::progress::Progress;
use crate::range::TraceRange;

/// One record of `external_annotations` (`record_function` ranges and the like): its fields
/// that are there and of the right type.
#[derive(Clone, Copy, Debug)]
pub(crate) struct External {
    /// `START` or `END`.
    pub(crate) stage: Option<StringId>,
    pub(crate) name: Option<StringId>,
    pub(crate) device: Option<i64>,
    pub(crate) time_us: Option<i64>,
}

/// Reads `external_annotations`, a list of dicts, as records: as many as the file holds (each
/// is a dict of the file), with no bound on generic values, since a long run's
/// `record_function` ranges number in the millions. Most were made records by the sink as the
/// pickle streamed by; a dict with other keys is read here.
fn external_records(store: &Store, value: Value, made: &[External]) -> Result<Vec<External>, String> {
    let handle = match value {
        Value::None | Value::Missing => return Ok(Vec::new()),
        Value::Container(h) if store.kind(h)? != ContainerKind::Dict => h,
        other => return Err(format!("it should be a list, found {}", describe(store, other))),
    };
    let mut records = Vec::with_capacity(store.len(handle)?);
    store.for_each_item(handle, |item| {
        let mut record = External { stage: None, name: None, device: None, time_us: None };
        if let Value::Record(RecordKind::External, index) = item
            && let Some(&made) = made.get(index as usize)
        {
            record = made;
        } else if let Value::Container(h) = item
            && store.kind(h)? == ContainerKind::Dict
        {
            store.for_each_pair(h, |key, value| {
                let string = match value {
                    Value::Str(id) => Some(id),
                    _ => None,
                };
                match store.str(key) {
                    Some("stage") => record.stage = string,
                    Some("name") => record.name = string,
                    Some("device") => record.device = value.as_i64(),
                    Some("time_us") => record.time_us = value.as_i64(),
                    _ => {}
                }
                Ok(())
            })?;
        }
        records.push(record);
        Ok(())
    })?;
    Ok(records)
}

fn structure(message: impl Into<String>) -> Error {
    Error::Structure(message.into())
}

/// The highest device index PyTorch can give (`c10::DeviceIndex` is an `int8_t`).
const MAX_DEVICE_INDEX: i16 = 127;

/// What a value is, for messages about a field of the wrong type.
fn describe(store: &Store, value: Value) -> String {
    match value {
        Value::None | Value::Missing => "None".to_owned(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Int(v) => format!("the integer {v}"),
        Value::UInt(v) => format!("the integer {v}"),
        Value::BigInt => "an integer wider than 64 bits".to_owned(),
        Value::Float(v) => format!("the number {v}"),
        Value::Str(id) => {
            let text = store.interner.resolve(id);
            let short: String = text.chars().take(40).collect();
            format!("the string {short:?}")
        }
        Value::Bytes(n) => format!("{n} bytes"),
        Value::Frame(_) => "a frame dict".to_owned(),
        Value::Stack(_) => "a list of frames".to_owned(),
        Value::Record(RecordKind::Entry, _) => "a trace entry dict".to_owned(),
        Value::Record(RecordKind::Block, _) => "a block dict".to_owned(),
        Value::Record(RecordKind::Segment, _) => "a segment dict".to_owned(),
        Value::Record(RecordKind::External, _) => "an external annotation dict".to_owned(),
        Value::Container(h) => match store.kind(h) {
            Ok(ContainerKind::Dict) => "a dict".to_owned(),
            Ok(ContainerKind::Tuple) => "a tuple".to_owned(),
            Ok(ContainerKind::Set) => "a set".to_owned(),
            Ok(ContainerKind::List) => "a list".to_owned(),
            Err(_) => "an object already consumed".to_owned(),
        },
    }
}

/// A field that must be a list (or tuple): its container, `None` when absent or empty, or an
/// error naming the field and what it holds instead.
fn list_of(store: &Store, value: Value, field: &str) -> Result<Option<Handle>> {
    match value {
        Value::None | Value::Missing => Ok(None),
        // An empty list may have been read as the empty stack of frames.
        Value::Stack(StackId(0)) => Ok(None),
        Value::Container(h)
            if matches!(store.kind(h).map_err(structure)?, ContainerKind::List | ContainerKind::Tuple) =>
        {
            Ok(Some(h))
        }
        other => Err(structure(format!("'{field}' should be a list, found {}", describe(store, other)))),
    }
}

/// Reads a snapshot pickle.
pub fn import_snapshot(data: &[u8], progress: &dyn Progress) -> Result<Imported> {
    parse(data, progress, None)?.build()
}

/// A snapshot read from its pickle, not yet turned into a trace: it no longer needs the bytes.
pub(crate) struct Parsed {
    interner: Interner,
    segments: Vec<Segment>,
    entries: Entries,
    per_device: Vec<(i16, Listed)>,
    external: Vec<External>,
    settings: serde_json::Value,
    extra: serde_json::Map<String, serde_json::Value>,
    warnings: Vec<String>,
    fx_traces: rustc_hash::FxHashMap<FrameId, StringId>,
    /// Pieces of the pickle run in parallel and taken in.
    pieces_taken: usize,
    /// When only a range was kept: what the rest left behind.
    range: Option<RangeBuild>,
}

impl Parsed {
    /// Builds the trace.
    pub(crate) fn build(self) -> Result<Imported> {
        self.build_with(Some(halves::MIN_ENTRIES))
    }

    /// Builds the trace, a device's events on two threads from `two_threads_from` entries on
    /// (`None`: never).
    fn build_with(mut self, two_threads_from: Option<usize>) -> Result<Imported> {
        let mut trace = build_trace(
            two_threads_from,
            self.interner,
            self.segments,
            self.entries,
            self.per_device,
            &self.external,
            self.settings,
            self.extra,
            self.range,
            &mut self.warnings,
        )?;
        if !self.fx_traces.is_empty() {
            fx::expand_stacks(&mut trace, &self.fx_traces);
        }
        Ok(Imported { trace, warnings: self.warnings, format: SourceFormat::PytorchSnapshot, wrappers: Vec::new() })
    }
}

/// The keys at the top of a snapshot (a dict; or, before PyTorch 2.1, a bare list of segments).
struct TopLevel {
    segments_value: Value,
    traces_value: Value,
    settings: serde_json::Value,
    annotations_value: Value,
    host_traces_value: Value,
    extra: serde_json::Map<String, serde_json::Value>,
}

/// Reads the top of a snapshot; generic parts too large are left out with a warning.
fn top_level(store: &Store, root: Value, warnings: &mut Vec<String>) -> Result<TopLevel> {
    let mut segments_value = Value::None;
    let mut traces_value = Value::None;
    let mut settings = serde_json::Value::Null;
    let mut annotations_value = Value::None;
    let mut host_traces_value = Value::None;
    let mut extra = serde_json::Map::new();
    let mut budget = MAX_JSON_NODES;
    match root {
        Value::Container(h) if store.kind(h).map_err(structure)? == ContainerKind::Dict => {
            let mut pairs = Vec::new();
            store
                .for_each_pair(h, |k, v| {
                    pairs.push((k, v));
                    Ok(())
                })
                .map_err(structure)?;
            for (key, value) in pairs {
                match store.str(key) {
                    Some("segments") => segments_value = value,
                    Some("device_traces") => traces_value = value,
                    Some("allocator_settings") => match to_json(store, value, 0, &mut budget) {
                        Ok(json) => settings = json,
                        Err(m) => warnings.push(format!("the snapshot's allocator_settings were left out: {m}")),
                    },
                    Some("external_annotations") => annotations_value = value,
                    // Pinned host memory (`record_pinned_host_memory=True`, PyTorch 2.14+): one list
                    // of trace entries, shown as the host.
                    Some("host_traces") => host_traces_value = value,
                    Some(other) => {
                        let other = other.to_owned();
                        // Keys vramscope does not read are kept for the metadata when they are small;
                        // a large one is left out rather than refusing the snapshot.
                        match to_json(store, value, 0, &mut budget) {
                            Ok(json) => {
                                extra.insert(other, json);
                            }
                            Err(m) => warnings.push(format!("the snapshot's '{other}' was left out: {m}")),
                        }
                    }
                    None => {}
                }
            }
            if segments_value == Value::None && traces_value == Value::None {
                return Err(structure(
                    "this pickle is a dict without 'segments' or 'device_traces': not a PyTorch memory snapshot",
                ));
            }
        }
        // Snapshots from before PyTorch 2.1 are a bare list of segments.
        Value::Container(h) if store.kind(h).map_err(structure)? == ContainerKind::List => segments_value = root,
        _ => return Err(structure("this pickle holds neither a dict nor a list: not a PyTorch memory snapshot")),
    }

    Ok(TopLevel { segments_value, traces_value, settings, annotations_value, host_traces_value, extra })
}

/// The first and last entry a device's list names.
type Span = (u32, u32);

/// A bit per trace entry: whether a device's list named it already (an entry belongs to one).
struct Used {
    words: Vec<u64>,
    len: usize,
}

impl Used {
    fn new(len: usize) -> Self {
        Self { words: vec![0; len.div_ceil(64)], len }
    }

    /// Marks entry `index` named; false when it was already, or is no entry.
    fn take(&mut self, index: u32) -> bool {
        let bit = 1u64 << (index % 64);
        match self.words.get_mut(index as usize / 64) {
            Some(word) if *word & bit == 0 && (index as usize) < self.len => {
                *word |= bit;
                true
            }
            _ => false,
        }
    }

    /// Marks entries `first..first + n` named, if none was and all are entries; else marks none.
    fn take_run(&mut self, first: u32, n: u32) -> bool {
        let (start, end) = (first as usize, first as usize + n as usize);
        if n == 0 || end > self.len {
            return false;
        }
        let mask = |word: usize| -> u64 {
            let lo = (word * 64).max(start) - word * 64;
            let hi = ((word + 1) * 64).min(end) - word * 64;
            if hi - lo == 64 { u64::MAX } else { ((1u64 << (hi - lo)) - 1) << lo }
        };
        let words = start / 64..end.div_ceil(64);
        if words.clone().any(|w| self.words.get(w).is_none_or(|&bits| bits & mask(w) != 0)) {
            return false;
        }
        for w in words {
            if let Some(bits) = self.words.get_mut(w) {
                *bits |= mask(w);
            }
        }
        true
    }
}

/// Reads a snapshot pickle's contents, leaving the trace to [`Parsed::build`]; with `range`,
/// only that part of the trace is kept (the rest folded as it is read, [`crate::range`]).
pub(crate) fn parse(data: &[u8], progress: &dyn Progress, range: Option<TraceRange>) -> Result<Parsed> {
    match range {
        // Entries are folded in the order they are read: one machine reads them all.
        Some(range) => parse_with(data, progress, Some(1), Entries::in_range(range)),
        None => parse_with(data, progress, None, Entries::default()),
    }
}

/// Reads a snapshot pickle run in `pieces` pieces in parallel, however small it is (the result
/// is the same as [`import_snapshot`]'s; for tests and measurements).
#[doc(hidden)]
pub fn import_snapshot_in_pieces(data: &[u8], pieces: usize) -> Result<(Imported, usize)> {
    let parsed = parse_with(data, &crate::progress::NoProgress, Some(pieces), Entries::default())?;
    let taken = parsed.pieces_taken;
    Ok((parsed.build()?, taken))
}

/// The segments the snapshot lists, sorted by device and address, each taken once.
fn take_segments(
    store: &Store,
    segments_value: Value,
    sink: &mut SnapshotSink,
    warnings: &mut Vec<String>,
) -> Result<Vec<Segment>> {
    let mut segments = Vec::new();
    let mut repeated_segments = 0usize;
    if let Some(h) = list_of(store, segments_value, "segments")? {
        let mut i = 0usize;
        store
            .for_each_item(h, |item| {
                let Value::Record(RecordKind::Segment, index) = item else {
                    return Err(format!("segments[{i}] should be a segment dict, found {}", describe(store, item)));
                };
                // A segment is taken once: the same one named again (two bytes of pickle per
                // reference) would otherwise be copied, blocks and all, each time.
                match sink.segments.get_mut(index as usize).and_then(Option::take) {
                    Some(segment) => segments.push(segment),
                    None => repeated_segments += 1,
                }
                i += 1;
                Ok(())
            })
            .map_err(structure)?;
    }
    if repeated_segments > 0 {
        warnings.push(format!(
            "{repeated_segments} entries of 'segments' name a segment listed already; each segment is counted once"
        ));
    }
    if sink.shared_block_lists > 0 {
        warnings.push(format!(
            "{} segments name the block list of another segment; the blocks were given to the first only",
            sink.shared_block_lists
        ));
    }
    segments.sort_by_key(|s| (s.device, s.address));
    Ok(segments)
}

/// Reads a snapshot pickle and builds its trace with a device's events on two threads from
/// `two_threads_from` entries on, or never (`None`); the result is the same as
/// [`import_snapshot`]'s (for tests).
#[doc(hidden)]
pub fn import_snapshot_on_threads(data: &[u8], two_threads_from: Option<usize>) -> Result<Imported> {
    parse(data, &crate::progress::NoProgress, None)?.build_with(two_threads_from)
}

/// Reads a snapshot pickle with its trace entries read by their keys and values, as every other
/// dict, not field by field (the result is the same as [`import_snapshot`]'s; for tests).
#[doc(hidden)]
pub fn import_snapshot_by_pairs(data: &[u8]) -> Result<Imported> {
    parse_with_sink(data, &crate::progress::NoProgress, Some(1), Entries::default(), false)?.build()
}

fn parse_with(data: &[u8], progress: &dyn Progress, pieces: Option<usize>, entries: Entries) -> Result<Parsed> {
    parse_with_sink(data, progress, pieces, entries, true)
}

fn parse_with_sink(
    data: &[u8],
    progress: &dyn Progress,
    pieces: Option<usize>,
    entries: Entries,
    by_field: bool,
) -> Result<Parsed> {
    let mut interner = Interner::new();
    let mut sink = SnapshotSink::new(&mut interner);
    sink.entries = entries;
    sink.entries_by_field = by_field;
    let loaded = pickle::load(data, interner, &mut sink, progress, pieces)?;
    let store = loaded.store;
    let pieces_taken = loaded.pieces_taken;
    let mut warnings = Vec::new();

    let top = top_level(&store, loaded.root, &mut warnings)?;
    let TopLevel { segments_value, traces_value, settings, annotations_value, host_traces_value, extra } = top;
    let segments = take_segments(&store, segments_value, &mut sink, &mut warnings)?;

    // Per device, indices into the sink's entries (copying the entries would double the memory).
    // An entry belongs to one device's trace: one listed again (a list shared between devices,
    // or an entry named in two) is counted once.
    // With a range, only the entries kept are listed, and each device's list remembers the first
    // and last entry it named, which places the entries folded away.
    let mut per_device: Vec<(i16, Listed)> = Vec::new();
    let mut spans: Vec<(i16, u32, u32)> = Vec::new();
    let mut used = Used::new(sink.entries.len());
    let mut seen_lists = rustc_hash::FxHashSet::default();
    let mut repeated_entries = 0usize;
    let entries_store = &sink.entries;
    let mut entry_indices = |list: Option<Handle>, name: &dyn Fn(usize) -> String| -> Result<(Listed, Option<Span>)> {
        let mut entries = Listed::default();
        let mut span: Option<(u32, u32)> = None;
        let Some(l) = list else { return Ok((entries, span)) };
        if !seen_lists.insert(l) {
            repeated_entries += store.len(l).map_err(structure)?;
            return Ok((entries, span));
        }
        let mut i = 0usize;
        let not_an_entry = |i: usize, item: Value| {
            format!("{} should be a trace entry dict, found {}", name(i), describe(&store, item))
        };
        store
            .for_each_run(l, |items| {
                let (kind, first, n) = match items {
                    // A run of entries none named before, all kept (the usual case): in one go.
                    Ok((RecordKind::Entry, first, n)) if entries_store.stores_all() && used.take_run(first, n) => {
                        let last = first + (n - 1);
                        span = Some(span.map_or((first, last), |(lo, hi)| (lo.min(first), hi.max(last))));
                        entries.push_run(first, n);
                        i += n as usize;
                        return Ok(());
                    }
                    Ok(run) => run,
                    Err(Value::Record(kind, index)) => (kind, index, 1),
                    Err(item) => return Err(not_an_entry(i, item)),
                };
                if kind != RecordKind::Entry {
                    return Err(not_an_entry(i, Value::Record(kind, first)));
                }
                for index in first..first + n {
                    if used.take(index) {
                        span = Some(span.map_or((index, index), |(lo, hi)| (lo.min(index), hi.max(index))));
                        if entries_store.is_stored(index) {
                            entries.push(index);
                        }
                    } else {
                        repeated_entries += 1;
                    }
                    i += 1;
                }
                Ok(())
            })
            .map_err(structure)?;
        Ok((entries, span))
    };
    if let Some(h) = list_of(&store, traces_value, "device_traces")? {
        let mut lists = Vec::new();
        let mut device = 0usize;
        store
            .for_each_item(h, |item| {
                lists.push((device, item));
                device += 1;
                Ok(())
            })
            .map_err(structure)?;
        for (device, list) in lists {
            let list = list_of(&store, list, &format!("device_traces[{device}]"))?;
            let (entries, span) = entry_indices(list, &|i| format!("device_traces[{device}][{i}]"))?;
            let Some((first, last)) = span else { continue };
            let device = i16::try_from(device).ok().filter(|&d| d <= MAX_DEVICE_INDEX).ok_or_else(|| {
                structure(format!(
                    "device_traces[{device}] holds a trace, but PyTorch numbers devices 0 to {MAX_DEVICE_INDEX} \
                     (c10::DeviceIndex is 8 bits)"
                ))
            })?;
            spans.push((device, first, last));
            per_device.push((device, entries));
        }
    }
    if let Some(h) = list_of(&store, host_traces_value, "host_traces")? {
        let (entries, span) = entry_indices(Some(h), &|i| format!("host_traces[{i}]"))?;
        if let Some((first, last)) = span {
            spans.push((-1, first, last));
        }
        per_device.push((-1, entries));
    }
    if repeated_entries > 0 {
        warnings.push(format!(
            "{repeated_entries} trace entries are listed again (by another device's trace, or twice in one); \
             each is counted once"
        ));
    }
    if let Some(segment) = segments.iter().find(|s| s.device.0 > MAX_DEVICE_INDEX || s.device.0 < 0) {
        return Err(structure(format!(
            "a segment's 'device' is {}, but PyTorch numbers devices 0 to {MAX_DEVICE_INDEX}",
            segment.device
        )));
    }

    let external = external_records(&store, annotations_value, &sink.externals).unwrap_or_else(|m| {
        warnings.push(format!("the snapshot's external_annotations were left out: {m}"));
        Vec::new()
    });
    let interner = store.interner;
    let mut entries = std::mem::take(&mut sink.entries);
    let range = match entries.take_folded() {
        Some(folded) => {
            folded.classifier.check()?;
            Some(RangeBuild { folded, spans })
        }
        None => None,
    };
    let fx_traces = std::mem::take(&mut sink.fx_traces);
    Ok(Parsed {
        interner,
        segments,
        entries,
        per_device,
        external,
        settings,
        extra,
        warnings,
        fx_traces,
        pieces_taken,
        range,
    })
}

#[cfg(test)]
mod tests;
