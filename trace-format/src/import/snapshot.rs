//! Importer of PyTorch memory snapshots (`torch.cuda.memory._dump_snapshot`).
//!
//! A snapshot is a pickled dict: `segments` (the allocator's state when the snapshot was taken),
//! `device_traces` (one list of trace entries per device: the allocator's history, often a ring
//! buffer that dropped the start of the run), `allocator_settings` and `external_annotations`.
//! Older snapshots are a bare list of segments whose blocks carry a `history` instead of `frames`.
//!
//! The pickle is run by the `pickle` module with a sink that turns frame dicts, trace entries,
//! blocks and segments into compact records the moment each is appended to its list, interning
//! frames and stacks as it goes.

use std::collections::HashMap;

use rustc_hash::FxHashMap;

use super::pickle::{self, ContainerKind, RecordKind, Sink, Store, Value};
use crate::error::{Error, Result};
use crate::model::annotation::{Annotation, AnnotationKind};
use crate::model::event::{Event, EventKind, event_flags};
use crate::model::ids::{ContextId, FrameId, ProcessId, StackId, StringId};
use crate::model::interner::{Context, Frame, Interner};
use crate::model::metadata::{Clock, DeviceInfo, Metadata, ProcessInfo, SourceFormat};
use crate::model::oom::Oom;
use crate::model::segment::{Block, BlockState, Segment, SegmentPool};
use crate::model::trace::Trace;
use crate::progress::Progress;

use super::Imported;

/// The smallest block the CUDA caching allocator hands out; sizes round up to a multiple of it.
const MIN_BLOCK_BYTES: u64 = 512;
/// Bound on nodes converted to JSON from generic parts of the pickle (settings, unknown keys).
const MAX_JSON_NODES: usize = 1_000_000;
/// Bound on the nesting of generic parts of the pickle.
const MAX_JSON_DEPTH: usize = 64;

/// A trace entry's action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    Event(EventKind),
    Snapshot,
    Oom,
    Annotate,
    Unknown(StringId),
}

/// A trace entry as recorded, before sizes are settled and times converted.
#[derive(Clone, Copy, Debug)]
struct Entry {
    action: Action,
    addr: u64,
    size: u64,
    stream: u64,
    time_us: Option<i64>,
    stack: StackId,
    context: ContextId,
    device_free: Option<u64>,
    name: StringId,
}

/// The keys the sink reads, as a small number to `match` on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    Other,
    Action,
    Addr,
    Size,
    Stream,
    TimeUs,
    Frames,
    CompileContext,
    UserMetadata,
    DeviceFree,
    Name,
    Filename,
    Line,
    TotalSize,
    State,
    History,
}

/// Keys are interned first, so their ids are small: a table indexed by id names the field.
const FIELD_TABLE_LEN: usize = 64;

/// Interned key and value strings the sink compares against.
struct Keys {
    /// Field of each string id below [`FIELD_TABLE_LEN`].
    fields: [Field; FIELD_TABLE_LEN],
    /// Action of each string id below [`FIELD_TABLE_LEN`].
    action_of: [Option<Action>; FIELD_TABLE_LEN],
    action: StringId,
    addr: StringId,
    address: StringId,
    size: StringId,
    stream: StringId,
    time_us: StringId,
    frames: StringId,
    compile_context: StringId,
    user_metadata: StringId,
    device_free: StringId,
    name: StringId,
    filename: StringId,
    line: StringId,
    device: StringId,
    total_size: StringId,
    requested_size: StringId,
    state: StringId,
    blocks: StringId,
    segment_type: StringId,
    segment_pool_id: StringId,
    is_expandable: StringId,
    history: StringId,
    real_size: StringId,
    actions: [(StringId, Action); 10],
    active_allocated: StringId,
    active_pending_free: StringId,
    inactive: StringId,
    small: StringId,
    large: StringId,
}

