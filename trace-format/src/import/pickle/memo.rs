//! The pickle's memo: values by index, in parts.
//!
//! A machine that runs the whole pickle keeps one part from index 0. A machine that runs one
//! piece of a pickle (`parallel.rs`) starts at the first index its piece stores; indices below are
//! another machine's and are looked up elsewhere. When a piece is taken into the machine that
//! runs the whole, the piece's values become a part of that machine's memo as they are, read
//! through the piece's [`Remap`] (its strings, frames, stacks and records have ids of its own):
//! nothing is copied.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::value::{RecordKind, Value};
use crate::model::ids::{ContextId, FrameId, StackId, StringId};

/// How a piece's ids map to the ids of the machine that took it in.
#[derive(Debug, Default)]
pub(crate) struct Remap {
    pub(crate) strings: Vec<StringId>,
    pub(crate) frames: Vec<FrameId>,
    pub(crate) stacks: Vec<StackId>,
    pub(crate) contexts: Vec<ContextId>,
    /// The piece's entry records start at this index.
    pub(crate) entries_from: u32,
    /// The piece's external annotation records start at this index.
    pub(crate) externals_from: u32,
}

impl Remap {
    /// A piece's value as the taking machine knows it.
    pub(crate) fn value(&self, value: Value) -> Value {
        match value {
            Value::Str(id) => Value::Str(self.strings.get(id.index()).copied().unwrap_or(StringId(0))),
            Value::Frame(id) => Value::Frame(self.frames.get(id.index()).copied().unwrap_or(FrameId(0))),
            Value::Stack(id) => Value::Stack(self.stacks.get(id.index()).copied().unwrap_or(StackId(0))),
            Value::Record(RecordKind::Entry, i) => {
                Value::Record(RecordKind::Entry, i.saturating_add(self.entries_from))
            }
            Value::Record(RecordKind::External, i) => {
                Value::Record(RecordKind::External, i.saturating_add(self.externals_from))
            }
            other => other,
        }
    }
}

/// Memo values packed 8 bytes each (a [`Value`] takes 16): snapshots memoize more than one
/// object per trace entry, so the memo of a large snapshot is a large part of what its parse
/// holds. A slot's top 4 bits say what it holds; values that need all 64 bits (numbers, bytes,
/// containers, which a pickler seldom memoizes) are kept aside in `wide`, and their slot holds
/// their index there.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Slots {
    slots: Vec<u64>,
    wide: Vec<Value>,
}

const TAG_SHIFT: u32 = 60;
const PAYLOAD: u64 = (1 << TAG_SHIFT) - 1;
const TAG_MISSING: u64 = 0;
const TAG_NONE: u64 = 1;
const TAG_BOOL: u64 = 2;
const TAG_STR: u64 = 3;
const TAG_FRAME: u64 = 4;
const TAG_STACK: u64 = 5;
const TAG_RECORD: u64 = 6;
const TAG_WIDE: u64 = 7;

impl Slots {
    fn pack(&mut self, value: Value) -> u64 {
        let (tag, payload) = match value {
            Value::Missing => (TAG_MISSING, 0),
            Value::None => (TAG_NONE, 0),
            Value::Bool(b) => (TAG_BOOL, u64::from(b)),
            Value::Str(id) => (TAG_STR, u64::from(id.0)),
            Value::Frame(id) => (TAG_FRAME, u64::from(id.0)),
            Value::Stack(id) => (TAG_STACK, u64::from(id.0)),
            Value::Record(kind, index) => (TAG_RECORD, (kind.code() << 32) | u64::from(index)),
            wide => {
                self.wide.push(wide);
                (TAG_WIDE, (self.wide.len() - 1) as u64)
            }
        };
        (tag << TAG_SHIFT) | payload
    }

    #[inline]
    fn unpack(&self, slot: u64) -> Value {
        let payload = slot & PAYLOAD;
        let id = payload as u32;
        match slot >> TAG_SHIFT {
            TAG_NONE => Value::None,
            TAG_BOOL => Value::Bool(payload != 0),
            TAG_STR => Value::Str(StringId(id)),
            TAG_FRAME => Value::Frame(FrameId(id)),
            TAG_STACK => Value::Stack(StackId(id)),
            TAG_RECORD => Value::Record(RecordKind::from_code(payload >> 32), id),
            TAG_WIDE => self.wide.get(payload as usize).copied().unwrap_or(Value::Missing),
            _ => Value::Missing,
        }
    }

    #[inline]
    fn len(&self) -> usize {
        self.slots.len()
    }

    fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    #[inline]
    fn get(&self, i: usize) -> Option<Value> {
        self.slots.get(i).map(|&s| self.unpack(s))
    }

