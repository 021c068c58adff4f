//! The opcodes that build and fill containers (lists, dicts, tuples, sets, and their marks) and
//! the memo's: the machine's half that is not scalars (`scalars.rs`) or the dispatch (`mod.rs`).

use super::opcodes::{
    ADDITEMS, APPEND, APPENDS, BINGET, BINPUT, DICT, EMPTY_DICT, EMPTY_LIST, EMPTY_SET, EMPTY_TUPLE, FROZENSET, GET,
    LIST, LONG_BINGET, LONG_BINPUT, MEMOIZE, PUT, SETITEM, SETITEMS, TUPLE, TUPLE1, TUPLE3,
};
use super::{ContainerKind, Machine, PICKLER_BATCH, PieceSink, Value, as_stack, convert_items, parse_index};
use crate::error::Result;

impl<S: PieceSink> Machine<'_, S> {
    /// The opcodes that build and fill containers.
    #[inline]
    pub(super) fn container_op(&mut self, op: u8) -> Result<()> {
        match op {
            EMPTY_LIST => {
                let h = self.store.new_container(ContainerKind::List);
                self.push(Value::Container(h));
            }
            EMPTY_DICT => {
                if self.record_fast_path() || self.dict_fast_path()? {
                    return Ok(());
                }
                let h = self.store.new_container(ContainerKind::Dict);
                self.push(Value::Container(h));
            }
            EMPTY_TUPLE => {
                let h = self.store.new_container(ContainerKind::Tuple);
                self.push(Value::Container(h));
            }
            EMPTY_SET => {
                let h = self.store.new_container(ContainerKind::Set);
                self.push(Value::Container(h));
            }
            TUPLE1..=TUPLE3 => {
                let n = usize::from(op - TUPLE1) + 1;
                let floor = self.marks.last().map_or(0, |m| m.stack_len);
                if self.stack.len() < floor + n {
                    return Err(self.err("TUPLE opcode with too few values on the stack"));
                }
                let items: Vec<Value> = self.stack.drain(self.stack.len() - n..).collect();
                let h = self.store.new_container(ContainerKind::Tuple);
                self.store.append(h, &items).map_err(|m| self.err(m))?;
                self.push(Value::Container(h));
            }
            TUPLE | LIST | DICT | FROZENSET => {
                let mark = self.pop_mark()?;
                let mut items: Vec<Value> = self.stack.drain(mark.stack_len..).collect();
                let kind = match op {
                    TUPLE => ContainerKind::Tuple,
                    LIST => ContainerKind::List,
                    DICT => ContainerKind::Dict,
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
            APPEND => {
                let item = self.pop()?;
                let target = self.top()?;
                let handle = self.container_arg(target, ContainerKind::List, "APPEND")?;
                let mut items = [item];
                convert_items(self.sink, &mut self.store, &mut items).map_err(|m| self.err(m))?;
                self.append_to(handle, &items)?;
            }
            APPENDS => self.appends()?,
            ADDITEMS => {
                let mark = self.pop_mark()?;
                let Some(&target) = mark.stack_len.checked_sub(1).and_then(|i| self.stack.get(i)) else {
                    return Err(self.err("ADDITEMS without a set below its MARK"));
                };
                let handle = self.container_arg(target, ContainerKind::Set, "ADDITEMS")?;
                let items: Vec<Value> = self.stack.drain(mark.stack_len..).collect();
                self.append_to(handle, &items)?;
            }
            SETITEM => {
                let value = self.pop()?;
                let key = self.pop()?;
                let target = self.top()?;
                let handle = self.container_arg(target, ContainerKind::Dict, "SETITEM")?;
                self.append_to(handle, &[key, value])?;
            }
            SETITEMS => {
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
    pub(super) fn memo_op(&mut self, op: u8) -> Result<()> {
        match op {
            MEMOIZE => {
                let index = self.store.memo.len();
                self.memo_put(index)?;
            }
            BINPUT => {
                let index = self.cur.u8()? as usize;
                self.memo_put(index)?;
            }
            LONG_BINPUT => {
                let index = self.cur.u32()? as usize;
                self.memo_put(index)?;
            }
            PUT => {
                let index = parse_index(self.cur.line()?).ok_or_else(|| self.err("PUT index is not a number"))?;
                self.memo_put(index)?;
            }
            BINGET => {
                let index = self.cur.u8()? as usize;
                self.memo_get(index)?;
            }
            LONG_BINGET => {
                let index = self.cur.u32()? as usize;
                self.memo_get(index)?;
            }
            GET => {
                let index = parse_index(self.cur.line()?).ok_or_else(|| self.err("GET index is not a number"))?;
                self.memo_get(index)?;
            }
            _ => return Err(self.err(format!("internal: opcode 0x{op:02x} dispatched to the wrong group"))),
        }
        Ok(())
    }
}