impl Keys {
    fn new(i: &mut Interner) -> Self {
        let mut keys = Self::intern(i);
        let named = [
            (keys.action, Field::Action),
            (keys.addr, Field::Addr),
            (keys.size, Field::Size),
            (keys.stream, Field::Stream),
            (keys.time_us, Field::TimeUs),
            (keys.frames, Field::Frames),
            (keys.compile_context, Field::CompileContext),
            (keys.user_metadata, Field::UserMetadata),
            (keys.device_free, Field::DeviceFree),
            (keys.name, Field::Name),
            (keys.filename, Field::Filename),
            (keys.line, Field::Line),
            (keys.total_size, Field::TotalSize),
            (keys.state, Field::State),
            (keys.history, Field::History),
        ];
        for (id, field) in named {
            if let Some(slot) = keys.fields.get_mut(id.index()) {
                *slot = field;
            }
        }
        for (id, action) in keys.actions {
            if let Some(slot) = keys.action_of.get_mut(id.index()) {
                *slot = Some(action);
            }
        }
        keys
    }

    #[inline]
    fn field(&self, key: Value) -> Field {
        match key {
            Value::Str(id) => self.fields.get(id.index()).copied().unwrap_or(Field::Other),
            _ => Field::Other,
        }
    }

    fn action(&self, id: StringId) -> Action {
        self.action_of.get(id.index()).copied().flatten().unwrap_or(Action::Unknown(id))
    }

    fn intern(i: &mut Interner) -> Self {
        Self {
            fields: [Field::Other; FIELD_TABLE_LEN],
            action_of: [None; FIELD_TABLE_LEN],
            action: i.string("action"),
            addr: i.string("addr"),
            address: i.string("address"),
            size: i.string("size"),
            stream: i.string("stream"),
            time_us: i.string("time_us"),
            frames: i.string("frames"),
            compile_context: i.string("compile_context"),
            user_metadata: i.string("user_metadata"),
            device_free: i.string("device_free"),
            name: i.string("name"),
            filename: i.string("filename"),
            line: i.string("line"),
            device: i.string("device"),
            total_size: i.string("total_size"),
            requested_size: i.string("requested_size"),
            state: i.string("state"),
            blocks: i.string("blocks"),
            segment_type: i.string("segment_type"),
            segment_pool_id: i.string("segment_pool_id"),
            is_expandable: i.string("is_expandable"),
            history: i.string("history"),
            real_size: i.string("real_size"),
            actions: [
                (i.string("alloc"), Action::Event(EventKind::Alloc)),
                (i.string("free_requested"), Action::Event(EventKind::FreeRequested)),
                (i.string("free_completed"), Action::Event(EventKind::FreeCompleted)),
                (i.string("segment_alloc"), Action::Event(EventKind::SegmentAlloc)),
                (i.string("segment_free"), Action::Event(EventKind::SegmentFree)),
                (i.string("segment_map"), Action::Event(EventKind::SegmentMap)),
                (i.string("segment_unmap"), Action::Event(EventKind::SegmentUnmap)),
                (i.string("snapshot"), Action::Snapshot),
                (i.string("oom"), Action::Oom),
                (i.string("annotate"), Action::Annotate),
            ],
            active_allocated: i.string("active_allocated"),
            active_pending_free: i.string("active_pending_free"),
            inactive: i.string("inactive"),
            small: i.string("small"),
            large: i.string("large"),
        }
    }
}

/// Converts snapshot dicts into records as the pickle streams by.
struct SnapshotSink {
    keys: Keys,
    entries: Vec<Entry>,
    blocks: Vec<Block>,
    segments: Vec<Segment>,
    /// Reused buffer for the frames of the stack being resolved.
    frames: Vec<FrameId>,
    /// The last context interned, and its id.
    last_context: (Context, ContextId),
}

fn int_field(name: &str, value: Value) -> Result<u64, String> {
    value.as_u64().ok_or_else(|| format!("'{name}' should be a non-negative integer, found {value:?}"))
}

impl SnapshotSink {
    fn new(interner: &mut Interner) -> Self {
        Self {
            keys: Keys::new(interner),
            entries: Vec::new(),
            blocks: Vec::new(),
            segments: Vec::new(),
            frames: Vec::new(),
            last_context: (Context::default(), ContextId(0)),
        }
    }

    fn frame(&self, store: &mut Store, pairs: &[Value]) -> Result<Value, String> {
        let (mut name, mut file, mut line) = (StringId(0), StringId(0), 0u32);
        for pair in pairs.chunks_exact(2) {
            match (self.keys.field(pair[0]), pair[1]) {
                (Field::Name, Value::Str(s)) => name = s,
                (Field::Filename, Value::Str(s)) => file = s,
                (Field::Line, value) => line = value.as_i64().and_then(|l| u32::try_from(l).ok()).unwrap_or(0),
                _ => {}
            }
        }
        let id = store.interner.frame(Frame { function: name, file, line });
        Ok(Value::Frame(id))
    }

