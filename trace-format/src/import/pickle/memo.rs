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

use super::store::{RecordKind, Value};
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

/// Values taken in from elsewhere, from index `first`.
struct Part {
    first: usize,
    values: Vec<Value>,
    remap: Option<Arc<Remap>>,
}

/// The memo of one machine.
#[derive(Default)]
pub(crate) struct Memo {
    /// Earlier indices, in order.
    parts: Vec<Part>,
    /// The first index of `values`.
    base: usize,
    values: Vec<Value>,
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
        self.values.reserve(additional);
    }

    #[inline]
    pub(crate) fn push(&mut self, value: Value) {
        self.values.push(value);
    }

    /// Forgets the indices from `len` on (never below the base).
    #[inline]
    pub(crate) fn truncate(&mut self, len: usize) {
        self.values.truncate(len.saturating_sub(self.base));
    }

    pub(crate) fn extend_from_slice(&mut self, values: &[Value]) {
        self.values.extend_from_slice(values);
    }

    /// The values stored from index `from` on, when this memo holds them itself.
    pub(crate) fn own_from(&self, from: usize) -> &[Value] {
        from.checked_sub(self.base).and_then(|i| self.values.get(i..)).unwrap_or(&[])
    }

    /// The value at `index`; `None` when nothing is stored there, or when it is another
    /// machine's (see [`Memo::holds_below_base`]).
    #[inline]
    pub(crate) fn get(&self, index: usize) -> Option<Value> {
        if let Some(i) = index.checked_sub(self.base) {
            return self.values.get(i).copied();
        }
        if !self.overrides.is_empty()
            && let Some(&v) = self.overrides.get(&index)
        {
            return Some(v);
        }
        let k = self.parts.partition_point(|p| p.first <= index).checked_sub(1)?;
        let part = self.parts.get(k)?;
        let value = *part.values.get(index - part.first)?;
        Some(part.remap.as_ref().map_or(value, |r| r.value(value)))
    }

    /// The value at an index this memo holds itself, to change it.
    pub(crate) fn own_mut(&mut self, index: usize) -> Option<&mut Value> {
        let i = index.checked_sub(self.base)?;
        self.values.get_mut(i)
    }

    /// Stores `value` at `index`, growing the memo as needed; returns whether something was
    /// stored there already.
    pub(crate) fn set(&mut self, index: usize, value: Value) -> bool {
        match index.checked_sub(self.base) {
            Some(i) => {
                if i >= self.values.len() {
                    self.values.resize(i + 1, Value::Missing);
                }
                let old = std::mem::replace(&mut self.values[i], value);
                old != Value::Missing
            }
            None => {
                let old = self.get(index);
                self.overrides.insert(index, value);
                old.is_some_and(|v| v != Value::Missing)
            }
        }
    }

    /// The values this memo holds itself (a piece's, to be taken in).
    pub(crate) fn into_own(self) -> Vec<Value> {
        self.values
    }

    /// Takes in a piece's values, which hold the indices from [`Memo::len`] on; this memo's own
    /// indices then continue after them.
    pub(crate) fn take_in(&mut self, values: Vec<Value>, remap: Arc<Remap>) {
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
        let piece = vec![Value::Str(StringId(0)), Value::Record(RecordKind::Entry, 2), Value::Int(7)];
        memo.take_in(piece, Arc::new(remap));
        assert_eq!(memo.len(), 5);
        assert_eq!(memo.get(0), Some(Value::Int(10)));
        assert_eq!(memo.get(1), Some(Value::Str(StringId(1))));
        assert_eq!(memo.get(2), Some(Value::Str(StringId(5))));
        assert_eq!(memo.get(3), Some(Value::Record(RecordKind::Entry, 102)));
        assert_eq!(memo.get(4), Some(Value::Int(7)));
        assert_eq!(memo.get(5), None);
        memo.push(Value::Bool(true));
        assert_eq!(memo.get(5), Some(Value::Bool(true)));
        assert_eq!(memo.own_from(5), &[Value::Bool(true)]);
        // An explicit store into a part taken in overrides it; one beyond the end grows the memo.
        assert!(memo.set(3, Value::None));
        assert_eq!(memo.get(3), Some(Value::None));
        assert!(!memo.set(8, Value::Int(1)));
        assert_eq!((memo.len(), memo.get(7), memo.get(8)), (9, Some(Value::Missing), Some(Value::Int(1))));
        memo.truncate(6);
        assert_eq!(memo.len(), 6);
    }

    #[test]
    fn a_piece_holds_only_its_own_indices() {
        let mut memo = Memo::from_base(1000);
        assert!(!memo.holds_below_base());
        memo.push(Value::Int(1));
        assert_eq!((memo.len(), memo.get(1000), memo.get(999)), (1001, Some(Value::Int(1)), None));
        assert!(memo.own_mut(999).is_none());
        assert_eq!(memo.into_own(), vec![Value::Int(1)]);
    }
}
