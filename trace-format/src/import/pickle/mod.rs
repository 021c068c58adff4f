//! A streaming reader of plain-data pickles that never executes anything.
//!
//! Python's `pickle` is a small stack machine. This module runs the subset of it that builds plain
//! data (numbers, strings, bytes, lists, tuples, dicts, sets) and refuses every opcode that imports
//! or calls code (`GLOBAL`, `STACK_GLOBAL`, `REDUCE`, `BUILD`, `INST`, `OBJ`, `NEWOBJ*`, `EXT*`,
//! `PERSID`, out-of-band buffers).
//!
//! It is built for big files. Instead of a tree of Python-like objects it keeps containers in one
//! bump-allocated pool, and a [`Sink`] turns each dict into a compact record the moment
//! `SETITEMS` completes it (frames, trace entries, blocks, segments); the memo then holds the
//! record. Once every item of an `APPENDS` batch is a record, everything the batch built is
//! dropped from the pool again, so memory follows the records, not the pickle's object graph.
//! Containers that stay reachable through the memo are either resolved or keep the batch from
//! being dropped. The shapes that make up nearly all of a snapshot take fast paths (`fast.rs`).

mod fast;
mod memo;
mod parallel;
mod scalars;
mod store;
mod walk;

use rustc_hash::FxHashMap;

use self::fast::FrameRun;
pub(crate) use self::memo::Remap;
pub(crate) use self::parallel::PieceSink;
use self::store::NO_SLOT;
pub(crate) use self::store::{ContainerKind, Handle, RecordKind, Sink, Store, Value};
use crate::error::{Error, Result};
use crate::model::ids::{FrameId, StackId, StringId};
use crate::model::interner::Interner;
use crate::progress::Progress;

/// How deep `MARK`s may nest before the input is refused as hostile.
const MAX_MARK_DEPTH: usize = 10_000;
/// Progress is reported after this many bytes.
const PROGRESS_STEP: usize = 4 << 20;

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
    /// How many pieces run in parallel were taken in (0: run in one go).
    pub(crate) pieces_taken: usize,
}

struct Machine<'a, S: PieceSink> {
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
    /// The bytes of the runs, each a range of this: compared here rather than in the file,
    /// whose pages behind the parser are handed back (comparing there would read them again).
    run_bytes: Vec<u8>,
    /// Frame runs found in `runs`, and decoded.
    run_hits: u64,
    run_misses: u64,
    /// Set when a memo store names its index (`BINPUT`): such a run cannot be replayed elsewhere.
    explicit_memo_index: bool,
    /// The last string the fast path interned: where its bytes are, their length, its id.
    last_string: (usize, usize, StringId),
    /// Whether a `PUT` ever replaced a memo entry (which makes `runs` unsafe to use).
    memo_overwritten: bool,
    /// Where the run stops first to do something else ([`Machine::stop_here`]): take in a piece
    /// run in parallel, or end a piece. `usize::MAX` when nothing is planned.
    next_stop: usize,
    /// This machine's part in a parallel run, if any.
    role: parallel::Role<'a, S>,
    /// Pieces run in parallel and taken in.
    pieces_taken: usize,
}