    fn stack(&mut self, store: &mut Store, value: Value) -> Result<StackId, String> {
        let handle = match value {
            Value::Stack(id) => return Ok(id),
            Value::None | Value::Missing => return Ok(StackId(0)),
            Value::Container(handle) => handle,
            other => return Err(format!("'frames' should be a list of frames, found {other:?}")),
        };
        if let Some(resolved) = store.resolved(handle)? {
            return match resolved {
                Value::Stack(id) => Ok(id),
                _ => Err("'frames' should be a list of frames".to_owned()),
            };
        }
        if !matches!(store.kind(handle)?, ContainerKind::List | ContainerKind::Tuple) {
            return Err("'frames' should be a list of frames".to_owned());
        }
        let mut frames = std::mem::take(&mut self.frames);
        frames.clear();
        let mut dicts = Vec::new();
        store.for_each_item(handle, |item| {
            match item {
                Value::Frame(id) => frames.push(id),
                Value::Container(h) => {
                    // Resolved below, outside the borrow of the store.
                    dicts.push((frames.len(), h));
                    frames.push(FrameId(0));
                }
                other => return Err(format!("a frame should be a dict, found {other:?}")),
            }
            Ok(())
        })?;
        for (index, h) in dicts {
            let id = match store.resolved(h)? {
                Some(Value::Frame(id)) => id,
                Some(_) => return Err("a frame should be a dict of name, filename and line".to_owned()),
                None if store.kind(h)? == ContainerKind::Dict => {
                    let pairs = store.items(h)?;
                    let Value::Frame(id) = self.frame(store, &pairs)? else {
                        return Err("a frame is not a dict of name, filename and line".to_owned());
                    };
                    store.resolve(h, Value::Frame(id))?;
                    id
                }
                None => return Err("a frame should be a dict of name, filename and line".to_owned()),
            };
            frames[index] = id;
        }
        let id = store.interner.stack(&frames);
        self.frames = frames;
        store.resolve(handle, Value::Stack(id))?;
        Ok(id)
    }

    fn entry(&mut self, store: &mut Store, pairs: &[Value]) -> Result<Value, String> {
        let mut entry = Entry {
            action: Action::Unknown(StringId(0)),
            addr: 0,
            size: 0,
            stream: 0,
            time_us: None,
            stack: StackId(0),
            context: ContextId(0),
            device_free: None,
            name: StringId(0),
        };
        let mut frames = Value::None;
        let mut context = Context::default();
        let fail = |message: String| format!("trace entry {}: {message}", self.entries.len());
        for pair in pairs.chunks_exact(2) {
            let value = pair[1];
            match self.keys.field(pair[0]) {
                Field::Action => {
                    let Value::Str(action) = value else {
                        return Err(fail("'action' is not a string".to_owned()));
                    };
                    entry.action = self.keys.action(action);
                }
                Field::Addr => entry.addr = int_field("addr", value).map_err(fail)?,
                Field::Size => entry.size = int_field("size", value).map_err(fail)?,
                // Streams are raw handles; a negative value is kept by its bit pattern.
                Field::Stream => {
                    entry.stream = value.as_u64().or_else(|| value.as_i64().map(|v| v as u64)).unwrap_or(0)
                }
                Field::TimeUs => entry.time_us = value.as_i64(),
                Field::Frames => frames = value,
                Field::CompileContext => {
                    if let Value::Str(s) = value {
                        context.compile_context = s;
                    }
                }
                Field::UserMetadata => {
                    if let Value::Str(s) = value {
                        context.user_metadata = s;
                    }
                }
                Field::DeviceFree => entry.device_free = value.as_u64(),
                Field::Name => {
                    if let Value::Str(s) = value {
                        entry.name = s;
                    }
                }
                _ => {}
            }
        }
        entry.stack = self.stack(store, frames).map_err(|m| format!("trace entry {}: {m}", self.entries.len()))?;
        // Consecutive entries nearly always share their context.
        entry.context = match self.last_context {
            (last, id) if last == context => id,
            _ => {
                let id = store.interner.context(context);
                self.last_context = (context, id);
                id
            }
        };
        let index = self.entries.len() as u32;
        self.entries.push(entry);
        Ok(Value::Record(RecordKind::Entry, index))
    }

