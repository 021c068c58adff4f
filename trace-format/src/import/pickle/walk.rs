//! Walking a pickle's opcodes without running them: where the next one starts, where a batch
//! of a list's dicts begins, and how many memo stores a stretch holds (and where the values they
//! store were built). What `parallel.rs` cuts and counts with; several times faster than the
//! machine, since nothing is built.

use super::opcodes::{
    ADDITEMS, APPEND, APPENDS, BINBYTES, BINBYTES8, BINFLOAT, BINGET, BININT, BININT1, BININT2, BINPUT, BINSTRING,
    BINUNICODE, BINUNICODE8, BYTEARRAY8, DICT, DUP, EMPTY_DICT, EMPTY_LIST, EMPTY_SET, EMPTY_TUPLE, FRAME, FROZENSET,
    LIST, LONG_BINGET, LONG_BINPUT, LONG1, LONG4, MARK, MEMOIZE, NEWFALSE, NEWTRUE, NONE, POP, POP_MARK, PROTO,
    SETITEM, SETITEMS, SHORT_BINBYTES, SHORT_BINSTRING, SHORT_BINUNICODE, STOP, TUPLE, TUPLE1, TUPLE2, TUPLE3,
};

/// How far past a cut's frame a batch boundary is looked for.
pub(super) const SEARCH_BYTES: usize = 4 << 20;
/// Every this many stored values, where the value was built is noted.
const SAMPLE: usize = 64;
/// How often the counting and the pieces check whether to stop, and hand back the file's
/// pages behind them.
pub(super) const CHECK_BYTES: usize = 4 << 20;

/// The stores counted in one stretch of the file.
#[derive(Clone, Debug, Default)]
pub(super) struct Counted {
    /// The first memo index of the stretch.
    pub(super) base: usize,
    pub(super) count: usize,
    /// Where the values `0, SAMPLE, 2 * SAMPLE, ...` of the stretch were built.
    built_at: Vec<usize>,
}

/// Where the values stored before a piece were built.
pub(super) struct Earlier {
    pub(super) stretches: Vec<Counted>,
}

/// Bytes of argument after an opcode, `VAR` when its length is read from it, `NO` when a piece
/// cannot take the opcode (text arguments, explicit memo indices, code).
const VAR: u8 = 0xfe;
const NO: u8 = 0xff;

const fn argument_bytes() -> [u8; 256] {
    let mut table = [NO; 256];
    let fixed: [(u8, u8); 37] = [
        (PROTO, 1),
        (FRAME, 8),
        (MARK, 0),
        (STOP, 0),
        (POP, 0),
        (POP_MARK, 0),
        (DUP, 0),
        (NONE, 0),
        (NEWTRUE, 0),
        (NEWFALSE, 0),
        (BININT, 4),
        (BININT1, 1),
        (BININT2, 2),
        (BINFLOAT, 8),
        (EMPTY_LIST, 0),
        (EMPTY_DICT, 0),
        (EMPTY_TUPLE, 0),
        (EMPTY_SET, 0),
        (TUPLE1, 0),
        (TUPLE2, 0),
        (TUPLE3, 0),
        (TUPLE, 0),
        (LIST, 0),
        (DICT, 0),
        (FROZENSET, 0),
        (APPEND, 0),
        (APPENDS, 0),
        (ADDITEMS, 0),
        (SETITEM, 0),
        (SETITEMS, 0),
        (MEMOIZE, 0),
        (BINGET, 1),
        (LONG_BINGET, 4),
        (LONG1, VAR),
        (LONG4, VAR),
        (SHORT_BINUNICODE, VAR),
        (BINUNICODE, VAR),
    ];
    let mut i = 0;
    while i < fixed.len() {
        table[fixed[i].0 as usize] = fixed[i].1;
        i += 1;
    }
    let more_var = [BINUNICODE8, BINSTRING, SHORT_BINSTRING, BINBYTES, SHORT_BINBYTES, BINBYTES8, BYTEARRAY8];
    let mut i = 0;
    while i < more_var.len() {
        table[more_var[i] as usize] = VAR;
        i += 1;
    }
    table
}

static ARGUMENT_BYTES: [u8; 256] = argument_bytes();

