//! The sink that turns snapshot dicts into records as the pickle streams by: frames, trace
//! entries, blocks, segments and `external_annotations` records.

use super::External;
use super::entries::{Action, Entries, Entry};
use super::keys::{Field, Keys, int_field};
use crate::import::pickle::{
    ContainerKind, FIELDS, FieldKind, Fields, Handle, PieceSink, RecordKind, Remap, Sink, Store, Value,
};
use crate::model::ids::{ContextId, DeviceId, FrameId, ProcessId, StackId, StringId};
use crate::model::interner::{Context, Frame, Interner};
use crate::model::segment::{Block, BlockState, Segment, SegmentPool};

/// Converts snapshot dicts into records as the pickle streams by.
pub(super) struct SnapshotSink {
    keys: Keys,
    pub(super) entries: Entries,
    /// Blocks, and whether each said its address (blocks of PyTorch 2.0 and older do not).
    blocks: Vec<(Block, bool)>,
    pub(super) segments: Vec<Option<Segment>>,
    /// Reused buffer for the frames of the stack being resolved.
    frames: Vec<FrameId>,
    /// The last context interned, and its id.
    last_context: (Context, ContextId),
    /// Block lists already given to a segment, and how many segments named one of them again.
    block_lists: rustc_hash::FxHashSet<Handle>,
    pub(super) shared_block_lists: usize,
    /// Frames of code that `torch.compile` generated, augmented with the FX node they run
    /// (`_snapshot(augment_with_fx_traces=True)`), and the node's original source trace.
    pub(super) fx_traces: rustc_hash::FxHashMap<FrameId, StringId>,
    /// `external_annotations` records: a long run has millions, read as the pickle streams by.
    pub(super) externals: Vec<External>,
    /// Whether the machine reads trace entries field by field (its fastest path; false only to
    /// check it against the general one).
    pub(super) entries_by_field: bool,
}

impl SnapshotSink {
    pub(super) fn new(interner: &mut Interner) -> Self {
        Self {
            keys: Keys::new(interner),
            entries: Entries::default(),
            blocks: Vec::new(),
            segments: Vec::new(),
            frames: Vec::new(),
            last_context: (Context::default(), ContextId(0)),
            fx_traces: rustc_hash::FxHashMap::default(),
            block_lists: rustc_hash::FxHashSet::default(),
            shared_block_lists: 0,
            externals: Vec::new(),
            entries_by_field: true,
        }
    }

    /// An `external_annotations` record (`{'stage', 'name', 'device', 'time_us'}`), or `None`
    /// for a dict with any other key, which is kept as plain data.
    fn external(&mut self, pairs: &[Value]) -> Option<Value> {
        let mut record = External { stage: None, name: None, device: None, time_us: None };
        for pair in pairs.chunks_exact(2) {
            let (key, value) = (pair[0], pair[1]);
            let string = match value {
                Value::Str(id) => Some(id),
                _ => None,
            };
            match self.keys.field(key) {
                Field::Stage => record.stage = string,
                Field::Name => record.name = string,
                Field::Device => record.device = value.as_i64(),
                Field::TimeUs => record.time_us = value.as_i64(),
                _ => return None,
            }
        }
        let index = u32::try_from(self.externals.len()).ok()?;
        self.externals.push(record);
        Some(Value::Record(RecordKind::External, index))
    }

