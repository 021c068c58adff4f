//! A streaming reader of plain-data pickles that never executes anything.
//!
//! Python's `pickle` is a small stack machine. This module runs the subset of it that builds plain
//! data (numbers, strings, bytes, lists, tuples, dicts, sets) and refuses every opcode that imports
//! or calls code (`GLOBAL`, `STACK_GLOBAL`, `REDUCE`, `BUILD`, `INST`, `OBJ`, `NEWOBJ*`, `EXT*`,
//! `PERSID`, out-of-band buffers).
//!
//! It is built for big files: instead of a tree of values it keeps containers in one bump-allocated
//! pool, and it lets a [`Sink`] turn finished dicts into compact records as soon as they are
//! appended to a list. Once every item of an `APPENDS` batch has been turned into a record, all
//! that the batch built is dropped from the pool again, so memory stays proportional to the
//! records, not to the pickle's object graph. Containers that stay reachable through the memo are
//! either resolved (the memo then holds their record) or keep the batch from being dropped.

use rustc_hash::FxHashMap;

use crate::error::{Error, Result};
use crate::model::ids::{FrameId, StackId, StringId};
use crate::model::interner::Interner;
use crate::progress::Progress;

/// How deep `MARK`s may nest before the input is refused as hostile.
const MAX_MARK_DEPTH: usize = 10_000;
/// How far past the memo's end a `PUT` may write before the input is refused as hostile.
const MAX_MEMO_GAP: usize = 1 << 20;
/// Progress is reported after this many bytes.
const PROGRESS_STEP: usize = 4 << 20;

/// What a record stands for; the index is into the [`Sink`]'s own tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RecordKind {
    /// A trace entry.
    Entry,
    /// A block of a segment.
    Block,
    /// A segment.
    Segment,
}

/// A handle to a container: an index into the pool's container table and the slot's generation,
/// so that a stale handle to a dropped container is detected instead of reading another one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Handle {
    index: u32,
    generation: u32,
}

/// One value on the machine's stack or in a container.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Value {
    /// Python `None`.
    None,
    /// A memo slot that was never written.
    Missing,
    /// `True` / `False`.
    Bool(bool),
    /// An integer that fits `i64`.
    Int(i64),
    /// An integer in `[2^63, 2^64)` (addresses can be that large).
    UInt(u64),
    /// An integer too large for 64 bits.
    BigInt,
    /// A float.
    Float(f64),
    /// An interned string.
    Str(StringId),
    /// A bytes object of this length (its content is not kept).
    Bytes(u64),
    /// A list, tuple, dict or set.
    Container(Handle),
    /// A frame dict already interned.
    Frame(FrameId),
    /// A list of frames already interned.
    Stack(StackId),
    /// A dict already turned into a record by the sink.
    Record(RecordKind, u32),
}

impl Value {
    /// The value as an unsigned 64-bit integer, if it is a non-negative integer that fits.
    pub(crate) fn as_u64(self) -> Option<u64> {
        match self {
            Self::Int(v) => u64::try_from(v).ok(),
            Self::UInt(v) => Some(v),
            Self::Bool(b) => Some(u64::from(b)),
            _ => None,
        }
    }

    /// The value as a signed 64-bit integer, if it is an integer that fits.
    pub(crate) fn as_i64(self) -> Option<i64> {
        match self {
            Self::Int(v) => Some(v),
            Self::Bool(b) => Some(i64::from(b)),
            _ => None,
        }
    }
}

/// Which Python type a container is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ContainerKind {
    /// `list`.
    List,
    /// `tuple`.
    Tuple,
    /// `dict`; items alternate key, value.
    Dict,
    /// `set` or `frozenset`.
    Set,
}

const NO_CHUNK: u32 = u32::MAX;
const NO_SLOT: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct Container {
    kind: ContainerKind,
    generation: u32,
    memo_slot: u32,
    first_chunk: u32,
    last_chunk: u32,
    len: u32,
    /// What the container was turned into ([`Value::None`] while it is still plain data).
    resolved: Value,
}

#[derive(Clone, Copy, Debug)]
struct Chunk {
    start: u32,
    len: u32,
    next: u32,
}

/// Containers and their items, plus the memo and the string table they refer to.
pub(crate) struct Store {
    containers: Vec<Container>,
    live_containers: usize,
    chunks: Vec<Chunk>,
    pool: Vec<Value>,
    memo: Vec<Value>,
    /// Strings, frames and stacks, shared with the trace being built.
    pub(crate) interner: Interner,
}

impl Store {
    fn new(interner: Interner) -> Self {
        Self {
            containers: Vec::new(),
            live_containers: 0,
            chunks: Vec::new(),
            pool: Vec::new(),
            memo: Vec::new(),
            interner,
        }
    }

    fn new_container(&mut self, kind: ContainerKind) -> Handle {
        let index = self.live_containers;
        let generation = match self.containers.get(index) {
            Some(old) => old.generation.wrapping_add(1),
            None => 0,
        };
        let container = Container {
            kind,
            generation,
            memo_slot: NO_SLOT,
            first_chunk: NO_CHUNK,
            last_chunk: NO_CHUNK,
            len: 0,
            resolved: Value::None,
        };
        if index < self.containers.len() {
            self.containers[index] = container;
        } else {
            self.containers.push(container);
        }
        self.live_containers += 1;
        Handle { index: index as u32, generation }
    }

    fn container(&self, handle: Handle) -> Result<&Container, String> {
        match self.containers.get(handle.index as usize) {
            Some(c) if (handle.index as usize) < self.live_containers && c.generation == handle.generation => Ok(c),
            _ => Err("reference to an object that was already consumed (the pickle reuses a \
                      value in a way snapshots never do)"
                .to_owned()),
        }
    }

    fn container_mut(&mut self, handle: Handle) -> Result<&mut Container, String> {
        let live = self.live_containers;
        match self.containers.get_mut(handle.index as usize) {
            Some(c) if (handle.index as usize) < live && c.generation == handle.generation => Ok(c),
            _ => Err("reference to an object that was already consumed".to_owned()),
        }
    }

    /// The kind of a container.
    pub(crate) fn kind(&self, handle: Handle) -> Result<ContainerKind, String> {
        Ok(self.container(handle)?.kind)
    }