    fn block(&mut self, store: &mut Store, pairs: &[Value]) -> Result<Value, String> {
        let k = &self.keys;
        let mut block =
            Block { address: 0, size_bytes: 0, requested_bytes: 0, state: BlockState::Inactive, stack: StackId(0) };
        let mut requested = None;
        let mut frames = Value::None;
        let mut history = Value::None;
        for_pairs(pairs, |key, value| {
            let Value::Str(key) = key else { return Ok(()) };
            if key == k.address || key == k.addr {
                block.address = int_field("address", value)?;
            } else if key == k.size {
                block.size_bytes = int_field("size", value)?;
            } else if key == k.requested_size {
                requested = Some(int_field("requested_size", value)?);
            } else if key == k.state {
                let Value::Str(state) = value else { return Err("a block's 'state' is not a string".to_owned()) };
                block.state = if state == k.active_allocated {
                    BlockState::ActiveAllocated
                } else if state == k.active_pending_free {
                    BlockState::ActivePendingFree
                } else if state == k.inactive {
                    BlockState::Inactive
                } else {
                    return Err(format!("unknown block state {:?}", store.interner.resolve(state)));
                };
            } else if key == k.frames {
                frames = value;
            } else if key == k.history {
                history = value;
            }
            Ok(())
        })?;
        // Older snapshots keep each block's allocations in `history`, the current one last.
        if let Value::Container(h) = history
            && let Some(Value::Container(last)) = store.items(h)?.last().copied()
            && store.kind(last)? == ContainerKind::Dict
        {
            let mut real_size = None;
            let mut last_frames = Value::None;
            store.for_each_pair(last, |key, value| {
                if key == Value::Str(k.real_size) {
                    real_size = value.as_u64();
                } else if key == Value::Str(k.frames) {
                    last_frames = value;
                }
                Ok(())
            })?;
            if frames == Value::None {
                frames = last_frames;
            }
            if requested.is_none() && block.state != BlockState::Inactive {
                requested = real_size;
            }
        }
        block.requested_bytes =
            requested.unwrap_or(if block.state == BlockState::Inactive { 0 } else { block.size_bytes });
        block.stack = self.stack(store, frames)?;
        let index = self.blocks.len() as u32;
        self.blocks.push(block);
        Ok(Value::Record(RecordKind::Block, index))
    }

    fn segment(&mut self, store: &mut Store, pairs: &[Value]) -> Result<Value, String> {
        let k = &self.keys;
        let mut segment = Segment {
            device: 0,
            process: ProcessId(0),
            address: 0,
            size_bytes: 0,
            stream: 0,
            pool: SegmentPool::Unknown,
            pool_id: (0, 0),
            is_expandable: false,
            stack: StackId(0),
            blocks: Vec::new(),
        };
        let mut frames = Value::None;
        let mut blocks = Value::None;
        let mut pool_id = Value::None;
        for_pairs(pairs, |key, value| {
            let Value::Str(key) = key else { return Ok(()) };
            if key == k.device {
                segment.device = value
                    .as_i64()
                    .and_then(|d| i16::try_from(d).ok())
                    .ok_or("a segment's 'device' is not a device index")?;
            } else if key == k.address {
                segment.address = int_field("address", value)?;
            } else if key == k.total_size {
                segment.size_bytes = int_field("total_size", value)?;
            } else if key == k.stream {
                segment.stream = value.as_u64().or_else(|| value.as_i64().map(|v| v as u64)).unwrap_or(0);
            } else if key == k.segment_type {
                segment.pool = match value {
                    Value::Str(s) if s == k.small => SegmentPool::Small,
                    Value::Str(s) if s == k.large => SegmentPool::Large,
                    _ => SegmentPool::Unknown,
                };
            } else if key == k.segment_pool_id {
                pool_id = value;
            } else if key == k.is_expandable {
                segment.is_expandable = matches!(value, Value::Bool(true));
            } else if key == k.frames {
                frames = value;
            } else if key == k.blocks {
                blocks = value;
            }
            Ok(())
        })?;
        if let Value::Container(h) = pool_id {
            let ids = store.items(h)?;
            if let [a, b] = ids[..] {
                segment.pool_id = (a.as_u64().unwrap_or(0), b.as_u64().unwrap_or(0));
            }
        }
        segment.stack = self.stack(store, frames)?;
        if let Value::Container(h) = blocks {
            for item in store.items(h)? {
                let record = match item {
                    Value::Container(b) if store.kind(b)? == ContainerKind::Dict => {
                        let block_pairs = store.items(b)?;
                        self.block(store, &block_pairs)?
                    }
                    other => other,
                };
                let Value::Record(RecordKind::Block, index) = record else {
                    return Err(format!("segment {}: a block is not a dict", self.segments.len()));
                };
                let block = self.blocks.get(index as usize).copied().ok_or("internal: block index")?;
                segment.blocks.push(block);
            }
        }
        segment.blocks.sort_by_key(|b| b.address);
        let index = self.segments.len() as u32;
        self.segments.push(segment);
        Ok(Value::Record(RecordKind::Segment, index))
    }
}

