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

mod containers;
mod cursor;
mod fast;
mod memo;
mod opcodes;
mod parallel;
mod record;
mod scalars;
mod store;
mod value;
mod walk;

use rustc_hash::FxHashMap;

use self::cursor::Cursor;
use self::fast::FrameRun;
pub(crate) use self::memo::Remap;
use self::opcodes::{
    ADDITEMS, APPEND, APPENDS, BINBYTES, BINBYTES8, BINFLOAT, BINGET, BININT, BININT1, BININT2, BINPERSID, BINPUT,
    BINSTRING, BINUNICODE, BINUNICODE8, BUILD, BYTEARRAY8, DICT, DUP, EMPTY_DICT, EMPTY_LIST, EMPTY_SET, EMPTY_TUPLE,
    EXT1, EXT2, EXT4, FLOAT, FRAME, FROZENSET, GET, GLOBAL, INST, INT, LIST, LONG, LONG_BINGET, LONG_BINPUT, LONG1,
    LONG4, MARK, MEMOIZE, NEWFALSE, NEWOBJ, NEWOBJ_EX, NEWTRUE, NEXT_BUFFER, NONE, OBJ, PERSID, POP, POP_MARK, PROTO,
    PUT, READONLY_BUFFER, REDUCE, SETITEM, SETITEMS, SHORT_BINBYTES, SHORT_BINSTRING, SHORT_BINUNICODE, STACK_GLOBAL,
    STOP, STRING, TUPLE, TUPLE1, TUPLE3, UNICODE, refused_name,
};
pub(crate) use self::parallel::PieceSink;
pub(crate) use self::record::{FIELDS, FieldKind, Fields};
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
    /// The bytes and where the machine is in them.
    cur: Cursor<'a>,
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
    /// Whether a `PUT` ever replaced a memo entry (which makes `runs` and `key_cache` unsafe to
    /// use).
    memo_overwritten: bool,
    /// Memo indices found to hold keys of the sink's record, and the fields they name.
    key_cache: record::KeyCache,
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

impl<'a, S: PieceSink> Machine<'a, S> {
    fn new(data: &'a [u8], store: Store, sink: &'a mut S, role: parallel::Role<'a, S>) -> Self {
        Self {
            cur: Cursor::new(data),
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
            key_cache: [record::CachedKey::EMPTY; record::KEY_CACHE],
            next_stop: usize::MAX,
            role,
            pieces_taken: 0,
        }
    }

    fn err(&self, message: impl Into<String>) -> Error {
        self.cur.err(message)
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
        if index >= self.store.memo.len() && index > self.cur.data.len() {
            return Err(self.err(format!(
                "memo index {index} is beyond anything a pickle of {} bytes can have stored",
                self.cur.data.len()
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
    #[inline(always)]
    pub(super) fn memo_value(&mut self, index: usize) -> Option<Value> {
        // The common case inline; the rest (parts taken in, earlier pieces) out of the way.
        match self.store.memo.own(index) {
            Some(value) => Some(value),
            None => self.memo_value_elsewhere(index),
        }
    }

    #[inline(never)]
    fn memo_value_elsewhere(&mut self, index: usize) -> Option<Value> {
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
        let total = self.cur.data.len() as u64;
        let mut next_report = PROGRESS_STEP;
        loop {
            if self.cur.pos >= next_report {
                next_report = self.cur.pos + PROGRESS_STEP;
                if let parallel::Role::Piece(piece) = &mut self.role
                    && let Some((start, end)) = piece.take_touched()
                {
                    progress.release(start, end);
                }
                if !progress.update(self.cur.pos as u64, total) {
                    return Err(Error::Cancelled);
                }
            }
            if self.cur.pos >= self.next_stop {
                if let Some(value) = self.stop_here()? {
                    return Ok(value);
                }
                continue;
            }
            self.cur.op_pos = self.cur.pos;
            let Some(&op) = self.cur.data.get(self.cur.pos) else {
                return Err(self.err("the file ends before the pickle's STOP opcode (truncated?)"));
            };
            self.cur.pos += 1;
            match op {
                PROTO => {
                    let protocol = self.cur.u8()?;
                    if protocol > 5 {
                        return Err(self.err(format!("unsupported pickle protocol {protocol}")));
                    }
                }
                FRAME => {
                    // FRAME: a length hint for buffered readers; the whole file is in memory.
                    let len = self.cur.u64()?;
                    self.cur.len_arg(len)?;
                }
                STOP => {
                    let value = self.pop()?;
                    progress.update(total, total);
                    return Ok(value);
                }
                MARK => {
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
                POP => {
                    self.pop()?;
                }
                POP_MARK => {
                    let mark = self.pop_mark()?;
                    self.stack.truncate(mark.stack_len);
                }
                DUP => {
                    let top = self.top()?;
                    self.push(top);
                }
                GLOBAL | STACK_GLOBAL | REDUCE | BUILD | INST | OBJ | NEWOBJ | NEWOBJ_EX | EXT1 | EXT2 | EXT4
                | PERSID | BINPERSID | NEXT_BUFFER | READONLY_BUFFER => {
                    return Err(Error::UnsafePickle { offset: self.cur.op_pos as u64, opcode: refused_name(op) });
                }
                NONE | NEWTRUE | NEWFALSE | BININT | BININT1 | BININT2 | LONG1 | LONG4 | INT | LONG | BINFLOAT
                | FLOAT | SHORT_BINUNICODE | BINUNICODE | BINUNICODE8 | UNICODE | STRING | BINSTRING
                | SHORT_BINSTRING | BINBYTES | SHORT_BINBYTES | BINBYTES8 | BYTEARRAY8 => self.scalar(op)?,
                EMPTY_LIST
                | EMPTY_DICT
                | EMPTY_TUPLE
                | EMPTY_SET
                | TUPLE1..=TUPLE3
                | TUPLE
                | LIST
                | DICT
                | FROZENSET
                | APPEND
                | APPENDS
                | ADDITEMS
                | SETITEM
                | SETITEMS => self.container_op(op)?,
                MEMOIZE | BINPUT | LONG_BINPUT | PUT | BINGET | LONG_BINGET | GET => self.memo_op(op)?,
                other => {
                    return Err(self.err(format!("unknown opcode 0x{other:02x} (not a pickle, or corrupt)")));
                }
            }
        }
    }
}

fn parse_index(line: &[u8]) -> Option<usize> {
    std::str::from_utf8(line).ok()?.trim().parse().ok()
}