    /// Number of items (for dicts: keys and values counted separately).
    pub(crate) fn len(&self, handle: Handle) -> Result<usize, String> {
        Ok(self.container(handle)?.len as usize)
    }

    /// What the container was resolved to, if anything.
    pub(crate) fn resolved(&self, handle: Handle) -> Result<Option<Value>, String> {
        let c = self.container(handle)?;
        Ok((c.resolved != Value::None).then_some(c.resolved))
    }

    /// Records what a container stands for; the memo then holds the record instead of the container.
    pub(crate) fn resolve(&mut self, handle: Handle, value: Value) -> Result<(), String> {
        let container = self.container_mut(handle)?;
        container.resolved = value;
        let slot = container.memo_slot;
        if let Some(entry) = self.memo.get_mut(slot as usize)
            && *entry == Value::Container(handle)
        {
            *entry = value;
        }
        Ok(())
    }

    fn append(&mut self, handle: Handle, items: &[Value]) -> Result<(), String> {
        if items.is_empty() {
            return Ok(());
        }
        let start = self.pool.len();
        let new_len = start + items.len();
        if new_len > u32::MAX as usize {
            return Err("more than 4 billion values in containers".to_owned());
        }
        let container = *self.container(handle)?;
        if container.resolved != Value::None {
            return Err("an object was changed after it was complete".to_owned());
        }
        let total = container.len as usize + items.len();
        if total > u32::MAX as usize {
            return Err("a container with more than 4 billion items".to_owned());
        }
        self.pool.extend_from_slice(items);
        let extends_last =
            self.chunks.get(container.last_chunk as usize).is_some_and(|c| (c.start + c.len) as usize == start);
        if extends_last {
            if let Some(chunk) = self.chunks.get_mut(container.last_chunk as usize) {
                chunk.len += items.len() as u32;
            }
        } else {
            let chunk_index = self.chunks.len() as u32;
            self.chunks.push(Chunk { start: start as u32, len: items.len() as u32, next: NO_CHUNK });
            if let Some(last) = self.chunks.get_mut(container.last_chunk as usize) {
                last.next = chunk_index;
            }
            let c = self.container_mut(handle)?;
            if c.first_chunk == NO_CHUNK {
                c.first_chunk = chunk_index;
            }
            c.last_chunk = chunk_index;
        }
        self.container_mut(handle)?.len = total as u32;
        Ok(())
    }

    /// Calls `f` with each item of a container, in order.
    pub(crate) fn for_each_item(
        &self,
        handle: Handle,
        mut f: impl FnMut(Value) -> Result<(), String>,
    ) -> Result<(), String> {
        let container = self.container(handle)?;
        let mut chunk_index = container.first_chunk;
        while let Some(chunk) = self.chunks.get(chunk_index as usize) {
            let items = self
                .pool
                .get(chunk.start as usize..(chunk.start + chunk.len) as usize)
                .ok_or("internal: chunk out of range")?;
            for &item in items {
                f(item)?;
            }
            chunk_index = chunk.next;
        }
        Ok(())
    }

    /// The items of a container copied out.
    pub(crate) fn items(&self, handle: Handle) -> Result<Vec<Value>, String> {
        let mut out = Vec::with_capacity(self.len(handle)?);
        self.for_each_item(handle, |v| {
            out.push(v);
            Ok(())
        })?;
        Ok(out)
    }

    /// Calls `f` with each key and value of a dict.
    pub(crate) fn for_each_pair(
        &self,
        handle: Handle,
        mut f: impl FnMut(Value, Value) -> Result<(), String>,
    ) -> Result<(), String> {
        let mut key = None;
        self.for_each_item(handle, |item| {
            match key.take() {
                None => key = Some(item),
                Some(k) => f(k, item)?,
            }
            Ok(())
        })
    }

    /// The text of a string value.
    pub(crate) fn str(&self, value: Value) -> Option<&str> {
        match value {
            Value::Str(id) => Some(self.interner.resolve(id)),
            _ => None,
        }
    }
}

/// Turns finished dicts into records.
pub(crate) trait Sink {
    /// Called with the keys and values (alternating) of a dict that is complete. Returns what
    /// stands for it from now on, or `None` to keep it as plain data.
    fn convert_dict(&mut self, store: &mut Store, pairs: &[Value]) -> Result<Option<Value>, String>;
}

/// Python's pickler writes `SETITEMS` and `APPENDS` in batches of this many; a shorter batch
/// into an empty container is the whole container.
const PICKLER_BATCH: usize = 1000;

/// Converts the items about to be appended to a list: resolved containers become what they
/// stand for, and dicts that were completed without being converted are offered to the sink.
fn convert_items<S: Sink>(sink: &mut S, store: &mut Store, items: &mut [Value]) -> Result<(), String> {
    for item in items.iter_mut() {
        let Value::Container(handle) = *item else { continue };
        if let Some(resolved) = store.resolved(handle)? {
            *item = resolved;
            continue;
        }
        if store.kind(handle)? != ContainerKind::Dict {
            continue;
        }
        let pairs = store.items(handle)?;
        if let Some(record) = sink.convert_dict(store, &pairs)? {
            store.resolve(handle, record)?;
            *item = record;
        }
    }
    Ok(())
}

/// A list holding only frames is a call stack: interned at once, its items never stored.
fn as_stack(store: &mut Store, items: &[Value], frames: &mut Vec<FrameId>) -> Option<StackId> {
    if items.is_empty() || items.len() >= PICKLER_BATCH {
        return None;
    }
    frames.clear();
    for item in items {
        let Value::Frame(id) = *item else { return None };
        frames.push(id);
    }
    Some(store.interner.stack(frames))
}

#[derive(Clone, Copy, Debug)]
struct Mark {
    stack_len: usize,
    pool_len: usize,
    chunks_len: usize,
    containers_len: usize,
    /// Cleared when something created before the mark was changed after it, which makes
    /// dropping what came after the mark unsafe.
    droppable: bool,
}

/// The result of running a pickle: the top value and the store it lives in.
pub(crate) struct Loaded {
    /// The object the pickle built.
    pub(crate) root: Value,
    /// Containers, memo and strings.
    pub(crate) store: Store,
}