    fn frame(&mut self, store: &mut Store, pairs: &[Value]) -> Result<Value, String> {
        let (mut name, mut file, mut line) = (StringId(0), StringId(0), 0u32);
        let (mut op, mut node, mut target, mut original) = (None, None, None, None);
        for pair in pairs.chunks_exact(2) {
            match (self.keys.field(pair[0]), pair[1]) {
                (Field::Name, Value::Str(s)) => name = s,
                (Field::Filename, Value::Str(s)) => file = s,
                (Field::Line, value) => line = value.as_i64().and_then(|l| u32::try_from(l).ok()).unwrap_or(0),
                (Field::FxNodeOp, Value::Str(s)) => op = Some(s),
                (Field::FxNodeName, Value::Str(s)) => node = Some(s),
                (Field::FxNodeTarget, Value::Str(s)) => target = Some(s),
                (Field::FxOriginalTrace, Value::Str(s)) => original = Some(s),
                _ => {}
            }
        }
        if op.is_some() || node.is_some() || target.is_some() {
            // The FX node is part of what the frame is: `forward (FX node add_1: call_function
            // aten.add.Tensor)`, so that sites of different nodes stay apart.
            let text = |id: Option<StringId>| id.map_or("", |id| store.interner.resolve(id)).to_owned();
            let described =
                format!("{} (FX node {}: {} {})", store.interner.resolve(name), text(node), text(op), text(target));
            name = store.interner.string(described.trim_end());
        }
        let id = store.interner.frame(Frame { function: name, file, line });
        if let Some(original) = original.filter(|&s| s != StringId(0)) {
            self.fx_traces.insert(id, original);
        }
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
        if store.len(handle)? == 0 {
            // No frames recorded: the empty stack, which needs no interning.
            return Ok(StackId(0));
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

    /// A trace entry from its dict's keys and values.
    fn entry(&mut self, store: &mut Store, pairs: &[Value]) -> Result<Value, String> {
        let mut fields: Fields = [Value::Missing; FIELDS];
        for pair in pairs.chunks_exact(2) {
            if let Some((field, _)) = entry_field(self.keys.field(pair[0])) {
                fields[usize::from(field)] = pair[1];
            }
        }
        self.entry_from_fields(store, &fields)
    }

    /// A trace entry from its fields (see [`entry_field`]); nothing is kept when it fails.
    fn entry_from_fields(&mut self, store: &mut Store, fields: &Fields) -> Result<Value, String> {
        let read = self.entries.read();
        let fail = |message: String| format!("trace entry {read}: {message}");
        let string = |value: Value| match value {
            Value::Str(s) => s,
            _ => StringId(0),
        };
        let int = |name: &str, value: Value| match value {
            Value::Missing => Ok(0),
            value => int_field(name, value),
        };
        let action = match fields[ACTION] {
            Value::Str(action) => self.keys.action(action),
            Value::Missing => Action::Unknown(StringId(0)),
            _ => return Err(fail("'action' is not a string".to_owned())),
        };
        // Streams are raw handles; a negative value is kept by its bit pattern.
        let stream = fields[STREAM];
        let mut entry = Entry {
            action,
            addr: int("addr", fields[ADDR]).map_err(fail)?,
            size: int("size", fields[SIZE]).map_err(fail)?,
            stream: stream.as_u64().or_else(|| stream.as_i64().map(|v| v as u64)).unwrap_or(0),
            time_us: fields[TIME_US].as_i64(),
            stack: StackId(0),
            context: ContextId(0),
            device_free: fields[DEVICE_FREE].as_u64(),
            name: string(fields[NAME]),
        };
        entry.stack = self.stack(store, fields[FRAMES]).map_err(fail)?;
        let context =
            Context { compile_context: string(fields[COMPILE_CONTEXT]), user_metadata: string(fields[USER_METADATA]) };
        // Consecutive entries nearly always share their context.
        entry.context = match self.last_context {
            (last, id) if last == context => id,
            _ => {
                let id = store.interner.context(context);
                self.last_context = (context, id);
                id
            }
        };
        let index = self.entries.push(entry);
        Ok(Value::Record(RecordKind::Entry, index))
    }

    fn block(&mut self, store: &mut Store, pairs: &[Value]) -> Result<Value, String> {
        let k = &self.keys;
        let mut block =
            Block { address: 0, size_bytes: 0, requested_bytes: 0, state: BlockState::Inactive, stack: StackId(0) };
        let mut requested = None;
        let mut frames = Value::None;
        let mut history = Value::None;
        let mut has_address = false;
        for_pairs(pairs, |key, value| {
            let Value::Str(key) = key else { return Ok(()) };
            if key == k.address || key == k.addr {
                block.address = int_field("address", value)?;
                has_address = true;
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
        // Older snapshots keep each block's allocations in `history`, the current one first (as
        // PyTorch's own `_memory_viz.py` reads it).
        if let Value::Container(h) = history
            && let Some(Value::Container(last)) = store.first_item(h)?
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
        self.blocks.push((block, has_address));
        Ok(Value::Record(RecordKind::Block, index))
    }

    fn segment(&mut self, store: &mut Store, pairs: &[Value]) -> Result<Value, String> {
        let k = &self.keys;
        let mut segment = Segment {
            device: DeviceId(0),
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
                    .map(DeviceId)
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
        // A list of blocks belongs to one segment; one shared by several (a hostile file: two
        // bytes per reference) would be copied into each. The first owner keeps it.
        if let Value::Container(h) = blocks
            && !self.block_lists.insert(h)
        {
            self.shared_block_lists += 1;
        } else if let Value::Container(h) = blocks {
            // Blocks tile their segment in address order: one without an address starts where
            // the blocks before it end (as MemoryViz places them).
            let mut next_address = segment.address;
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
                let (mut block, has_address) =
                    self.blocks.get(index as usize).copied().ok_or("internal: block index")?;
                if !has_address {
                    block.address = next_address;
                }
                next_address = block.address.saturating_add(block.size_bytes);
                segment.blocks.push(block);
            }
        }
        segment.blocks.sort_by_key(|b| b.address);
        let index = self.segments.len() as u32;
        self.segments.push(Some(segment));
        Ok(Value::Record(RecordKind::Segment, index))
    }
}

/// Where each field of a trace entry goes in [`Fields`].
const ACTION: usize = 0;
const ADDR: usize = 1;
const SIZE: usize = 2;
const STREAM: usize = 3;
const TIME_US: usize = 4;
const FRAMES: usize = 5;
const COMPILE_CONTEXT: usize = 6;
const USER_METADATA: usize = 7;
const DEVICE_FREE: usize = 8;
const NAME: usize = 9;

/// The slot of a trace entry's field in [`Fields`] and how the machine reads its value; `None`
/// for a key a trace entry does not have.
fn entry_field(field: Field) -> Option<(u8, FieldKind)> {
    let (slot, kind) = match field {
        Field::Action => (ACTION, FieldKind::Str),
        Field::Addr => (ADDR, FieldKind::Int),
        Field::Size => (SIZE, FieldKind::Int),
        Field::Stream => (STREAM, FieldKind::Int),
        Field::TimeUs => (TIME_US, FieldKind::Int),
        Field::Frames => (FRAMES, FieldKind::Stack),
        Field::CompileContext => (COMPILE_CONTEXT, FieldKind::Str),
        Field::UserMetadata => (USER_METADATA, FieldKind::Str),
        Field::DeviceFree => (DEVICE_FREE, FieldKind::Int),
        Field::Name => (NAME, FieldKind::Str),
        _ => return None,
    };
    Some((slot as u8, kind))
}

impl Sink for SnapshotSink {
    fn field_of(&self, key: StringId) -> Option<(u8, FieldKind)> {
        if !self.entries_by_field {
            return None;
        }
        entry_field(self.keys.field(Value::Str(key)))
    }

    fn record_from_fields(&mut self, store: &mut Store, fields: &Fields) -> Result<Value, String> {
        self.entry_from_fields(store, fields)
    }

    fn convert_dict(&mut self, store: &mut Store, pairs: &[Value]) -> Result<Option<Value>, String> {
        // PyTorch writes `action` first: the common case needs no scan of the keys.
        if let Some(&first) = pairs.first()
            && self.keys.field(first) == Field::Action
        {
            return self.entry(store, pairs).map(Some);
        }
        if let Some(&first) = pairs.first()
            && self.keys.field(first) == Field::Stage
            && let Some(record) = self.external(pairs)
        {
            return Ok(Some(record));
        }
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

impl PieceSink for SnapshotSink {
    fn for_piece(interner: &mut Interner) -> Self {
        Self::new(interner)
    }

    fn convert_earlier(&mut self, store: &mut Store, pairs: &[Value]) -> Option<Value> {
        let (mut name, mut filename) = (false, false);
        for key in pairs.iter().step_by(2) {
            match self.keys.field(*key) {
                Field::Name => name = true,
                Field::Filename => filename = true,
                Field::Action | Field::TotalSize | Field::State | Field::History => return None,
                _ => {}
            }
        }
        if !(name && filename) {
            return None;
        }
        self.frame(store, pairs).ok()
    }

    fn external_count(&self) -> u32 {
        self.externals.len() as u32
    }

    fn only_entries(&self) -> bool {
        self.blocks.is_empty() && self.segments.is_empty() && self.block_lists.is_empty()
    }

    fn entry_count(&self) -> u32 {
        self.entries.len() as u32
    }

    fn take_in(&mut self, piece: Self, remap: &Remap) -> (u32, u32) {
        let string = |id: StringId| remap.strings.get(id.index()).copied().unwrap_or(StringId(0));
        let first = self.entries.append_moved(
            piece.entries,
            |stack| remap.stacks.get(stack.index()).copied().unwrap_or(StackId(0)),
            |context| remap.contexts.get(context.index()).copied().unwrap_or(ContextId(0)),
            string,
        );
        for (frame, trace) in piece.fx_traces {
            if let Some(&frame) = remap.frames.get(frame.index()) {
                self.fx_traces.insert(frame, string(trace));
            }
        }
        let externals_from = self.externals.len() as u32;
        self.externals.extend(piece.externals.into_iter().map(|record| External {
            stage: record.stage.map(string),
            name: record.name.map(string),
            ..record
        }));
        (first, externals_from)
    }
}
