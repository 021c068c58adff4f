//! The machine's fast paths for the shapes that make up nearly all of a snapshot: dicts of
//! scalars (frames, trace entries, blocks) and lists of frames. Each scans ahead in the byte
//! stream without the machine's stack and either applies completely or changes nothing, leaving
//! the general machine to run (and to report errors with their position).

use super::opcodes::{
    APPENDS, BINFLOAT, BINGET, BININT, BININT1, BININT2, BINPUT, BINUNICODE, EMPTY_DICT, EMPTY_LIST, LONG_BINGET,
    LONG_BINPUT, LONG1, MARK, MEMOIZE, NEWFALSE, NEWTRUE, NONE, SETITEMS, SHORT_BINUNICODE,
};
use super::scalars::long_from_le;
use super::{ContainerKind, Machine, PICKLER_BATCH, PieceSink, Value};
use crate::error::Result;
use crate::model::ids::StackId;

impl<S: PieceSink> Machine<'_, S> {
    /// The hot path of snapshots: a fresh list filled with memoized frames, pickled as
    /// `MARK (BINGET | LONG_BINGET)* APPENDS`. Scanned here without going through the stack;
    /// anything else leaves `pos` untouched for the general machine. Returns whether it applied.
    pub(super) fn frames_list_fast_path(&mut self) -> Result<bool> {
        let Some(&Value::Container(handle)) = self.stack.last() else { return Ok(false) };
        match self.store.container(handle) {
            Ok(c) if c.kind == ContainerKind::List && c.len == 0 && c.resolved == Value::None => {}
            _ => return Ok(false),
        }
        let memo_len = self.store.memo.len();
        let Some((stack, end)) = self.scan_frames(self.cur.pos) else {
            // Frame dicts scanned before the scan gave up may have memoized values.
            self.store.memo.truncate(memo_len);
            return Ok(false);
        };
        self.store.resolve(handle, Value::Stack(stack)).map_err(|m| self.err(m))?;
        if let Some(top) = self.stack.last_mut() {
            *top = Value::Stack(stack);
        }
        self.cur.pos = end;
        Ok(true)
    }

    /// The other hot path: a dict of scalars (frames, trace entries, blocks), pickled as
    /// `EMPTY_DICT <memo> MARK (key value)* SETITEMS` where every key and value is a memo
    /// reference, a string, a number, `None`/`True`/`False` or a fresh list of frames. The pairs
    /// are collected in a local buffer and handed to the sink in one go, without the stack, the
    /// pool or a container. Anything else restores the memo and leaves `pos` at the `EMPTY_DICT`
    /// for the general machine, which reports errors precisely. Returns whether it applied.
    pub(super) fn dict_fast_path(&mut self) -> Result<bool> {
        let memo_len = self.store.memo.len();
        match self.scan_dict_at(self.cur.pos, true) {
            Some((value, end)) => {
                self.push(value);
                self.cur.pos = end;
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
    pub(super) fn memo_op_at(&mut self, p: usize) -> Option<usize> {
        let next = self.store.memo.len();
        match *self.cur.data.get(p)? {
            MEMOIZE => Some(p + 1),
            BINPUT => {
                self.explicit_memo_index = true;
                (usize::from(*self.cur.data.get(p + 1)?) == next).then_some(p + 2)
            }
            LONG_BINPUT => {
                self.explicit_memo_index = true;
                let b = self.cur.data.get(p + 1..p + 5)?;
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
        let data = self.cur.data;
        let mut p = self.memo_op_at(p)?;
        let slot = self.store.memo.len();
        self.store.memo.push(Value::Missing);
        if data.get(p) != Some(&MARK) {
            return None;
        }
        p += 1;
        loop {
            let op = *data.get(p)?;
            p += 1;
            let value = match op {
                SETITEMS => break,
                BINGET | LONG_BINGET => {
                    let (index, after) = memo_index(data, op, p)?;
                    p = after;
                    match self.memo_value(index)? {
                        Value::Missing => return None,
                        Value::Container(h) => match self.store.container(h).ok()?.resolved {
                            Value::None => Value::Container(h),
                            resolved => resolved,
                        },
                        v => v,
                    }
                }
                SHORT_BINUNICODE | BINUNICODE => {
                    let (value, after) = self.read_string(op, p)?;
                    p = after;
                    value
                }
                BININT1 => {
                    let v = *data.get(p)?;
                    p += 1;
                    Value::Int(i64::from(v))
                }
                BININT2 => {
                    let b = data.get(p..p + 2)?;
                    p += 2;
                    Value::Int(i64::from(u16::from_le_bytes([b[0], b[1]])))
                }
                BININT => {
                    let b = data.get(p..p + 4)?;
                    p += 4;
                    Value::Int(i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])))
                }
                LONG1 => {
                    let n = usize::from(*data.get(p)?);
                    let bytes = data.get(p + 1..p + 1 + n)?;
                    p += 1 + n;
                    long_from_le(bytes)
                }
                BINFLOAT => {
                    let b = data.get(p..p + 8)?;
                    p += 8;
                    let mut a = [0u8; 8];
                    a.copy_from_slice(b);
                    Value::Float(f64::from_be_bytes(a))
                }
                NONE => Value::None,
                NEWTRUE => Value::Bool(true),
                NEWFALSE => Value::Bool(false),
                EMPTY_LIST if top => {
                    // A fresh list of frames: EMPTY_LIST <memo> MARK (GET | frame dict)* APPENDS.
                    p = self.memo_op_at(p)?;
                    let slot = self.store.memo.len();
                    if data.get(p) != Some(&MARK) {
                        // An empty list: the empty stack (no frames recorded), and an empty list
                        // wherever a generic value is read. The memo holds it like any record.
                        let value = Value::Stack(StackId(0));
                        self.store.memo.push(value);
                        self.dict_items.push(value);
                        continue;
                    }
                    self.store.memo.push(Value::Missing);
                    let (stack, end) = self.scan_frames(p + 1)?;
                    p = end;
                    let value = Value::Stack(stack);
                    self.store.memo.set_own(slot, value);
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
        if !pairs.len().is_multiple_of(2) {
            return None;
        }
        // Inside a list being scanned as frames only a frame may convert: a trace entry
        // converted there would be a record that no list holds once the scan gives up.
        let converted = if top {
            self.sink.convert_dict(&mut self.store, pairs)
        } else {
            Ok(self.sink.convert_earlier(&mut self.store, pairs))
        };
        let value = match converted {
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
        self.store.memo.set_own(slot, value);
        Some((value, p))
    }

    /// Reads the string of a `SHORT_BINUNICODE` or `BINUNICODE` whose argument starts at `p`:
    /// its value and the position after it.
    #[inline]
    pub(super) fn read_string(&mut self, op: u8, mut p: usize) -> Option<(Value, usize)> {
        let data = self.cur.data;
        let len = if op == SHORT_BINUNICODE {
            let n = usize::from(*data.get(p)?);
            p += 1;
            n
        } else {
            let b = data.get(p..p + 4)?;
            p += 4;
            u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize
        };
        let bytes = data.get(p..p.checked_add(len)?)?;
        // Snapshots re-emit the same short string (`'N/A'`) in entry after entry.
        let (last_start, last_len, last_id) = self.last_string;
        let id = if last_len == len && data.get(last_start..last_start + last_len) == Some(bytes) {
            last_id
        } else {
            let id = self.store.interner.string_from_utf8(bytes)?;
            self.last_string = (p, len, id);
            id
        };
        Some((Value::Str(id), p + len))
    }

    /// Scans `(BINGET | LONG_BINGET | frame dict)* APPENDS` from `p` (just after the `MARK`)
    /// when every item is a frame; returns the interned stack and the position after `APPENDS`.
    pub(super) fn scan_frames(&mut self, p: usize) -> Option<(StackId, usize)> {
        // Real snapshots repeat the same frame lists as fresh objects: the same run of opcodes,
        // byte for byte (memo references, and fresh frame dicts that memoize their strings with
        // `MEMOIZE`). A run seen before, found by its first bytes and compared whole, is the stack
        // it was then and memoizes the same values, as long as no memo slot was ever overwritten.
        // (Walking the opcodes to find the run's end is a chain of dependent loads; comparing
        // bytes is not.)
        let data = self.cur.data;
        let prefix = data.get(p..(p + RUN_PREFIX).min(data.len()))?;
        let key = run_hash(prefix);
        if !self.memo_overwritten
            && let Some(candidates) = self.runs.get(&key)
        {
            for run in candidates {
                let (start, len) = (run.start as usize, run.len as usize);
                if data.get(p + len) == Some(&APPENDS) && data.get(p..p + len) == self.run_bytes.get(start..start + len)
                {
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
        let len = after - 1 - p;
        let room = self.run_bytes.len() + len <= MAX_RUN_BYTES;
        if worthwhile && room && !self.memo_overwritten && !self.explicit_memo_index {
            let candidates = self.runs.entry(key).or_default();
            if candidates.len() < MAX_RUN_CANDIDATES
                && let Some(bytes) = data.get(p..p + len)
            {
                let first = self.run_memo.len() as u32;
                self.run_memo.extend(self.store.memo.own_from(memo_before));
                let memoized = (first, self.run_memo.len() as u32);
                let start = self.run_bytes.len() as u64;
                self.run_bytes.extend_from_slice(bytes);
                candidates.push(FrameRun { stack, start, len: len as u32, memoized });
            }
        }
        Some((stack, after))
    }

    /// [`Self::scan_frames`] the long way: reads every frame reference (or frame dict).
    fn decode_frames(&mut self, mut p: usize) -> Option<(StackId, usize)> {
        let data = self.cur.data;
        let mut frames = std::mem::take(&mut self.frames);
        frames.clear();
        let result = loop {
            let frame = match *data.get(p)? {
                BINGET => {
                    let index = usize::from(*data.get(p + 1)?);
                    p += 2;
                    self.memo_value(index)
                }
                LONG_BINGET => {
                    let b = data.get(p + 1..p + 5)?;
                    p += 5;
                    self.memo_value(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
                }
                EMPTY_DICT => match self.scan_dict_at(p + 1, false) {
                    Some((value, end)) => {
                        p = end;
                        Some(value)
                    }
                    None => None,
                },
                APPENDS => break Some(()),
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
}

/// The memo index of a `BINGET` or `LONG_BINGET` whose argument starts at `p`, and the position
/// after it.
#[inline]
pub(super) fn memo_index(data: &[u8], op: u8, p: usize) -> Option<(usize, usize)> {
    if op == BINGET {
        Some((usize::from(*data.get(p)?), p + 1))
    } else {
        let b = data.get(p..p + 4)?;
        Some((u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize, p + 4))
    }
}

/// Bytes of a frame run that key the run cache.
const RUN_PREFIX: usize = 64;
/// Runs kept per key (runs sharing their first frames).
const MAX_RUN_CANDIDATES: usize = 64;
/// Bytes of runs kept in all (past this, new runs are decoded and not remembered).
const MAX_RUN_BYTES: usize = 64 << 20;

/// A run of frame opcodes decoded once: its stack, where it is, and what it memoized.
pub(super) struct FrameRun {
    stack: StackId,
    /// Where its bytes are in the machine's `run_bytes`.
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