struct Machine<'a, S: Sink> {
    data: &'a [u8],
    pos: usize,
    op_pos: usize,
    stack: Vec<Value>,
    marks: Vec<Mark>,
    store: Store,
    sink: &'a mut S,
    frames: Vec<FrameId>,
    /// Items of the dicts being scanned by the fast path, innermost last.
    dict_items: Vec<Value>,
    /// Frame runs already decoded, by a hash of their first bytes.
    runs: FxHashMap<u64, Vec<FrameRun>>,
    /// What the runs memoized, each a range of this.
    run_memo: Vec<Value>,
    /// Frame runs found in `runs`, and decoded.
    run_hits: u64,
    run_misses: u64,
    /// Set when a memo store names its index (`BINPUT`): such a run cannot be replayed elsewhere.
    explicit_memo_index: bool,
    /// Whether a `PUT` ever replaced a memo entry (which makes `runs` unsafe to use).
    memo_overwritten: bool,
}

/// Runs the pickle in `data`, letting `sink` convert dicts as they are appended to lists.
pub(crate) fn load<S: Sink>(data: &[u8], interner: Interner, sink: &mut S, progress: &dyn Progress) -> Result<Loaded> {
    let mut store = Store::new(interner);
    // Real snapshots memoize about one object per 80 bytes. Reserving generously costs only
    // address space (pages are touched as they fill) and saves copying a growing memo.
    store.memo.reserve(data.len() / 48);
    let mut machine = Machine {
        data,
        pos: 0,
        op_pos: 0,
        stack: Vec::with_capacity(1024),
        marks: Vec::new(),
        store,
        sink,
        frames: Vec::new(),
        dict_items: Vec::with_capacity(256),
        runs: FxHashMap::default(),
        run_memo: Vec::new(),
        run_hits: 0,
        run_misses: 0,
        explicit_memo_index: false,
        memo_overwritten: false,
    };
    let root = machine.run(progress)?;
    Ok(Loaded { root, store: machine.store })
}

fn opcode_name(op: u8) -> &'static str {
    match op {
        b'c' => "GLOBAL",
        0x93 => "STACK_GLOBAL",
        b'R' => "REDUCE",
        b'b' => "BUILD",
        b'i' => "INST",
        b'o' => "OBJ",
        0x81 => "NEWOBJ",
        0x92 => "NEWOBJ_EX",
        0x82 => "EXT1",
        0x83 => "EXT2",
        0x84 => "EXT4",
        b'P' => "PERSID",
        b'Q' => "BINPERSID",
        0x97 => "NEXT_BUFFER",
        0x98 => "READONLY_BUFFER",
        _ => "unknown",
    }
}