/// Runs the pickle in `data`, letting `sink` convert dicts as they are appended to lists.
///
/// A large pickle of the snapshot's shape is run in pieces on several cores ([`parallel`], as
/// `pieces` or `VRAMSCOPE_PICKLE_PIECES` asks, else one per core); the result is the same as
/// running it in one go, which is what happens otherwise.
pub(crate) fn load<S: PieceSink>(
    data: &[u8],
    interner: Interner,
    sink: &mut S,
    progress: &dyn Progress,
    pieces: Option<usize>,
) -> Result<Loaded> {
    let mut store = Store::new(interner);
    // Real snapshots memoize one object per 30 to 80 bytes. Reserving generously costs only
    // address space (pages are touched as they fill) and saves copying a growing memo.
    store.memo.reserve(data.len() / 16);
    if let Some(plan) = parallel::plan(data, pieces) {
        return parallel::load(data, store, sink, progress, plan);
    }
    let mut machine = Machine::new(data, store, sink, parallel::Role::Alone);
    let root = machine.run(progress)?;
    Ok(Loaded { root, store: machine.store, pieces_taken: 0 })
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

impl<'a, S: PieceSink> Machine<'a, S> {
    fn new(data: &'a [u8], store: Store, sink: &'a mut S, role: parallel::Role<'a, S>) -> Self {
        Self {
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
            run_bytes: Vec::new(),
            run_hits: 0,
            last_string: (0, usize::MAX, StringId(0)),
            run_misses: 0,
            explicit_memo_index: false,
            memo_overwritten: false,
            next_stop: usize::MAX,
            role,
            pieces_taken: 0,
        }
    }

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

    #[inline]
    fn memo_put(&mut self, index: usize) -> Result<()> {
        let value = self.top()?;
        // Every value a pickle memoizes costs at least one byte of it, so its memo can never
        // hold more entries than the file has bytes: an index beyond that stores nothing real,
        // and honouring it would cost memory out of all proportion to the file.
        if index >= self.store.memo.len() && index > self.data.len() {
            return Err(self.err(format!(
                "memo index {index} is beyond anything a pickle of {} bytes can have stored",
                self.data.len()
            )));
        }
        if index < self.store.memo.base() && !self.store.memo.holds_below_base() {
            return Err(self.err("a piece stores to a memo index of an earlier piece"));
        }
        if self.store.memo.set(index, value) {
            self.memo_overwritten = true;
        }
        if let Value::Container(handle) = value
            && let Ok(container) = self.store.container_mut(handle)
            && container.memo_slot == NO_SLOT
        {
            container.memo_slot = index as u32;
        }
        Ok(())
    }

    /// The value at a memo index: this machine's, or (in a piece run in parallel) an earlier
    /// piece's, read from the file.
    #[inline]
    pub(super) fn memo_value(&mut self, index: usize) -> Option<Value> {
        match self.store.memo.get(index) {
            Some(value) => Some(value),
            None if index < self.store.memo.base() && !self.store.memo.holds_below_base() => {
                self.earlier_piece_value(index)
            }
            None => None,
        }
    }

    #[inline]
    fn memo_get(&mut self, index: usize) -> Result<()> {
        let value = match self.memo_value(index) {
            Some(Value::Missing) | None => {
                return Err(self.err(format!(
                    "memo index {index} is out of range (the memo has {} entries)",
                    self.store.memo.len()
                )));
            }
            Some(v) => v,
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
        if self.marks.is_empty() {
            self.piece_list_may_end();
        }
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
            if self.pos >= self.next_stop {
                if let Some(value) = self.stop_here()? {
                    return Ok(value);
                }
                continue;
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
                b'c' | 0x93 | b'R' | b'b' | b'i' | b'o' | 0x81 | 0x92 | 0x82 | 0x83 | 0x84 | b'P' | b'Q' | 0x97
                | 0x98 => {
                    return Err(Error::UnsafePickle { offset: self.op_pos as u64, opcode: opcode_name(op) });
                }
                b'N' | 0x88 | 0x89 | b'J' | b'K' | b'M' | 0x8a | 0x8b | b'I' | b'L' | b'G' | b'F' | 0x8c | b'X'
                | 0x8d | b'V' | b'S' | b'T' | b'U' | b'B' | b'C' | 0x8e | 0x96 => self.scalar(op)?,
                b']'
                | b'}'
                | b')'
                | 0x8f
                | 0x85..=0x87
                | b't'
                | b'l'
                | b'd'
                | 0x91
                | b'a'
                | b'e'
                | 0x90
                | b's'
                | b'u' => self.container_op(op)?,
                0x94 | b'q' | b'r' | b'p' | b'h' | b'j' | b'g' => self.memo_op(op)?,
                other => {
                    return Err(self.err(format!("unknown opcode 0x{other:02x} (not a pickle, or corrupt)")));
                }
            }
        }
    }

    /// The opcodes that build and fill containers.
    #[inline]
    fn container_op(&mut self, op: u8) -> Result<()> {
        match op {
            b']' => {
                let h = self.store.new_container(ContainerKind::List);
                self.push(Value::Container(h));
            }
            b'}' => {
                if self.dict_fast_path()? {
                    return Ok(());
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
                if kind == ContainerKind::Dict && !items.len().is_multiple_of(2) {
                    return Err(self.err("DICT with an odd number of keys and values"));
                }
                if kind == ContainerKind::Dict
                    && let Some(record) = self.sink.convert_dict(&mut self.store, &items).map_err(|m| self.err(m))?
                {
                    self.push(record);
                    return Ok(());
                }
                if kind == ContainerKind::List {
                    if let Some(stack) = as_stack(&mut self.store, &items, &mut self.frames) {
                        self.push(Value::Stack(stack));
                        return Ok(());
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
                if !pairs.is_multiple_of(2) {
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
                        return Ok(());
                    }
                }
                self.touched(handle);
                if let Err(m) = self.store.append(handle, &self.stack[mark.stack_len..]) {
                    return Err(self.err(m));
                }
                self.stack.truncate(mark.stack_len);
            }
            _ => return Err(self.err(format!("internal: opcode 0x{op:02x} dispatched to the wrong group"))),
        }
        Ok(())
    }

    /// The opcodes that store to and read from the memo.
    #[inline]
    fn memo_op(&mut self, op: u8) -> Result<()> {
        match op {
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
            _ => return Err(self.err(format!("internal: opcode 0x{op:02x} dispatched to the wrong group"))),
        }
        Ok(())
    }
}

fn parse_index(line: &[u8]) -> Option<usize> {
    std::str::from_utf8(line).ok()?.trim().parse().ok()
}
