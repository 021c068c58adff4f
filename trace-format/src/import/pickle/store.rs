//! Values and containers of the pickle machine: one pool of items, a table of containers with
//! generations (so a stale reference is detected), and the memo.

use super::memo::Memo;
use super::record::{FieldKind, Fields};
pub(crate) use super::value::{ContainerKind, Handle, RecordKind, Value};
use crate::model::ids::StringId;
use crate::model::interner::Interner;

const NO_CHUNK: u32 = u32::MAX;
/// A container that no memo slot holds.
pub(super) const NO_SLOT: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
pub(super) struct Container {
    pub(super) kind: ContainerKind,
    generation: u32,
    pub(super) memo_slot: u32,
    first_chunk: u32,
    last_chunk: u32,
    pub(super) len: u32,
    /// What the container was turned into ([`Value::None`] while it is still plain data).
    pub(super) resolved: Value,
}

/// A run of a container's items: `len` values of the pool from `start`, or, for a run of
/// records, the records `start..start + len` of one kind, which need no pool at all (a
/// snapshot's list of millions of trace entries is one such run).
#[derive(Clone, Copy, Debug)]
pub(super) struct Chunk {
    start: u32,
    len: u32,
    next: u32,
    records: Option<RecordKind>,
}

/// Containers and their items, plus the memo and the string table they refer to.
pub(crate) struct Store {
    pub(super) containers: Vec<Container>,
    pub(super) live_containers: usize,
    pub(super) chunks: Vec<Chunk>,
    pub(super) pool: Vec<Value>,
    pub(super) memo: Memo,
    /// Strings, frames and stacks, shared with the trace being built.
    pub(crate) interner: Interner,
}

impl Store {
    pub(super) fn new(interner: Interner) -> Self {
        Self {
            containers: Vec::new(),
            live_containers: 0,
            chunks: Vec::new(),
            pool: Vec::new(),
            memo: Memo::default(),
            interner,
        }
    }