impl<S: Sink> Machine<'_, S> {
    fn err(&self, message: impl Into<String>) -> Error {
        Error::Pickle { offset: self.op_pos as u64, message: message.into() }
    }

    #[inline]
    fn take(&mut self, n: usize) -> Result<&[u8]> {
        let end = self.pos.checked_add(n).filter(|&end| end <= self.data.len());
        let Some(end) = end else {
            return Err(
                self.err(format!("the file ends in the middle of an opcode that needs {n} more bytes (truncated?)"))
            );
        };
        let bytes = &self.data[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    #[inline]
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    fn len_arg(&mut self, len: u64) -> Result<usize> {
        let remaining = (self.data.len() - self.pos) as u64;
        if len > remaining {
            return Err(self.err(format!(
                "a length of {len} bytes runs past the end of the file ({remaining} bytes left; truncated or corrupt)"
            )));
        }
        Ok(len as usize)
    }

    fn line(&mut self) -> Result<&[u8]> {
        let rest = &self.data[self.pos..];
        let Some(newline) = rest.iter().position(|&b| b == b'\n') else {
            return Err(self.err("the file ends inside a text argument (truncated?)"));
        };
        self.pos += newline + 1;
        Ok(&rest[..newline])
    }

    #[inline]
    fn push(&mut self, value: Value) {
        self.stack.push(value);
    }

    #[inline]
    fn pop(&mut self) -> Result<Value> {
        let floor = self.marks.last().map_or(0, |m| m.stack_len);
        if self.stack.len() <= floor {
            return Err(self.err("an opcode needs a value but the stack is empty"));
        }
        self.stack.pop().ok_or_else(|| self.err("stack underflow"))
    }

    #[inline]
    fn top(&self) -> Result<Value> {
        let floor = self.marks.last().map_or(0, |m| m.stack_len);
        if self.stack.len() <= floor {
            return Err(self.err("an opcode needs a value but the stack is empty"));
        }
        self.stack.last().copied().ok_or_else(|| self.err("stack underflow"))
    }

    fn pop_mark(&mut self) -> Result<Mark> {
        self.marks.pop().ok_or_else(|| self.err("an opcode needs a MARK but there is none"))
    }

    fn string(&mut self, bytes_len: usize) -> Result<Value> {
        let start = self.pos;
        self.take(bytes_len)?;
        let bytes = &self.data[start..start + bytes_len];
        // Python writes lone surrogates with 'surrogatepass', which is not valid UTF-8.
        let id = match std::str::from_utf8(bytes) {
            Ok(text) => self.store.interner.string(text),
            Err(_) => {
                let text = String::from_utf8_lossy(bytes).into_owned();
                self.store.interner.string(&text)
            }
        };
        Ok(Value::Str(id))
    }

    fn parse_text_int(&self, text: &[u8]) -> Result<Value> {
        let text = std::str::from_utf8(text).map_err(|_| self.err("an integer argument is not text"))?;
        let text = text.trim().trim_end_matches('L');
        match text {
            "00" => return Ok(Value::Bool(false)),
            "01" => return Ok(Value::Bool(true)),
            _ => {}
        }
        if let Ok(v) = text.parse::<i64>() {
            return Ok(Value::Int(v));
        }
        if let Ok(v) = text.parse::<u64>() {
            return Ok(Value::UInt(v));
        }
        if !text.is_empty() && text.trim_start_matches('-').bytes().all(|b| b.is_ascii_digit()) {
            return Ok(Value::BigInt);
        }
        Err(self.err(format!("{text:?} is not an integer")))
    }

    #[inline]
    fn memo_put(&mut self, index: usize) -> Result<()> {
        let value = self.top()?;
        let len = self.store.memo.len();
        if index >= len {
            if index - len > MAX_MEMO_GAP {
                return Err(self.err(format!("memo index {index} is far beyond the {len} entries stored so far")));
            }
            self.store.memo.resize(index + 1, Value::Missing);
        }
        if self.store.memo[index] != Value::Missing {
            self.memo_overwritten = true;
        }
        self.store.memo[index] = value;
        if let Value::Container(handle) = value
            && let Ok(container) = self.store.container_mut(handle)
            && container.memo_slot == NO_SLOT
        {
            container.memo_slot = index as u32;
        }
        Ok(())
    }

    #[inline]
    fn memo_get(&mut self, index: usize) -> Result<()> {
        let value = match self.store.memo.get(index) {
            Some(Value::Missing) | None => {
                return Err(self.err(format!(
                    "memo index {index} is out of range (the memo has {} entries)",
                    self.store.memo.len()
                )));
            }
            Some(&v) => v,
        };
        let value = match value {
            Value::Container(handle) => match self.store.container(handle) {
                Ok(c) if c.resolved != Value::None => c.resolved,
                Ok(_) => value,
                Err(message) => return Err(self.err(message)),
            },
            other => other,
        };
        self.push(value);
        Ok(())
    }

    /// Marks every open mark opened after `handle` was created as no longer droppable.
    fn touched(&mut self, handle: Handle) {
        for mark in self.marks.iter_mut().rev() {
            if mark.containers_len > handle.index as usize {
                mark.droppable = false;
            } else {
                break;
            }
        }
    }

    fn container_arg(&self, value: Value, want: ContainerKind, op: &str) -> Result<Handle> {
        let Value::Container(handle) = value else {
            return Err(self.err(format!("{op} applied to something that is not a container")));
        };
        let kind = self.store.kind(handle).map_err(|m| self.err(m))?;
        if kind != want {
            return Err(self.err(format!("{op} applied to a {kind:?}, which does not support it")));
        }
        Ok(handle)
    }

    fn append_to(&mut self, handle: Handle, items: &[Value]) -> Result<()> {
        self.touched(handle);
        self.store.append(handle, items).map_err(|m| self.err(m))
    }

    /// `APPENDS`: convert the batch, drop what building it left behind, append it.
    fn appends(&mut self) -> Result<()> {
        let mark = self.pop_mark()?;
        let Some(&target) = mark.stack_len.checked_sub(1).and_then(|i| self.stack.get(i)) else {
            return Err(self.err("APPENDS without a list below its MARK"));
        };
        self.append_batch(target, mark)?;
        self.stack.truncate(mark.stack_len);
        Ok(())
    }

    /// Converts and appends the batch `stack[mark.stack_len..]` in place.
    fn append_batch(&mut self, target: Value, mark: Mark) -> Result<()> {
        let kind = match target {
            Value::Container(h) => self.store.kind(h).map_err(|m| self.err(m))?,
            _ => return Err(self.err("APPENDS applied to something that is not a list")),
        };
        let want = if kind == ContainerKind::Set { ContainerKind::Set } else { ContainerKind::List };
        let handle = self.container_arg(target, want, "APPENDS")?;
        let start = mark.stack_len;
        if kind == ContainerKind::List {
            let fresh = self.store.len(handle).map_err(|m| self.err(m))? == 0;
            if fresh && let Some(stack) = as_stack(&mut self.store, &self.stack[start..], &mut self.frames) {
                self.store.resolve(handle, Value::Stack(stack)).map_err(|m| self.err(m))?;
                self.stack[start - 1] = Value::Stack(stack);
                return Ok(());
            }
            if let Err(m) = convert_items(self.sink, &mut self.store, &mut self.stack[start..]) {
                return Err(self.err(m));
            }
        }
        if mark.droppable && self.batch_is_droppable(&mark, &self.stack[start..]) {
            self.store.pool.truncate(mark.pool_len);
            self.store.chunks.truncate(mark.chunks_len);
            self.store.live_containers = mark.containers_len;
        }
        self.touched(handle);
        match self.store.append(handle, &self.stack[start..]) {
            Ok(()) => Ok(()),
            Err(m) => Err(self.err(m)),
        }
    }

    /// The hot path of snapshots: a fresh list filled with memoized frames, pickled as
    /// `MARK (BINGET | LONG_BINGET)* APPENDS`. Scanned here without going through the stack;
    /// anything else leaves `pos` untouched for the general machine. Returns whether it applied.
    fn frames_list_fast_path(&mut self) -> Result<bool> {
        let Some(&Value::Container(handle)) = self.stack.last() else { return Ok(false) };
        match self.store.container(handle) {
            Ok(c) if c.kind == ContainerKind::List && c.len == 0 && c.resolved == Value::None => {}
            _ => return Ok(false),
        }
        let memo_len = self.store.memo.len();
        let Some((stack, end)) = self.scan_frames(self.pos) else {
            // Frame dicts scanned before the scan gave up may have memoized values.
            self.store.memo.truncate(memo_len);
            return Ok(false);
        };
        self.store.resolve(handle, Value::Stack(stack)).map_err(|m| self.err(m))?;
        if let Some(top) = self.stack.last_mut() {
            *top = Value::Stack(stack);
        }
        self.pos = end;
        Ok(true)
    }

    /// The other hot path: a dict of scalars (frames, trace entries, blocks), pickled as
    /// `EMPTY_DICT <memo> MARK (key value)* SETITEMS` where every key and value is a memo
    /// reference, a string, a number, `None`/`True`/`False` or a fresh list of frames. The pairs
    /// are collected in a local buffer and handed to the sink in one go, without the stack, the
    /// pool or a container. Anything else restores the memo and leaves `pos` at the `EMPTY_DICT`
    /// for the general machine, which reports errors precisely. Returns whether it applied.
    fn dict_fast_path(&mut self) -> Result<bool> {
        let memo_len = self.store.memo.len();
        match self.scan_dict_at(self.pos, true) {
            Some((value, end)) => {
                self.push(value);
                self.pos = end;
                Ok(true)
            }
            None => {
                self.store.memo.truncate(memo_len);
                Ok(false)
            }
        }
    }

    /// Reads a memo store (`MEMOIZE`, or `BINPUT`/`LONG_BINPUT` of the next index) at `p`.
    #[inline]
    fn memo_op_at(&mut self, p: usize) -> Option<usize> {
        let next = self.store.memo.len();
        match self.data.get(p)? {
            0x94 => Some(p + 1),
            b'q' => {
                self.explicit_memo_index = true;
                (usize::from(*self.data.get(p + 1)?) == next).then_some(p + 2)
            }
            b'r' => {
                self.explicit_memo_index = true;
                let b = self.data.get(p + 1..p + 5)?;
                (u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize == next).then_some(p + 5)
            }
            _ => None,
        }
    }

    /// Scans a dict for [`Self::dict_fast_path`] from `p` (just after `EMPTY_DICT`): returns
    /// what stands for it and the position after `SETITEMS`, or `None` to fall back (the caller
    /// restores the memo). `top` is false for a frame dict inside a list being scanned, which
    /// must convert to a record and may not hold lists itself.
    fn scan_dict_at(&mut self, p: usize, top: bool) -> Option<(Value, usize)> {
        let base = self.dict_items.len();
        let result = self.scan_dict_items(p, top, base);
        self.dict_items.truncate(base);
        result
    }

    /// [`Self::scan_dict_at`] with the dict's items collected in `dict_items[base..]`.
    fn scan_dict_items(&mut self, p: usize, top: bool, base: usize) -> Option<(Value, usize)> {
        const MAX_ITEMS: usize = 64;
        let data = self.data;
        let mut p = self.memo_op_at(p)?;
        let slot = self.store.memo.len();
        self.store.memo.push(Value::Missing);
        if data.get(p) != Some(&b'(') {
            return None;
        }
        p += 1;
        loop {
            let op = *data.get(p)?;
            p += 1;
            let value = match op {
                b'u' => break,
                b'h' | b'j' => {
                    let index = if op == b'h' {
                        let i = usize::from(*data.get(p)?);
                        p += 1;
                        i
                    } else {
                        let b = data.get(p..p + 4)?;
                        p += 4;
                        u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize
                    };
                    match *self.store.memo.get(index)? {
                        Value::Missing => return None,
                        Value::Container(h) => match self.store.container(h).ok()?.resolved {
                            Value::None => Value::Container(h),
                            resolved => resolved,
                        },
                        v => v,
                    }
                }
                0x8c | b'X' => {
                    let len = if op == 0x8c {
                        let n = usize::from(*data.get(p)?);
                        p += 1;
                        n
                    } else {
                        let b = data.get(p..p + 4)?;
                        p += 4;
                        u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize
                    };
                    let bytes = data.get(p..p.checked_add(len)?)?;
                    p += len;
                    let text = std::str::from_utf8(bytes).ok()?;
                    Value::Str(self.store.interner.string(text))
                }
                b'K' => {
                    let v = *data.get(p)?;
                    p += 1;
                    Value::Int(i64::from(v))
                }
                b'M' => {
                    let b = data.get(p..p + 2)?;
                    p += 2;
                    Value::Int(i64::from(u16::from_le_bytes([b[0], b[1]])))
                }
                b'J' => {
                    let b = data.get(p..p + 4)?;
                    p += 4;
                    Value::Int(i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])))
                }
                0x8a => {
                    let n = usize::from(*data.get(p)?);
                    let bytes = data.get(p + 1..p + 1 + n)?;
                    p += 1 + n;
                    long_from_le(bytes)
                }
                b'G' => {
                    let b = data.get(p..p + 8)?;
                    p += 8;
                    let mut a = [0u8; 8];
                    a.copy_from_slice(b);
                    Value::Float(f64::from_be_bytes(a))
                }
                b'N' => Value::None,
                0x88 => Value::Bool(true),
                0x89 => Value::Bool(false),
                b']' if top => {
                    // A fresh list of frames: EMPTY_LIST <memo> MARK (GET | frame dict)* APPENDS.
                    p = self.memo_op_at(p)?;
                    let slot = self.store.memo.len();
                    if data.get(p) != Some(&b'(') {
                        // An empty list (no frames recorded): a real, empty container.
                        let value = Value::Container(self.store.new_container(ContainerKind::List));
                        self.store.memo.push(value);
                        self.dict_items.push(value);
                        continue;
                    }
                    self.store.memo.push(Value::Missing);
                    let (stack, end) = self.scan_frames(p + 1)?;
                    p = end;
                    let value = Value::Stack(stack);
                    if let Some(entry) = self.store.memo.get_mut(slot) {
                        *entry = value;
                    }
                    value
                }
                _ => return None,
            };
            // Python's pickler memoizes strings right after pushing them (not numbers, `None` or
            // references); anything else followed by a memo store falls back.
            if matches!(value, Value::Str(_))
                && let Some(after) = self.memo_op_at(p)
            {
                self.store.memo.push(value);
                p = after;
            }
            self.dict_items.push(value);
            if self.dict_items.len() - base > MAX_ITEMS {
                return None;
            }
        }
        let pairs = self.dict_items.get(base..)?;
        if pairs.len() % 2 != 0 {
            return None;
        }
        let value = match self.sink.convert_dict(&mut self.store, pairs) {
            Ok(Some(record)) => record,
            Ok(None) if top => {
                let h = self.store.new_container(ContainerKind::Dict);
                self.store.append(h, pairs).ok()?;
                if let Ok(c) = self.store.container_mut(h) {
                    c.memo_slot = slot as u32;
                }
                Value::Container(h)
            }
            // Errors are left for the general machine to report with their position.
            _ => return None,
        };
        if let Some(entry) = self.store.memo.get_mut(slot) {
            *entry = value;
        }
        Some((value, p))
    }

    /// Scans `(BINGET | LONG_BINGET | frame dict)* APPENDS` from `p` (just after the `MARK`)
    /// when every item is a frame; returns the interned stack and the position after `APPENDS`.
    fn scan_frames(&mut self, p: usize) -> Option<(StackId, usize)> {
        // Real snapshots repeat the same frame lists as fresh objects: the same run of opcodes,
        // byte for byte (memo references, and fresh frame dicts that memoize their strings with
        // `MEMOIZE`). A run seen before, found by its first bytes and compared whole, is the stack
        // it was then and memoizes the same values, as long as no memo slot was ever overwritten.
        // (Walking the opcodes to find the run's end is a chain of dependent loads; comparing
        // bytes is not.)
        let data = self.data;
        let prefix = data.get(p..(p + RUN_PREFIX).min(data.len()))?;
        let key = run_hash(prefix);
        if !self.memo_overwritten
            && let Some(candidates) = self.runs.get(&key)
        {
            for run in candidates {
                let (start, len) = (run.start as usize, run.len as usize);
                if data.get(p + len) == Some(&b'e') && data.get(p..p + len) == data.get(start..start + len) {
                    let memoized = self.run_memo.get(run.memoized.0 as usize..run.memoized.1 as usize)?;
                    self.store.memo.extend_from_slice(memoized);
                    self.run_hits += 1;
                    return Some((run.stack, p + len + 1));
                }
            }
        }
        let memo_before = self.store.memo.len();
        self.explicit_memo_index = false;
        let (stack, after) = self.decode_frames(p)?;
        self.run_misses += 1;
        // A file whose runs never repeat (synthetic ones) is not worth remembering runs for.
        let worthwhile = self.run_misses < 256 || self.run_hits * 8 >= self.run_misses;
        if worthwhile && !self.memo_overwritten && !self.explicit_memo_index {
            let candidates = self.runs.entry(key).or_default();
            if candidates.len() < MAX_RUN_CANDIDATES {
                let first = self.run_memo.len() as u32;
                self.run_memo.extend_from_slice(self.store.memo.get(memo_before..).unwrap_or(&[]));
                let memoized = (first, self.run_memo.len() as u32);
                candidates.push(FrameRun { stack, start: p as u64, len: (after - 1 - p) as u32, memoized });
            }
        }
        Some((stack, after))
    }

    /// [`Self::scan_frames`] the long way: reads every frame reference (or frame dict).
    fn decode_frames(&mut self, mut p: usize) -> Option<(StackId, usize)> {
        let data = self.data;
        let mut frames = std::mem::take(&mut self.frames);
        frames.clear();
        let result = loop {
            let frame = match *data.get(p)? {
                b'h' => {
                    let index = usize::from(*data.get(p + 1)?);
                    p += 2;
                    self.store.memo.get(index).copied()
                }
                b'j' => {
                    let b = data.get(p + 1..p + 5)?;
                    p += 5;
                    self.store.memo.get(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize).copied()
                }
                b'}' => match self.scan_dict_at(p + 1, false) {
                    Some((value, end)) => {
                        p = end;
                        Some(value)
                    }
                    None => None,
                },
                b'e' => break Some(()),
                _ => break None,
            };
            match frame {
                Some(Value::Frame(id)) => frames.push(id),
                _ => break None,
            }
            if frames.len() >= PICKLER_BATCH {
                break None;
            }
        };
        let stack = match result {
            Some(()) if !frames.is_empty() => Some((self.store.interner.stack(&frames), p + 1)),
            _ => None,
        };
        self.frames = frames;
        stack
    }

    /// Whether everything built after `mark` is unreachable once `batch` holds only records.
    fn batch_is_droppable(&self, mark: &Mark, batch: &[Value]) -> bool {
        if batch.iter().any(|v| matches!(v, Value::Container(_))) {
            return false;
        }
        let Some(built) = self.store.containers.get(mark.containers_len..self.store.live_containers) else {
            return false;
        };
        built.iter().all(|c| c.resolved != Value::None || c.memo_slot == NO_SLOT)
    }

    fn run(&mut self, progress: &dyn Progress) -> Result<Value> {
        let total = self.data.len() as u64;
        let mut next_report = PROGRESS_STEP;
        loop {
            if self.pos >= next_report {
                next_report = self.pos + PROGRESS_STEP;
                if !progress.update(self.pos as u64, total) {
                    return Err(Error::Cancelled);
                }
            }
            self.op_pos = self.pos;
            let Some(&op) = self.data.get(self.pos) else {
                return Err(self.err("the file ends before the pickle's STOP opcode (truncated?)"));
            };
            self.pos += 1;
            match op {
                0x80 => {
                    let protocol = self.u8()?;
                    if protocol > 5 {
                        return Err(self.err(format!("unsupported pickle protocol {protocol}")));
                    }
                }
                0x95 => {
                    // FRAME: a length hint for buffered readers; the whole file is in memory.
                    let len = self.u64()?;
                    self.len_arg(len)?;
                }
                b'.' => {
                    let value = self.pop()?;
                    progress.update(total, total);
                    return Ok(value);
                }
                b'(' => {
                    if self.frames_list_fast_path()? {
                        continue;
                    }
                    if self.marks.len() >= MAX_MARK_DEPTH {
                        return Err(self.err(format!("MARKs nested deeper than {MAX_MARK_DEPTH}")));
                    }
                    self.marks.push(Mark {
                        stack_len: self.stack.len(),
                        pool_len: self.store.pool.len(),
                        chunks_len: self.store.chunks.len(),
                        containers_len: self.store.live_containers,
                        droppable: true,
                    });
                }
                b'0' => {
                    self.pop()?;
                }
                b'1' => {
                    let mark = self.pop_mark()?;
                    self.stack.truncate(mark.stack_len);
                }
                b'2' => {
                    let top = self.top()?;
                    self.push(top);
                }
                b'N' => self.push(Value::None),
                0x88 => self.push(Value::Bool(true)),
                0x89 => self.push(Value::Bool(false)),
                b'J' => {
                    let v = self.u32()? as i32;
                    self.push(Value::Int(i64::from(v)));
                }
                b'K' => {
                    let v = self.u8()?;
                    self.push(Value::Int(i64::from(v)));
                }
                b'M' => {
                    let v = self.u16()?;
                    self.push(Value::Int(i64::from(v)));
                }
                0x8a => {
                    let n = self.u8()? as usize;
                    let bytes = self.take(n)?;
                    let bytes = bytes.to_vec();
                    let v = long_from_le(&bytes);
                    self.push(v);
                }
                0x8b => {
                    let n = self.u32()? as u64;
                    let n = self.len_arg(n)?;
                    let start = self.pos;
                    self.take(n)?;
                    let v = long_from_le(&self.data[start..start + n]);
                    self.push(v);
                }
                b'I' | b'L' => {
                    let line = self.line()?.to_vec();
                    let v = self.parse_text_int(&line)?;
                    self.push(v);
                }
                b'G' => {
                    let v = f64::from_bits(u64::from_be_bytes({
                        let b = self.take(8)?;
                        let mut a = [0u8; 8];
                        a.copy_from_slice(b);
                        a
                    }));
                    self.push(Value::Float(v));
                }
                b'F' => {
                    let line = self.line()?;
                    let text = String::from_utf8_lossy(line).trim().to_owned();
                    let v = text.parse::<f64>().map_err(|_| self.err(format!("{text:?} is not a float")))?;
                    self.push(Value::Float(v));
                }
                0x8c => {
                    let n = self.u8()? as usize;
                    let v = self.string(n)?;
                    self.push(v);
                }
                b'X' => {
                    let n = self.u32()? as u64;
                    let n = self.len_arg(n)?;
                    let v = self.string(n)?;
                    self.push(v);
                }
                0x8d => {
                    let n = self.u64()?;
                    let n = self.len_arg(n)?;
                    let v = self.string(n)?;
                    self.push(v);
                }
                b'V' => {
                    // Protocol 0 text: raw-unicode-escape. Kept simple: \uXXXX escapes decoded.
                    let line = self.line()?.to_vec();
                    let text = decode_raw_unicode_escape(&line);
                    let id = self.store.interner.string(&text);
                    self.push(Value::Str(id));
                }
                b'S' => {
                    let line = self.line()?.to_vec();
                    let text = String::from_utf8_lossy(&line);
                    let text = text.trim();
                    let unquoted = text
                        .strip_prefix('\'')
                        .and_then(|t| t.strip_suffix('\''))
                        .or_else(|| text.strip_prefix('"').and_then(|t| t.strip_suffix('"')))
                        .ok_or_else(|| self.err("STRING argument is not quoted"))?;
                    let id = self.store.interner.string(unquoted);
                    self.push(Value::Str(id));
                }
                b'T' => {
                    let n = self.u32()? as u64;
                    let n = self.len_arg(n)?;
                    let v = self.string(n)?;
                    self.push(v);
                }
                b'U' => {
                    let n = self.u8()? as usize;
                    let v = self.string(n)?;
                    self.push(v);
                }
                b'B' | b'C' | 0x8e | 0x96 => {
                    let n = match op {
                        b'B' => u64::from(self.u32()?),
                        b'C' => u64::from(self.u8()?),
                        _ => self.u64()?,
                    };
                    let n = self.len_arg(n)?;
                    self.take(n)?;
                    self.push(Value::Bytes(n as u64));
                }
                b']' => {
                    let h = self.store.new_container(ContainerKind::List);
                    self.push(Value::Container(h));
                }
                b'}' => {
                    if self.dict_fast_path()? {
                        continue;
                    }
                    let h = self.store.new_container(ContainerKind::Dict);
                    self.push(Value::Container(h));
                }
                b')' => {
                    let h = self.store.new_container(ContainerKind::Tuple);
                    self.push(Value::Container(h));
                }
                0x8f => {
                    let h = self.store.new_container(ContainerKind::Set);
                    self.push(Value::Container(h));
                }
                0x85..=0x87 => {
                    let n = (op - 0x84) as usize;
                    let floor = self.marks.last().map_or(0, |m| m.stack_len);
                    if self.stack.len() < floor + n {
                        return Err(self.err("TUPLE opcode with too few values on the stack"));
                    }
                    let items: Vec<Value> = self.stack.drain(self.stack.len() - n..).collect();
                    let h = self.store.new_container(ContainerKind::Tuple);
                    self.store.append(h, &items).map_err(|m| self.err(m))?;
                    self.push(Value::Container(h));
                }
                b't' | b'l' | b'd' | 0x91 => {
                    let mark = self.pop_mark()?;
                    let mut items: Vec<Value> = self.stack.drain(mark.stack_len..).collect();
                    let kind = match op {
                        b't' => ContainerKind::Tuple,
                        b'l' => ContainerKind::List,
                        b'd' => ContainerKind::Dict,
                        _ => ContainerKind::Set,
                    };
                    if kind == ContainerKind::Dict && items.len() % 2 != 0 {
                        return Err(self.err("DICT with an odd number of keys and values"));
                    }
                    if kind == ContainerKind::Dict
                        && let Some(record) =
                            self.sink.convert_dict(&mut self.store, &items).map_err(|m| self.err(m))?
                    {
                        self.push(record);
                        continue;
                    }
                    if kind == ContainerKind::List {
                        if let Some(stack) = as_stack(&mut self.store, &items, &mut self.frames) {
                            self.push(Value::Stack(stack));
                            continue;
                        }
                        convert_items(self.sink, &mut self.store, &mut items).map_err(|m| self.err(m))?;
                    }
                    let h = self.store.new_container(kind);
                    self.store.append(h, &items).map_err(|m| self.err(m))?;
                    self.push(Value::Container(h));
                }
                b'a' => {
                    let item = self.pop()?;
                    let target = self.top()?;
                    let handle = self.container_arg(target, ContainerKind::List, "APPEND")?;
                    let mut items = [item];
                    convert_items(self.sink, &mut self.store, &mut items).map_err(|m| self.err(m))?;
                    self.append_to(handle, &items)?;
                }
                b'e' => self.appends()?,
                0x90 => {
                    let mark = self.pop_mark()?;
                    let Some(&target) = mark.stack_len.checked_sub(1).and_then(|i| self.stack.get(i)) else {
                        return Err(self.err("ADDITEMS without a set below its MARK"));
                    };
                    let handle = self.container_arg(target, ContainerKind::Set, "ADDITEMS")?;
                    let items: Vec<Value> = self.stack.drain(mark.stack_len..).collect();
                    self.append_to(handle, &items)?;
                }
                b's' => {
                    let value = self.pop()?;
                    let key = self.pop()?;
                    let target = self.top()?;
                    let handle = self.container_arg(target, ContainerKind::Dict, "SETITEM")?;
                    self.append_to(handle, &[key, value])?;
                }
                b'u' => {
                    let mark = self.pop_mark()?;
                    let Some(&target) = mark.stack_len.checked_sub(1).and_then(|i| self.stack.get(i)) else {
                        return Err(self.err("SETITEMS without a dict below its MARK"));
                    };
                    let handle = self.container_arg(target, ContainerKind::Dict, "SETITEMS")?;
                    let start = mark.stack_len;
                    let pairs = self.stack.len() - start;
                    if pairs % 2 != 0 {
                        return Err(self.err("SETITEMS with an odd number of keys and values"));
                    }
                    // A dict filled by one short batch is complete: convert it right away, so its
                    // items never reach the pool.
                    let fresh = self.store.len(handle).map_err(|m| self.err(m))? == 0;
                    if fresh && pairs / 2 < PICKLER_BATCH {
                        let converted = self.sink.convert_dict(&mut self.store, &self.stack[start..]);
                        if let Some(record) = converted.map_err(|m| self.err(m))? {
                            self.store.resolve(handle, record).map_err(|m| self.err(m))?;
                            self.stack.truncate(start);
                            self.stack[start - 1] = record;
                            continue;
                        }
                    }
                    self.touched(handle);
                    if let Err(m) = self.store.append(handle, &self.stack[mark.stack_len..]) {
                        return Err(self.err(m));
                    }
                    self.stack.truncate(mark.stack_len);
                }
                0x94 => {
                    let index = self.store.memo.len();
                    self.memo_put(index)?;
                }
                b'q' => {
                    let index = self.u8()? as usize;
                    self.memo_put(index)?;
                }
                b'r' => {
                    let index = self.u32()? as usize;
                    self.memo_put(index)?;
                }
                b'p' => {
                    let line = self.line()?.to_vec();
                    let index = parse_index(&line).ok_or_else(|| self.err("PUT index is not a number"))?;
                    self.memo_put(index)?;
                }
                b'h' => {
                    let index = self.u8()? as usize;
                    self.memo_get(index)?;
                }
                b'j' => {
                    let index = self.u32()? as usize;
                    self.memo_get(index)?;
                }
                b'g' => {
                    let line = self.line()?.to_vec();
                    let index = parse_index(&line).ok_or_else(|| self.err("GET index is not a number"))?;
                    self.memo_get(index)?;
                }
                b'c' | 0x93 | b'R' | b'b' | b'i' | b'o' | 0x81 | 0x92 | 0x82 | 0x83 | 0x84 | b'P' | b'Q' | 0x97
                | 0x98 => {
                    return Err(Error::UnsafePickle { offset: self.op_pos as u64, opcode: opcode_name(op) });
                }
                other => {
                    return Err(self.err(format!("unknown opcode 0x{other:02x} (not a pickle, or corrupt)")));
                }
            }
        }
    }
}