    #[inline]
    fn push(&mut self, value: Value) {
        let slot = self.pack(value);
        self.slots.push(slot);
    }

    fn set(&mut self, i: usize, value: Value) {
        let slot = self.pack(value);
        if let Some(s) = self.slots.get_mut(i) {
            *s = slot;
        }
    }

    /// Every value held, in index order.
    pub(crate) fn values(&self) -> impl Iterator<Item = Value> + '_ {
        self.slots.iter().map(|&s| self.unpack(s))
    }
}

/// Values taken in from elsewhere, from index `first`.
struct Part {
    first: usize,
    values: Slots,
    remap: Option<Arc<Remap>>,
}

/// The memo of one machine.
#[derive(Default)]
pub(crate) struct Memo {
    /// Earlier indices, in order.
    parts: Vec<Part>,
    /// The first index of `values`.
    base: usize,
    values: Slots,
    /// Values stored into `parts` after they were taken in (only an explicit `PUT` does that).
    overrides: FxHashMap<usize, Value>,
}

impl Memo {
    /// A memo whose own indices start at `base` (0 for a whole pickle).
    pub(crate) fn from_base(base: usize) -> Self {
        Self { base, ..Self::default() }
    }

    /// The first index this memo holds itself: indices below are another machine's unless parts
    /// were taken in.
    pub(crate) fn base(&self) -> usize {
        self.base
    }

    /// Whether indices below [`Memo::base`] are held here (taken-in parts, or none at all).
    pub(crate) fn holds_below_base(&self) -> bool {
        self.base == 0 || !self.parts.is_empty()
    }