    pub(super) fn new_container(&mut self, kind: ContainerKind) -> Handle {
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

    pub(super) fn container(&self, handle: Handle) -> Result<&Container, String> {
        match self.containers.get(handle.index as usize) {
            Some(c) if (handle.index as usize) < self.live_containers && c.generation == handle.generation => Ok(c),
            _ => Err("reference to an object that was already consumed (the pickle reuses a \
                      value in a way snapshots never do)"
                .to_owned()),
        }
    }

    pub(super) fn container_mut(&mut self, handle: Handle) -> Result<&mut Container, String> {
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
        if self.memo.own(slot as usize) == Some(Value::Container(handle)) {
            self.memo.set_own(slot as usize, value);
        }
        Ok(())
    }

    pub(super) fn append(&mut self, handle: Handle, items: &[Value]) -> Result<(), String> {
        if items.is_empty() {
            return Ok(());
        }
        let container = *self.container(handle)?;
        if container.resolved != Value::None {
            return Err("an object was changed after it was complete".to_owned());
        }
        let total = container.len as usize + items.len();
        if total > u32::MAX as usize {
            return Err("a container with more than 4 billion items".to_owned());
        }
        let mut rest = items;
        while let Some(&first) = rest.first() {
            let n = match first {
                Value::Record(kind, index) => {
                    let n = rest
                        .iter()
                        .enumerate()
                        .take_while(|&(k, v)| index.checked_add(k as u32).is_some_and(|i| *v == Value::Record(kind, i)))
                        .count();
                    self.append_records(handle, kind, index, n as u32)?;
                    n
                }
                _ => {
                    let n = rest.iter().take_while(|v| !matches!(v, Value::Record(..))).count();
                    self.append_values(handle, rest.get(..n).unwrap_or_default())?;
                    n
                }
            };
            rest = rest.get(n..).unwrap_or_default();
        }
        self.container_mut(handle)?.len = total as u32;
        Ok(())
    }

    /// Appends a new chunk to a container's list of chunks.
    fn push_chunk(&mut self, handle: Handle, chunk: Chunk) -> Result<(), String> {
        let last_chunk = self.container(handle)?.last_chunk;
        let chunk_index = self.chunks.len() as u32;
        self.chunks.push(chunk);
        if let Some(last) = self.chunks.get_mut(last_chunk as usize) {
            last.next = chunk_index;
        }
        let c = self.container_mut(handle)?;
        if c.first_chunk == NO_CHUNK {
            c.first_chunk = chunk_index;
        }
        c.last_chunk = chunk_index;
        Ok(())
    }

    fn append_values(&mut self, handle: Handle, items: &[Value]) -> Result<(), String> {
        let start = self.pool.len();
        if start + items.len() > u32::MAX as usize {
            return Err("more than 4 billion values in containers".to_owned());
        }
        self.pool.extend_from_slice(items);
        let last_chunk = self.container(handle)?.last_chunk;
        match self.chunks.get_mut(last_chunk as usize) {
            Some(c) if c.records.is_none() && (c.start + c.len) as usize == start => c.len += items.len() as u32,
            _ => self.push_chunk(
                handle,
                Chunk { start: start as u32, len: items.len() as u32, next: NO_CHUNK, records: None },
            )?,
        }
        Ok(())
    }

    fn append_records(&mut self, handle: Handle, kind: RecordKind, first: u32, n: u32) -> Result<(), String> {
        let last_chunk = self.container(handle)?.last_chunk;
        match self.chunks.get_mut(last_chunk as usize) {
            Some(c) if c.records == Some(kind) && c.start.checked_add(c.len) == Some(first) => c.len += n,
            _ => self.push_chunk(handle, Chunk { start: first, len: n, next: NO_CHUNK, records: Some(kind) })?,
        }
        Ok(())
    }

    /// Appends the records `first..first + n` of one kind to a list.
    pub(super) fn append_record_run(
        &mut self,
        handle: Handle,
        kind: RecordKind,
        first: u32,
        n: u32,
    ) -> Result<(), String> {
        let container = *self.container(handle)?;
        if container.resolved != Value::None {
            return Err("an object was changed after it was complete".to_owned());
        }
        let total = (container.len as usize).checked_add(n as usize).filter(|&t| t <= u32::MAX as usize);
        let total = total.ok_or("a container with more than 4 billion items")?;
        self.append_records(handle, kind, first, n)?;
        self.container_mut(handle)?.len = total as u32;
        Ok(())
    }

    /// A container that holds one run of records and nothing else: their kind, first index and
    /// number.
    pub(super) fn record_run(&self, handle: Handle) -> Result<(RecordKind, u32, u32), String> {
        let container = self.container(handle)?;
        let chunk = self.chunks.get(container.first_chunk as usize).ok_or("an empty container")?;
        match chunk.records {
            Some(kind) if container.first_chunk == container.last_chunk && chunk.len == container.len => {
                Ok((kind, chunk.start, chunk.len))
            }
            _ => Err("a container of other values".to_owned()),
        }
    }

    /// [`Self::for_each_item`], with each run of records handed over whole as
    /// `(kind, first index, number)` (a list of millions of trace entries is a few runs).
    pub(crate) fn for_each_run(
        &self,
        handle: Handle,
        mut f: impl FnMut(Result<(RecordKind, u32, u32), Value>) -> Result<(), String>,
    ) -> Result<(), String> {
        let container = self.container(handle)?;
        let mut chunk_index = container.first_chunk;
        while let Some(chunk) = self.chunks.get(chunk_index as usize) {
            if let Some(kind) = chunk.records {
                let len = chunk.len.min(u32::MAX - chunk.start);
                if len > 0 {
                    f(Ok((kind, chunk.start, len)))?;
                }
                chunk_index = chunk.next;
                continue;
            }
            let items = self
                .pool
                .get(chunk.start as usize..(chunk.start + chunk.len) as usize)
                .ok_or("internal: chunk out of range")?;
            for &item in items {
                f(Err(item))?;
            }
            chunk_index = chunk.next;
        }
        Ok(())
    }

    /// Calls `f` with each item of a container, in order.
    pub(crate) fn for_each_item(
        &self,
        handle: Handle,
        mut f: impl FnMut(Value) -> Result<(), String>,
    ) -> Result<(), String> {
        self.for_each_run(handle, |items| match items {
            Ok((kind, first, n)) => (first..first + n).try_for_each(|index| f(Value::Record(kind, index))),
            Err(item) => f(item),
        })
    }

    /// The first item of a container, without walking the rest (a list shared by many owners
    /// that each need only its head costs O(1) per owner).
    pub(crate) fn first_item(&self, handle: Handle) -> Result<Option<Value>, String> {
        let container = self.container(handle)?;
        let Some(chunk) = self.chunks.get(container.first_chunk as usize) else { return Ok(None) };
        if chunk.len == 0 {
            return Ok(None);
        }
        Ok(Some(match chunk.records {
            Some(kind) => Value::Record(kind, chunk.start),
            None => *self.pool.get(chunk.start as usize).ok_or("internal: chunk out of range")?,
        }))
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

    /// For the machine's fastest path (`record.rs`): the field a key names in the one record
    /// the sink reads field by field, and how its value is read; `None` for any other key. A
    /// dict is read so when its first key names field 0.
    fn field_of(&self, _key: StringId) -> Option<(u8, FieldKind)> {
        None
    }

    /// Makes the record of a dict read field by field (see [`Sink::field_of`]). An error leaves
    /// the dict to the general path, which reports it: nothing may have been kept.
    fn record_from_fields(&mut self, _store: &mut Store, _fields: &Fields) -> Result<Value, String> {
        Err("this sink reads no record field by field".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_of_records_need_no_pool_and_keep_their_order() {
        let mut store = Store::new(Interner::new());
        let list = store.new_container(ContainerKind::List);
        let other = store.new_container(ContainerKind::List);
        let e = |i| Value::Record(RecordKind::Entry, i);
        let appended: Vec<Vec<Value>> = vec![
            vec![e(0), e(1), e(2)],
            vec![e(3), Value::Int(7), e(4)],
            vec![e(5), e(9), Value::Record(RecordKind::Block, 10), Value::Record(RecordKind::Block, 11)],
        ];
        let mut expected = Vec::new();
        for (i, batch) in appended.iter().enumerate() {
            store.append(list, batch).expect("append");
            // Interleaved appends to another container must not join its runs.
            store.append(other, &[e(100 + i as u32)]).expect("append");
            expected.extend_from_slice(batch);
        }
        assert_eq!(store.items(list).expect("items"), expected);
        assert_eq!(store.len(list).expect("len"), expected.len());
        assert_eq!(store.items(other).expect("items"), vec![e(100), e(101), e(102)]);
        // Only the one plain value went to the pool.
        assert_eq!(store.pool.len(), 1);
    }
}