/// A little-endian two's-complement integer of any width, as `LONG1`/`LONG4` store it.
fn long_from_le(bytes: &[u8]) -> Value {
    match bytes.len() {
        0 => Value::Int(0),
        n @ 1..=8 => {
            // Assembled in a register: a variable-length copy into a stack array stalls the load
            // that reads it back.
            let mut v = 0u64;
            for (i, &b) in bytes.iter().enumerate() {
                v |= u64::from(b) << (8 * i);
            }
            let shift = 64 - 8 * n as u32;
            Value::Int(((v << shift) as i64) >> shift)
        }
        _ => {
            // Two's complement wider than 8 bytes: fits u64 only when the rest is zero padding.
            let (low, high) = bytes.split_at(8);
            if high.iter().all(|&b| b == 0) {
                let mut a = [0u8; 8];
                a.copy_from_slice(low);
                let v = u64::from_le_bytes(a);
                if v <= i64::MAX as u64 { Value::Int(v as i64) } else { Value::UInt(v) }
            } else if high.iter().all(|&b| b == 0xff) && low[7] & 0x80 != 0 {
                let mut a = [0u8; 8];
                a.copy_from_slice(low);
                Value::Int(i64::from_le_bytes(a))
            } else {
                Value::BigInt
            }
        }
    }
}

