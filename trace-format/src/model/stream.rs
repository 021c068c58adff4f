//! CUDA streams as 32-bit ids: what an event keeps of its stream.
//!
//! A stream is a raw handle (`cudaStream_t`, a pointer; 0 is the default stream), 64 bits wide,
//! and a program uses a handful of them. Every event names one, so an [`Event`] keeps a 4-byte
//! [`StreamId`] instead: handles below 2^31 are their own id, and the few wide ones (pointers)
//! are numbered in one table shared by every trace of the process. The table holds each distinct
//! wide handle once, so it grows only with handles that occur in some input, and ids compare
//! equal exactly when their handles do, across traces (a recording's ranks, two runs compared,
//! a `.vtrace` read back).
//!
//! [`Event`]: super::event::Event

use std::cell::Cell;
use std::sync::{OnceLock, RwLock};

use rustc_hash::FxHashMap;

/// A CUDA stream as an event keeps it: [`StreamId::of`] a raw handle, [`StreamId::raw`] back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct StreamId(u32);

/// Ids with this bit set index the table of wide handles.
const WIDE: u32 = 1 << 31;

#[derive(Default)]
struct Table {
    handles: Vec<u64>,
    ids: FxHashMap<u64, u32>,
}

fn table() -> &'static RwLock<Table> {
    static TABLE: OnceLock<RwLock<Table>> = OnceLock::new();
    TABLE.get_or_init(RwLock::default)
}

thread_local! {
    /// The last wide handle this thread looked up either way: events come in runs on one stream.
    static LAST: Cell<Option<(u64, u32)>> = const { Cell::new(None) };
}

impl StreamId {
    /// The default stream (handle 0).
    pub const DEFAULT: Self = Self(0);

    /// The id of the stream whose handle is `raw`.
    pub fn of(raw: u64) -> Self {
        if raw < u64::from(WIDE) {
            return Self(raw as u32);
        }
        if let Some((last_raw, last_id)) = LAST.get()
            && last_raw == raw
        {
            return Self(last_id);
        }
        let found = table().read().ok().and_then(|t| t.ids.get(&raw).copied());
        let id = match found {
            Some(id) => id,
            None => {
                let mut t = table().write().unwrap_or_else(std::sync::PoisonError::into_inner);
                let next = t.handles.len() as u32;
                match t.ids.get(&raw) {
                    Some(&id) => id,
                    // 2^31 distinct wide handles would take more than 2^31 events, far past
                    // anything that fits in memory; the last id stands for any beyond.
                    None if next >= WIDE - 1 => u32::MAX,
                    None => {
                        t.handles.push(raw);
                        t.ids.insert(raw, WIDE | next);
                        WIDE | next
                    }
                }
            }
        };
        LAST.set(Some((raw, id)));
        Self(id)
    }

    /// The stream's handle.
    pub fn raw(self) -> u64 {
        if self.0 & WIDE == 0 {
            return u64::from(self.0);
        }
        if let Some((last_raw, last_id)) = LAST.get()
            && last_id == self.0
        {
            return last_raw;
        }
        let raw =
            table().read().ok().and_then(|t| t.handles.get((self.0 & !WIDE) as usize).copied()).unwrap_or(u64::MAX);
        LAST.set(Some((raw, self.0)));
        raw
    }

    /// Whether this is the default stream.
    pub fn is_default(self) -> bool {
        self.0 == 0
    }
}

impl From<u64> for StreamId {
    fn from(raw: u64) -> Self {
        Self::of(raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrow_handles_are_their_own_id_and_wide_ones_round_trip() {
        for raw in [0, 1, 7, (1 << 31) - 1] {
            assert_eq!(StreamId::of(raw).0 as u64, raw);
            assert_eq!(StreamId::of(raw).raw(), raw);
        }
        let wide = [1u64 << 31, 0x5555_0000_1234, 0x7f3a_9c00_0010, u64::MAX - 1, u64::MAX];
        let ids: Vec<StreamId> = wide.iter().map(|&r| StreamId::of(r)).collect();
        for (&raw, &id) in wide.iter().zip(&ids) {
            assert_eq!(id.raw(), raw);
            assert_eq!(StreamId::of(raw), id, "the same handle gets the same id");
        }
        // Looked up in another order, from another thread: the same ids, the same handles.
        let again = std::thread::Builder::new()
            .name("streams".into())
            .spawn(move || wide.iter().rev().map(|&r| (StreamId::of(r), r)).collect::<Vec<_>>())
            .unwrap()
            .join()
            .unwrap();
        for (id, raw) in again {
            assert_eq!(id.raw(), raw);
            assert!(ids.contains(&id));
        }
        assert!(StreamId::of(0).is_default());
        assert!(!StreamId::of(0x5555_0000_1234).is_default());
        assert_ne!(StreamId::of(0x5555_0000_1234), StreamId::of(0x5555_0000_1235));
    }
}