    /// The next index a `MEMOIZE` stores to.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.base + self.values.len()
    }

    pub(crate) fn reserve(&mut self, additional: usize) {
        self.values.slots.reserve(additional);
    }

    #[inline]
    pub(crate) fn push(&mut self, value: Value) {
        self.values.push(value);
    }

    /// Forgets the indices from `len` on (never below the base).
    #[inline]
    pub(crate) fn truncate(&mut self, len: usize) {
        self.values.slots.truncate(len.saturating_sub(self.base));
    }

    pub(crate) fn extend_from_slice(&mut self, values: &[Value]) {
        for &value in values {
            self.values.push(value);
        }
    }

    /// The values stored from index `from` on, when this memo holds them itself.
    pub(crate) fn own_from(&self, from: usize) -> impl Iterator<Item = Value> + '_ {
        let from = from.checked_sub(self.base).unwrap_or(usize::MAX).min(self.values.len());
        self.values.slots[from..].iter().map(|&s| self.values.unpack(s))
    }

    /// The value at `index`; `None` when nothing is stored there, or when it is another
    /// machine's (see [`Memo::holds_below_base`]).
    #[inline]
    pub(crate) fn get(&self, index: usize) -> Option<Value> {
        if let Some(i) = index.checked_sub(self.base) {
            return self.values.get(i);
        }
        if !self.overrides.is_empty()
            && let Some(&v) = self.overrides.get(&index)
        {
            return Some(v);
        }
        let k = self.parts.partition_point(|p| p.first <= index).checked_sub(1)?;
        let part = self.parts.get(k)?;
        let value = part.values.get(index - part.first)?;
        Some(part.remap.as_ref().map_or(value, |r| r.value(value)))
    }

    /// The value at an index this memo holds itself.
    #[inline]
    pub(crate) fn own(&self, index: usize) -> Option<Value> {
        self.values.get(index.checked_sub(self.base)?)
    }

    /// Replaces the value at an index this memo holds itself (nothing happens at any other).
    pub(crate) fn set_own(&mut self, index: usize, value: Value) {
        if let Some(i) = index.checked_sub(self.base) {
            self.values.set(i, value);
        }
    }

    /// Stores `value` at `index`, growing the memo as needed; returns whether something was
    /// stored there already.
    pub(crate) fn set(&mut self, index: usize, value: Value) -> bool {
        match index.checked_sub(self.base) {
            Some(i) => {
                if i >= self.values.len() {
                    self.values.slots.resize(i + 1, TAG_MISSING << TAG_SHIFT);
                }
                let old = self.values.get(i);
                self.values.set(i, value);
                old.is_some_and(|v| v != Value::Missing)
            }
            None => {
                let old = self.get(index);
                self.overrides.insert(index, value);
                old.is_some_and(|v| v != Value::Missing)
            }
        }
    }

    /// The values this memo holds itself (a piece's, to be taken in).
    pub(crate) fn into_own(self) -> Slots {
        self.values
    }

    /// Takes in a piece's values, which hold the indices from [`Memo::len`] on; this memo's own
    /// indices then continue after them.
    pub(crate) fn take_in(&mut self, values: Slots, remap: Arc<Remap>) {
        let first = self.len();
        let next = first + values.len();
        let own = std::mem::take(&mut self.values);
        if !own.is_empty() {
            self.parts.push(Part { first: self.base, values: own, remap: None });
        }
        self.parts.push(Part { first, values, remap: Some(remap) });
        self.base = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_taken_in_read_through_their_remap_and_own_indices_go_on_after_them() {
        let mut memo = Memo::default();
        memo.push(Value::Int(10));
        memo.push(Value::Str(StringId(1)));
        assert_eq!(memo.len(), 2);
        // A piece of three values whose string 0 is the whole's 5 and entries start at 100.
        let remap = Remap { strings: vec![StringId(5)], entries_from: 100, ..Remap::default() };
        let mut piece = Memo::default();
        for value in [Value::Str(StringId(0)), Value::Record(RecordKind::Entry, 2), Value::Int(7)] {
            piece.push(value);
        }
        memo.take_in(piece.into_own(), Arc::new(remap));
        assert_eq!(memo.len(), 5);
        assert_eq!(memo.get(0), Some(Value::Int(10)));
        assert_eq!(memo.get(1), Some(Value::Str(StringId(1))));
        assert_eq!(memo.get(2), Some(Value::Str(StringId(5))));
        assert_eq!(memo.get(3), Some(Value::Record(RecordKind::Entry, 102)));
        assert_eq!(memo.get(4), Some(Value::Int(7)));
        assert_eq!(memo.get(5), None);
        memo.push(Value::Bool(true));
        assert_eq!(memo.get(5), Some(Value::Bool(true)));
        assert_eq!(memo.own_from(5).collect::<Vec<_>>(), [Value::Bool(true)]);
        // An explicit store into a part taken in overrides it; one beyond the end grows the memo.
        assert!(memo.set(3, Value::None));
        assert_eq!(memo.get(3), Some(Value::None));
        assert!(!memo.set(8, Value::Int(1)));
        assert_eq!((memo.len(), memo.get(7), memo.get(8)), (9, Some(Value::Missing), Some(Value::Int(1))));
        memo.truncate(6);
        assert_eq!(memo.len(), 6);
    }

    #[test]
    fn every_kind_of_value_reads_back_from_its_slot() {
        let handle = {
            let mut store = super::super::store::Store::new(crate::model::interner::Interner::new());
            store.new_container(super::super::ContainerKind::List)
        };
        let values = [
            Value::Missing,
            Value::None,
            Value::Bool(true),
            Value::Bool(false),
            Value::Int(-5),
            Value::Int(i64::MAX),
            Value::UInt(u64::MAX),
            Value::BigInt,
            Value::Float(-0.25),
            Value::Str(StringId(u32::MAX)),
            Value::Bytes(1 << 40),
            Value::Container(handle),
            Value::Frame(FrameId(7)),
            Value::Stack(StackId(u32::MAX)),
            Value::Record(RecordKind::Entry, u32::MAX),
            Value::Record(RecordKind::Block, 1),
            Value::Record(RecordKind::Segment, 2),
            Value::Record(RecordKind::External, 3),
        ];
        let mut memo = Memo::default();
        for value in values {
            memo.push(value);
        }
        for (i, value) in values.iter().enumerate() {
            assert_eq!(memo.get(i), Some(*value), "slot {i}");
        }
        // Replacing a slot, and growing the memo by an explicit store.
        assert!(memo.set(4, Value::Str(StringId(3))));
        assert_eq!(memo.get(4), Some(Value::Str(StringId(3))));
        assert!(!memo.set(20, Value::UInt(1 << 63)));
        assert_eq!((memo.get(19), memo.get(20)), (Some(Value::Missing), Some(Value::UInt(1 << 63))));
        assert_eq!(memo.own_from(18).collect::<Vec<_>>(), [Value::Missing, Value::Missing, Value::UInt(1 << 63)]);
        assert_eq!(memo.own_from(99).count(), 0);
    }

    #[test]
    fn a_piece_holds_only_its_own_indices() {
        let mut memo = Memo::from_base(1000);
        assert!(!memo.holds_below_base());
        memo.push(Value::Int(1));
        assert_eq!((memo.len(), memo.get(1000), memo.get(999)), (1001, Some(Value::Int(1)), None));
        assert!(memo.own(999).is_none());
        assert_eq!(memo.into_own().values().collect::<Vec<_>>(), [Value::Int(1)]);
    }
}
