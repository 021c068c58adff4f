//! The fastest path, for the dict a snapshot holds millions of: a record whose keys the sink
//! names in advance (a trace entry). Its keys are memo references (a key is pickled once, then
//! referred to) or, the first time, strings; each value goes straight into the field its key
//! names, read as that field's kind says, without the machine's stack, a list of pairs, or the
//! key looked up again for every dict. Anything else it meets (a key the sink does not name, a
//! value of another kind) gives up, changing nothing, and leaves the dict to `fast.rs`.

use super::fast::memo_index;
use super::opcodes::{
    BINGET, BININT, BININT1, BININT2, BINUNICODE, EMPTY_LIST, LONG_BINGET, LONG1, MARK, NONE, SETITEMS,
    SHORT_BINUNICODE,
};
use super::scalars::long_from_le;
use super::{Machine, PieceSink, Value};
use crate::model::ids::StackId;

/// How many fields a record read by [`Machine::record_fast_path`] has at most.
pub(crate) const FIELDS: usize = 10;

/// A record's fields as read: each key's value, [`Value::Missing`] where the dict lacks the key.
pub(crate) type Fields = [Value; FIELDS];

/// How a field's value is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FieldKind {
    /// A number (or `None`).
    Int,
    /// A string, pickled in place or referred to (or `None`).
    Str,
    /// A list of frames, fresh or referred to (or `None`).
    Stack,
}

/// Keys the machine has found at memo indices, by index modulo this.
pub(super) const KEY_CACHE: usize = 64;

/// A memo index holding a key, and the field it names.
#[derive(Clone, Copy)]
pub(super) struct CachedKey {
    index: u32,
    field: u8,
    kind: FieldKind,
}

impl CachedKey {
    pub(super) const EMPTY: Self = Self { index: u32::MAX, field: 0, kind: FieldKind::Int };
}

/// The key cache of a machine.
pub(super) type KeyCache = [CachedKey; KEY_CACHE];