impl Sink for SnapshotSink {
    fn convert_dict(&mut self, store: &mut Store, pairs: &[Value]) -> Result<Option<Value>, String> {
        let (mut action, mut total_size, mut state, mut name, mut filename) = (false, false, false, false, false);
        for key in pairs.iter().step_by(2) {
            match self.keys.field(*key) {
                Field::Action => action = true,
                Field::TotalSize => total_size = true,
                Field::State | Field::History => state = true,
                Field::Name => name = true,
                Field::Filename => filename = true,
                _ => {}
            }
        }
        Ok(Some(if action {
            self.entry(store, pairs)?
        } else if total_size {
            self.segment(store, pairs)?
        } else if state {
            self.block(store, pairs)?
        } else if name && filename {
            self.frame(store, pairs)?
        } else {
            return Ok(None);
        }))
    }
}

/// Calls `f` with each key and value of a dict's alternating items.
fn for_pairs(pairs: &[Value], mut f: impl FnMut(Value, Value) -> Result<(), String>) -> Result<(), String> {
    for pair in pairs.chunks_exact(2) {
        f(pair[0], pair[1])?;
    }
    Ok(())
}

/// Converts a generic part of the pickle to JSON, bounded in depth and size.
fn to_json(store: &Store, value: Value, depth: usize, budget: &mut usize) -> Result<serde_json::Value, String> {
    use serde_json::Value as J;
    if *budget == 0 {
        return Err("too many values in a generic part of the snapshot".to_owned());
    }
    *budget -= 1;
    if depth > MAX_JSON_DEPTH {
        return Err(format!("values nested deeper than {MAX_JSON_DEPTH} levels"));
    }
    Ok(match value {
        Value::None | Value::Missing => J::Null,
        Value::Bool(b) => J::Bool(b),
        Value::Int(v) => J::from(v),
        Value::UInt(v) => J::from(v),
        Value::BigInt => J::String("<integer wider than 64 bits>".to_owned()),
        Value::Float(v) => serde_json::Number::from_f64(v).map_or(J::Null, J::Number),
        Value::Str(id) => J::String(store.interner.resolve(id).to_owned()),
        Value::Bytes(n) => J::String(format!("<{n} bytes>")),
        Value::Frame(_) | Value::Stack(_) | Value::Record(..) => J::String("<converted>".to_owned()),
        Value::Container(h) => match store.kind(h)? {
            ContainerKind::Dict => {
                let mut map = serde_json::Map::new();
                let mut failure = None;
                store.for_each_pair(h, |key, value| {
                    let key = match key {
                        Value::Str(id) => store.interner.resolve(id).to_owned(),
                        other => match to_json(store, other, depth + 1, budget)? {
                            J::String(s) => s,
                            j => j.to_string(),
                        },
                    };
                    match to_json(store, value, depth + 1, budget) {
                        Ok(v) => {
                            map.insert(key, v);
                        }
                        Err(e) => failure = Some(e),
                    }
                    Ok(())
                })?;
                if let Some(e) = failure {
                    return Err(e);
                }
                J::Object(map)
            }
            _ => {
                let mut list = Vec::new();
                for item in store.items(h)? {
                    list.push(to_json(store, item, depth + 1, budget)?);
                }
                J::Array(list)
            }
        },
    })
}