/// The position of the opcode after the one at `p`, or `None` for an opcode pieces do not take
/// or one that runs past the end.
#[inline]
pub(super) fn next_op(data: &[u8], p: usize) -> Option<usize> {
    let op = *data.get(p)?;
    let fixed = ARGUMENT_BYTES[op as usize];
    let end = if fixed < VAR {
        p + 1 + fixed as usize
    } else if fixed == VAR {
        let (width, len) = match op {
            LONG1 | SHORT_BINUNICODE | SHORT_BINSTRING | SHORT_BINBYTES => (1, u64::from(*data.get(p + 1)?)),
            LONG4 | BINUNICODE | BINSTRING | BINBYTES => {
                let b = data.get(p + 1..p + 5)?;
                (4, u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])))
            }
            _ => {
                let b = data.get(p + 1..p + 9)?;
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                (8, u64::from_le_bytes(a))
            }
        };
        (p + 1 + width).checked_add(usize::try_from(len).ok()?)?
    } else {
        return None;
    };
    (end <= data.len()).then_some(end)
}

/// The start of the first `FRAME` at or after `target`: a `FRAME` opcode whose length leads to
/// two more (or to the end). Found near the target alone, not by following every frame from the
/// start, which on a file not yet in the page cache is a random read per 64 KiB. A match that is
/// no frame costs nothing but the piece: the count before it walks opcodes from a known
/// boundary and must land on the cut exactly.
pub(super) fn frame_after(data: &[u8], target: usize) -> Option<usize> {
    let header = |q: usize| -> Option<usize> {
        if data.get(q) != Some(&FRAME) {
            return None;
        }
        let b = data.get(q + 1..q + 9)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        let len = usize::try_from(u64::from_le_bytes(a)).ok()?;
        (1..=SEARCH_BYTES).contains(&len).then_some(q + 9 + len)
    };
    let end = target.saturating_add(SEARCH_BYTES).min(data.len());
    (target..end)
        .find(|&q| {
            let Some(next) = header(q) else { return false };
            if next >= data.len() {
                return next == data.len();
            }
            header(next).is_some_and(|after| after >= data.len() || header(after).is_some())
        })
        .map(|q| q + 9)
}

/// The first `MARK` of a batch of dicts appended to a list (`APPENDS MARK EMPTY_DICT MEMOIZE`)
/// after the opcode boundary `from`.
pub(super) fn batch_boundary(data: &[u8], from: usize) -> Option<usize> {
    let mut p = from;
    while p < from + SEARCH_BYTES {
        if data.get(p) == Some(&APPENDS) && data.get(p + 1..p + 4) == Some(&[MARK, EMPTY_DICT, MEMOIZE]) {
            return Some(p + 1);
        }
        p = next_op(data, p)?;
    }
    None
}

/// Counts the memo stores from `start` to `end` (both opcode boundaries).
pub(super) fn count(data: &[u8], start: usize, end: usize, go_on: impl Fn(usize) -> bool) -> Option<Counted> {
    let mut counted = Counted::default();
    let (mut p, mut built) = (start, start);
    let mut next_check = start + CHECK_BYTES;
    while p < end {
        match data.get(p).copied() {
            Some(MEMOIZE) => {
                if counted.count.is_multiple_of(SAMPLE) {
                    counted.built_at.push(built);
                }
                counted.count += 1;
            }
            // An explicit index may reuse one: the count would not say what is where.
            Some(BINPUT | LONG_BINPUT) => return None,
            _ => built = p,
        }
        p = next_op(data, p)?;
        if p >= next_check {
            next_check = p + CHECK_BYTES;
            if !go_on(p) {
                return None;
            }
        }
    }
    (p == end).then_some(counted)
}

impl Earlier {
    /// Where the walk to the value stored at `index` starts (the sample before it).
    pub(super) fn sample_at(&self, index: usize) -> Option<usize> {
        let k = self.stretches.partition_point(|s| s.base <= index).checked_sub(1)?;
        let stretch = self.stretches.get(k)?;
        stretch.built_at.get(index.checked_sub(stretch.base)? / SAMPLE).copied()
    }

    /// Where the value stored at `index` was built.
    pub(super) fn built_at(&self, data: &[u8], index: usize) -> Option<usize> {
        let k = self.stretches.partition_point(|s| s.base <= index).checked_sub(1)?;
        let stretch = self.stretches.get(k)?;
        let local = index - stretch.base;
        if local >= stretch.count {
            return None;
        }
        let sample = local / SAMPLE;
        let mut p = *stretch.built_at.get(sample)?;
        let mut built = p;
        let mut left = local - sample * SAMPLE;
        loop {
            if data.get(p) == Some(&MEMOIZE) {
                if left == 0 {
                    return Some(built);
                }
                left -= 1;
            } else {
                built = p;
            }
            p = next_op(data, p)?;
        }
    }
}