impl<S: PieceSink> Machine<'_, S> {
    /// At an `EMPTY_DICT`: reads a record the sink names the keys of, pickled as
    /// `EMPTY_DICT <memo> MARK (key value)* SETITEMS` with its first key the sink's field 0.
    /// Anything else restores the memo and leaves `pos` for [`Self::dict_fast_path`]. Returns
    /// whether it applied.
    pub(super) fn record_fast_path(&mut self) -> bool {
        let memo_len = self.store.memo.len();
        match self.scan_record(self.cur.pos) {
            Some((value, end)) => {
                self.push(value);
                self.cur.pos = end;
                true
            }
            None => {
                self.store.memo.truncate(memo_len);
                false
            }
        }
    }

    fn scan_record(&mut self, p: usize) -> Option<(Value, usize)> {
        let data = self.cur.data;
        let mut p = self.memo_op_at(p)?;
        if data.get(p) != Some(&MARK) {
            return None;
        }
        p += 1;
        let slot = self.store.memo.len();
        self.store.memo.push(Value::Missing);
        let mut fields: Fields = [Value::Missing; FIELDS];
        let mut first = true;
        loop {
            let op = *data.get(p)?;
            p += 1;
            let (field, kind) = match op {
                BINGET | LONG_BINGET => {
                    let (index, after) = memo_index(data, op, p)?;
                    p = after;
                    self.key_at(index, slot)?
                }
                SHORT_BINUNICODE | BINUNICODE => {
                    let (key, after) = self.string_memoized(op, p)?;
                    p = after;
                    let Value::Str(id) = key else { return None };
                    self.sink.field_of(id)?
                }
                SETITEMS if !first => break,
                _ => return None,
            };
            if first && field != 0 {
                return None;
            }
            first = false;
            let op = *data.get(p)?;
            p += 1;
            // Each value is written where it goes: built elsewhere and copied, the two halves of a
            // `Value` would be read back as one before they are stored (a stall each time).
            let dest = fields.get_mut(usize::from(field))?;
            match (kind, op) {
                (_, NONE) => *dest = Value::None,
                (FieldKind::Int, BININT1) => {
                    let v = *data.get(p)?;
                    p += 1;
                    *dest = Value::Int(i64::from(v));
                }
                (FieldKind::Int, BININT2) => {
                    let b = data.get(p..p + 2)?;
                    p += 2;
                    *dest = Value::Int(i64::from(u16::from_le_bytes([b[0], b[1]])));
                }
                (FieldKind::Int, BININT) => {
                    let b = data.get(p..p + 4)?;
                    p += 4;
                    *dest = Value::Int(i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])));
                }
                (FieldKind::Int, LONG1) => {
                    let n = usize::from(*data.get(p)?);
                    let bytes = data.get(p + 1..p + 1 + n)?;
                    // Addresses and times: 5 to 8 bytes, read as one word where the file has
                    // eight bytes there (not through a call that hands the value back in memory).
                    *dest = match data.get(p + 1..p + 9) {
                        Some(word) if (1..=8).contains(&n) => {
                            let mut a = [0u8; 8];
                            a.copy_from_slice(word);
                            let shift = 64 - 8 * n as u32;
                            Value::Int(((u64::from_le_bytes(a) << shift) as i64) >> shift)
                        }
                        _ => long_from_le(bytes),
                    };
                    p += 1 + n;
                }
                (FieldKind::Str, SHORT_BINUNICODE | BINUNICODE) => {
                    let (value, after) = self.string_memoized(op, p)?;
                    p = after;
                    *dest = value;
                }
                (FieldKind::Str | FieldKind::Stack, BINGET | LONG_BINGET) => {
                    let (index, after) = memo_index(data, op, p)?;
                    p = after;
                    *dest = match (kind, self.memo_value(index)?) {
                        (FieldKind::Str, value @ (Value::Str(_) | Value::None)) => value,
                        (FieldKind::Stack, value @ (Value::Stack(_) | Value::None)) => value,
                        (FieldKind::Stack, Value::Container(h)) => match self.store.container(h).ok()?.resolved {
                            value @ Value::Stack(_) => value,
                            _ => return None,
                        },
                        _ => return None,
                    };
                }
                (FieldKind::Stack, EMPTY_LIST) => {
                    // A fresh list of frames: EMPTY_LIST <memo> MARK (GET | frame dict)* APPENDS.
                    p = self.memo_op_at(p)?;
                    let list_slot = self.store.memo.len();
                    if data.get(p) != Some(&MARK) {
                        // An empty list: the empty stack, as the general path reads it.
                        let value = Value::Stack(StackId(0));
                        self.store.memo.push(value);
                        *dest = value;
                    } else {
                        self.store.memo.push(Value::Missing);
                        let (stack, end) = self.scan_frames(p + 1)?;
                        p = end;
                        let value = Value::Stack(stack);
                        self.store.memo.set_own(list_slot, value);
                        *dest = value;
                    }
                }
                _ => return None,
            }
        }
        // Errors are left for the general machine to report with their position.
        let record = self.sink.record_from_fields(&mut self.store, &fields).ok()?;
        self.store.memo.set_own(slot, record);
        Some((record, p))
    }

    /// A string pickled in place, memoized if a memo store follows (as Python's pickler does).
    fn string_memoized(&mut self, op: u8, p: usize) -> Option<(Value, usize)> {
        let (value, mut p) = self.read_string(op, p)?;
        if let Some(after) = self.memo_op_at(p) {
            self.store.memo.push(value);
            p = after;
        }
        Some((value, p))
    }

    /// The field named by the key at memo `index`, from the cache or the memo. Only keys stored
    /// before the dict began (`before`) are cached: what the dict stored itself is forgotten
    /// again if the dict is left to the general path.
    #[inline]
    fn key_at(&mut self, index: usize, before: usize) -> Option<(u8, FieldKind)> {
        let cached = self.key_cache[index % KEY_CACHE];
        if cached.index as usize == index && !self.memo_overwritten {
            return Some((cached.field, cached.kind));
        }
        let Value::Str(id) = self.memo_value(index)? else { return None };
        let (field, kind) = self.sink.field_of(id)?;
        if index < before
            && let Ok(i) = u32::try_from(index)
        {
            self.key_cache[index % KEY_CACHE] = CachedKey { index: i, field, kind };
        }
        Some((field, kind))
    }
}