fn structure(message: impl Into<String>) -> Error {
    Error::Structure(message.into())
}

/// Reads a snapshot pickle.
pub fn import_snapshot(data: &[u8], progress: &dyn Progress) -> Result<Imported> {
    let mut interner = Interner::new();
    let mut sink = SnapshotSink::new(&mut interner);
    // A trace entry takes at least ~60 bytes of pickle; see `pickle::load` on reserving.
    sink.entries.reserve(data.len() / 64);
    let loaded = pickle::load(data, interner, &mut sink, progress)?;
    let store = loaded.store;
    let mut warnings = Vec::new();

    let mut segments_value = Value::None;
    let mut traces_value = Value::None;
    let mut settings = serde_json::Value::Null;
    let mut annotations_value = Value::None;
    let mut extra = serde_json::Map::new();
    let mut budget = MAX_JSON_NODES;
    match loaded.root {
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
                    Some("allocator_settings") => {
                        settings = to_json(&store, value, 0, &mut budget)
                            .map_err(|m| structure(format!("allocator_settings: {m}")))?;
                    }
                    Some("external_annotations") => annotations_value = value,
                    Some(other) => {
                        let other = other.to_owned();
                        let json =
                            to_json(&store, value, 0, &mut budget).map_err(|m| structure(format!("{other}: {m}")))?;
                        extra.insert(other, json);
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
        Value::Container(h) if store.kind(h).map_err(structure)? == ContainerKind::List => segments_value = loaded.root,
        _ => return Err(structure("this pickle holds neither a dict nor a list: not a PyTorch memory snapshot")),
    }

    let mut segments = Vec::new();
    if let Value::Container(h) = segments_value {
        for (i, item) in store.items(h).map_err(structure)?.into_iter().enumerate() {
            let Value::Record(RecordKind::Segment, index) = item else {
                return Err(structure(format!("segments[{i}] is not a segment dict")));
            };
            if let Some(segment) = sink.segments.get(index as usize) {
                segments.push(segment.clone());
            }
        }
    }
    segments.sort_by_key(|s| (s.device, s.address));

    // Per device, indices into the sink's entries (copying the entries would double the memory).
    let mut per_device: Vec<Vec<u32>> = Vec::new();
    if let Value::Container(h) = traces_value {
        for (device, list) in store.items(h).map_err(structure)?.into_iter().enumerate() {
            let mut entries = Vec::new();
            if let Value::Container(l) = list {
                for (i, item) in store.items(l).map_err(structure)?.into_iter().enumerate() {
                    let Value::Record(RecordKind::Entry, index) = item else {
                        return Err(structure(format!("device_traces[{device}][{i}] is not a trace entry dict")));
                    };
                    if (index as usize) < sink.entries.len() {
                        entries.push(index);
                    }
                }
            }
            per_device.push(entries);
        }
    }

    let external = match annotations_value {
        Value::None => serde_json::Value::Null,
        v => to_json(&store, v, 0, &mut budget).map_err(|m| structure(format!("external_annotations: {m}")))?,
    };
    let interner = store.interner;
    build_trace(interner, segments, &sink.entries, per_device, &external, settings, extra, &mut warnings)
        .map(|trace| Imported { trace, warnings, format: SourceFormat::PytorchSnapshot })
}

/// Rounds a requested size the way the CUDA caching allocator rounds block sizes by default.
fn estimated_block_size(requested: u64) -> u64 {
    requested.max(1).div_ceil(MIN_BLOCK_BYTES).saturating_mul(MIN_BLOCK_BYTES)
}

/// Trace entries record the requested size only. A block still alive at the end of the trace is
/// in the final segment state with its real size; every other size is estimated with the
/// allocator's default rounding and flagged as such. Frees take the size of their alloc.
fn settle_sizes(events: &mut [Event], final_blocks: &FxHashMap<u64, Block>) {
    const NONE: u32 = u32::MAX;
    let mut live: FxHashMap<u64, u32> = FxHashMap::default();
    let mut paired = vec![NONE; events.len()];
    for (i, event) in events.iter().enumerate() {
        match event.kind {
            EventKind::Alloc => {
                live.insert(event.address, i as u32);
            }
            EventKind::FreeRequested => {
                if let Some(&alloc) = live.get(&event.address) {
                    paired[i] = alloc;
                }
            }
            EventKind::FreeCompleted => {
                if let Some(alloc) = live.remove(&event.address) {
                    paired[i] = alloc;
                }
            }
            _ => {}
        }
    }
    let mut exact = vec![false; events.len()];
    for (address, &i) in &live {
        if let (Some(block), Some(event)) = (final_blocks.get(address), events.get_mut(i as usize)) {
            event.size_bytes = block.size_bytes;
            exact[i as usize] = true;
        }
    }
    for i in 0..events.len() {
        let event = events[i];
        let is_free = matches!(event.kind, EventKind::FreeRequested | EventKind::FreeCompleted);
        if event.kind == EventKind::Alloc && !exact[i] {
            events[i].size_bytes = estimated_block_size(event.requested_bytes);
            events[i].flags |= event_flags::SIZE_ESTIMATED;
        } else if is_free {
            match events.get(paired[i] as usize).copied() {
                Some(alloc) if paired[i] != NONE => {
                    events[i].size_bytes = alloc.size_bytes;
                    events[i].flags |= alloc.flags & event_flags::SIZE_ESTIMATED;
                }
                _ => {
                    events[i].size_bytes = estimated_block_size(event.requested_bytes);
                    events[i].flags |= event_flags::SIZE_ESTIMATED;
                }
            }
        }
    }
}

/// Pairs `external_annotations` START and END records into spans (unmatched ends start at the
/// trace's start, unmatched starts end at its end).
fn external_spans(
    external: &serde_json::Value,
    interner: &mut Interner,
    trace_start_ns: i64,
    trace_end_ns: i64,
    warnings: &mut Vec<String>,
) -> Vec<Annotation> {
    let mut spans = Vec::new();
    let Some(records) = external.as_array() else { return spans };
    let mut open: HashMap<(String, i64), Vec<i64>> = HashMap::new();
    let mut skipped = 0usize;
    for record in records {
        let stage = record.get("stage").and_then(|v| v.as_str());
        let name = record.get("name").and_then(|v| v.as_str());
        let time_us = record.get("time_us").and_then(|v| v.as_i64());
        let device = record.get("device").and_then(|v| v.as_i64()).unwrap_or(0);
        let (Some(stage), Some(name), Some(time_us)) = (stage, name, time_us) else {
            skipped += 1;
            continue;
        };
        let time_ns = time_us.saturating_mul(1000);
        let key = (name.to_owned(), device);
        let mut push = |start_ns: i64, end_ns: i64, interner: &mut Interner| {
            spans.push(Annotation {
                kind: AnnotationKind::UserRange,
                device: i16::try_from(device).unwrap_or(Annotation::ALL_DEVICES),
                process: ProcessId(0),
                start_ns,
                end_ns: end_ns.max(start_ns),
                name: interner.string(name),
                stack: StackId(0),
            });
        };
        match stage {
            "START" => open.entry(key).or_default().push(time_ns),
            "END" => match open.get_mut(&key).and_then(Vec::pop) {
                Some(start_ns) => push(start_ns, time_ns, interner),
                None => push(trace_start_ns.min(time_ns), time_ns, interner),
            },
            _ => skipped += 1,
        }
    }
    let mut unclosed: Vec<_> = open
        .into_iter()
        .flat_map(|((name, device), starts)| starts.into_iter().map(move |s| (s, name.clone(), device)))
        .collect();
    unclosed.sort();
    for (start_ns, name, device) in unclosed {
        spans.push(Annotation {
            kind: AnnotationKind::UserRange,
            device: i16::try_from(device).unwrap_or(Annotation::ALL_DEVICES),
            process: ProcessId(0),
            start_ns,
            end_ns: trace_end_ns.max(start_ns),
            name: interner.string(&name),
            stack: StackId(0),
        });
    }
    if skipped > 0 {
        warnings.push(format!("{skipped} external annotation records without stage, name or time were skipped"));
    }
    spans
}

#[allow(clippy::too_many_arguments)]
fn build_trace(
    mut interner: Interner,
    segments: Vec<Segment>,
    all_entries: &[Entry],
    per_device: Vec<Vec<u32>>,
    external: &serde_json::Value,
    allocator_settings: serde_json::Value,
    extra: serde_json::Map<String, serde_json::Value>,
    warnings: &mut Vec<String>,
) -> Result<Trace> {
    let entry_at = |index: u32| all_entries.get(index as usize);
    let has_time = per_device.iter().flatten().filter_map(|&i| entry_at(i)).any(|e| e.time_us.is_some());
    let mut events = Vec::with_capacity(per_device.iter().map(Vec::len).sum());
    let mut ooms = Vec::new();
    let mut annotations = Vec::new();
    let mut unknown_actions: HashMap<String, usize> = HashMap::new();
    let snapshot_name = interner.string("snapshot");
    let mut devices: Vec<i16> = segments.iter().map(|s| s.device).collect();
    for (index, entries) in per_device.iter().enumerate() {
        let device = i16::try_from(index).map_err(|_| structure("more than 32767 device traces"))?;
        if !entries.is_empty() {
            devices.push(device);
        }
        let final_blocks: FxHashMap<u64, Block> = segments
            .iter()
            .filter(|s| s.device == device)
            .flat_map(|s| s.blocks.iter())
            .filter(|b| b.state != BlockState::Inactive)
            .map(|b| (b.address, *b))
            .collect();
        let mut device_events = Vec::with_capacity(entries.len());
        let mut last_time_ns = 0i64;
        for (i, entry) in entries.iter().filter_map(|&i| entry_at(i)).enumerate() {
            let time_ns = match entry.time_us {
                Some(us) => us.saturating_mul(1000),
                None if has_time => last_time_ns,
                None => i as i64,
            };
            last_time_ns = time_ns;
            match entry.action {
                Action::Event(kind) => device_events.push(Event {
                    time_ns,
                    address: entry.addr,
                    size_bytes: entry.size,
                    requested_bytes: entry.size,
                    stream: entry.stream,
                    stack: entry.stack,
                    context: entry.context,
                    process: ProcessId(0),
                    device,
                    kind,
                    flags: 0,
                }),
                Action::Oom => ooms.push(Oom {
                    time_ns,
                    device,
                    process: ProcessId(0),
                    stream: entry.stream,
                    requested_bytes: entry.size,
                    device_free_bytes: entry.device_free,
                    stack: entry.stack,
                }),
                Action::Snapshot | Action::Annotate => {
                    let context = interner.context_of(entry.context);
                    let name = if entry.action == Action::Snapshot {
                        snapshot_name
                    } else if entry.name != StringId(0) {
                        entry.name
                    } else {
                        context.user_metadata
                    };
                    annotations.push(Annotation {
                        kind: if entry.action == Action::Snapshot {
                            AnnotationKind::Snapshot
                        } else {
                            AnnotationKind::Marker
                        },
                        device,
                        process: ProcessId(0),
                        start_ns: time_ns,
                        end_ns: time_ns,
                        name,
                        stack: entry.stack,
                    });
                }
                Action::Unknown(name) => {
                    *unknown_actions.entry(interner.resolve(name).to_owned()).or_default() += 1;
                }
            }
        }
        settle_sizes(&mut device_events, &final_blocks);
        if events.is_empty() {
            events = device_events;
        } else {
            events.extend(device_events);
        }
    }
    let mut unknown: Vec<_> = unknown_actions.into_iter().collect();
    unknown.sort();
    for (action, count) in unknown {
        warnings.push(format!("{count} trace entries with the unknown action {action:?} were skipped"));
    }
    events.sort_by_key(|e| e.time_ns);
    let start_ns = events.first().map_or(0, |e| e.time_ns);
    let end_ns = events.last().map_or(0, |e| e.time_ns);
    annotations.extend(external_spans(external, &mut interner, start_ns, end_ns, warnings));
    annotations.sort_by_key(|a| (a.start_ns, a.end_ns));
    if devices.is_empty() {
        devices.push(0);
    }
    devices.sort_unstable();
    devices.dedup();
    let metadata = Metadata {
        source_format: SourceFormat::PytorchSnapshot,
        clock: if has_time { Clock::UnixNs } else { Clock::EventIndex },
        tool_version: String::new(),
        devices: devices.into_iter().map(|device| DeviceInfo { device, ..DeviceInfo::default() }).collect(),
        processes: vec![ProcessInfo::default()],
        allocator_settings,
        extra,
    };
    Ok(Trace { metadata, interner, events, segments, annotations, ooms, counters: Vec::new(), tags: Vec::new() })
}