/// Bytes of a frame run that key the run cache.
const RUN_PREFIX: usize = 64;
/// Runs kept per key (runs sharing their first frames).
const MAX_RUN_CANDIDATES: usize = 64;

/// A run of frame opcodes decoded once: its stack, where it is, and what it memoized.
struct FrameRun {
    stack: StackId,
    start: u64,
    len: u32,
    /// Range of `run_memo`.
    memoized: (u32, u32),
}

/// A fast hash of a run of opcode bytes, eight at a time.
fn run_hash(bytes: &[u8]) -> u64 {
    const K: u64 = 0xf135_7aea_2e62_a9c5;
    let mut hash = bytes.len() as u64;
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let mut a = [0u8; 8];
        a.copy_from_slice(word);
        hash = (hash.rotate_left(26) ^ u64::from_le_bytes(a)).wrapping_mul(K);
    }
    let mut tail = [0u8; 8];
    tail[..words.remainder().len()].copy_from_slice(words.remainder());
    hash = (hash.rotate_left(26) ^ u64::from_le_bytes(tail)).wrapping_mul(K);
    hash ^ (hash >> 29)
}

fn parse_index(line: &[u8]) -> Option<usize> {
    std::str::from_utf8(line).ok()?.trim().parse().ok()
}

fn decode_raw_unicode_escape(bytes: &[u8]) -> String {
    let text: String = bytes.iter().map(|&b| char::from(b)).collect();
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' && matches!(chars.peek(), Some('u') | Some('U')) {
            let width = if chars.next() == Some('u') { 4 } else { 8 };
            let hex: String = chars.by_ref().take(width).collect();
            match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                Some(decoded) => out.push(decoded),
                None => {
                    out.push('\\');
                    out.push_str(&hex);
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long1_integers_of_every_width() {
        let cases: [(&[u8], Value); 8] = [
            (&[], Value::Int(0)),
            (&[0x7f], Value::Int(127)),
            (&[0x80], Value::Int(-128)),
            (&[0xff, 0x00], Value::Int(255)),
            (&[0x00, 0x80], Value::Int(-32768)),
            (&[0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x00], Value::Int(0x8000_0000_0000)),
            (&[0xff; 8], Value::Int(-1)),
            (&[0, 0, 0, 0, 0, 0, 0, 0x80, 0], Value::UInt(1 << 63)),
        ];
        for (bytes, expected) in cases {
            assert_eq!(long_from_le(bytes), expected, "{bytes:?}");
        }
        assert_eq!(long_from_le(&[1, 0, 0, 0, 0, 0, 0, 0, 1]), Value::BigInt);
        assert_eq!(long_from_le(&[0, 0, 0, 0, 0, 0, 0, 0x80, 0xff]), Value::Int(i64::MIN));
    }
}
