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
    /// The stretch as it was walked: the rest of the frame it starts in, then each frame's
    /// body (two at a time, side by side), in order.
    parts: Vec<Part>,
    /// Where the values `0, SAMPLE, 2 * SAMPLE, ...` of each part (counted from the part's
    /// first) were built.
    built_at: Vec<usize>,
}

/// A part of a counted stretch that stores something.
#[derive(Clone, Copy, Debug)]
struct Part {
    /// The stretch's index of its first stored value.
    first: usize,
    /// Where its samples start in [`Counted::built_at`].
    sample: usize,
}

impl Counted {
    /// Appends a part walked to its end.
    fn push(&mut self, lane: Lane) {
        if lane.count > 0 {
            self.parts.push(Part { first: self.count, sample: self.built_at.len() });
            self.built_at.extend_from_slice(&lane.samples);
            self.count += lane.count;
        }
    }

    /// Where the walk to the value stored at `local` of the stretch starts (where a sample
    /// before it was built), and how many stores it passes before that value's.
    fn sample(&self, local: usize) -> Option<(usize, usize)> {
        if local >= self.count {
            return None;
        }
        let part = *self.parts.get(self.parts.partition_point(|p| p.first <= local).checked_sub(1)?)?;
        let within = local - part.first;
        Some((*self.built_at.get(part.sample + within / SAMPLE)?, within % SAMPLE))
    }
}

/// One walk through a part of a stretch: where it is, where it ends, where the last value was
/// built, the stores so far, and where every [`SAMPLE`]th stored value was built.
struct Lane {
    p: usize,
    end: usize,
    built: usize,
    count: usize,
    samples: Vec<usize>,
}

impl Lane {
    fn new(from: usize, end: usize, built: usize) -> Self {
        Self { p: from, end, built, count: 0, samples: Vec::new() }
    }

    /// Walks over one opcode; `None` where the count cannot go on (an explicit memo index, an
    /// opcode pieces do not take, the end of the file).
    #[inline(always)]
    fn step(&mut self, data: &[u8]) -> Option<()> {
        match *data.get(self.p)? {
            MEMOIZE => {
                if self.count.is_multiple_of(SAMPLE) {
                    self.samples.push(self.built);
                }
                self.count += 1;
            }
            // An explicit index may reuse one: the count would not say what is where.
            BINPUT | LONG_BINPUT => return None,
            _ => self.built = self.p,
        }
        self.p = next_op(data, self.p)?;
        Some(())
    }

    /// Walks to the part's end, which must fall between two opcodes.
    fn finish(&mut self, data: &[u8]) -> Option<()> {
        while self.p < self.end {
            self.step(data)?;
        }
        (self.p == self.end).then_some(())
    }
}

/// The body of the frame whose `FRAME` opcode is at `q`, up to `end` at most: `None` where
/// there is no `FRAME` there.
fn frame_body(data: &[u8], q: usize, end: usize) -> Option<Lane> {
    if q >= end || data.get(q) != Some(&FRAME) {
        return None;
    }
    let b = data.get(q + 1..q + 9)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    let to = (q + 9).checked_add(usize::try_from(u64::from_le_bytes(a)).ok()?)?.min(end);
    // The `FRAME` opcode is what was built last before the body.
    Some(Lane::new(q + 9, to, q))
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
///
/// A protocol 4 file is cut into frames, and an opcode never runs past its frame's end, so the
/// bodies of two frames are walked side by side: each walk is a chain of dependent loads (an
/// opcode, its length, the next opcode), and two chains keep the core busier than one (1.7 to
/// 1.85 times the stores counted per second, docs/BENCHMARKS.md). Where the file is not framed
/// from some point on, the rest is walked alone.
pub(super) fn count(data: &[u8], start: usize, end: usize, go_on: impl Fn(usize) -> bool) -> Option<Counted> {
    let mut counted = Counted::default();
    let mut next_check = start + CHECK_BYTES;
    // The rest of the frame the stretch starts in.
    let mut lane = Lane::new(start, end, start);
    while lane.p < end && data.get(lane.p) != Some(&FRAME) {
        lane.step(data)?;
    }
    let (mut q, mut built) = (lane.p, lane.built);
    counted.push(lane);
    while q < end {
        let Some(mut a) = frame_body(data, q, end) else {
            // Not framed from here on.
            let mut rest = Lane::new(q, end, built);
            rest.finish(data)?;
            counted.push(rest);
            break;
        };
        let mut b = frame_body(data, a.end, end);
        if let Some(b) = b.as_mut() {
            while a.p < a.end && b.p < b.end {
                a.step(data)?;
                b.step(data)?;
            }
            b.finish(data)?;
        }
        a.finish(data)?;
        (q, built) = b.as_ref().map_or((a.end, a.built), |b| (b.end, b.built));
        counted.push(a);
        if let Some(b) = b {
            counted.push(b);
        }
        if q >= next_check {
            next_check = q + CHECK_BYTES;
            if !go_on(q) {
                return None;
            }
        }
    }
    (q == end).then_some(counted)
}

impl Earlier {
    /// Where the walk to the value stored at `index` starts (where a sample before it was
    /// built), and how many stores it passes before that value's.
    fn sample(&self, index: usize) -> Option<(usize, usize)> {
        let k = self.stretches.partition_point(|s| s.base <= index).checked_sub(1)?;
        let stretch = self.stretches.get(k)?;
        stretch.sample(index.checked_sub(stretch.base)?)
    }

    /// Where the walk to the value stored at `index` starts.
    pub(super) fn sample_at(&self, index: usize) -> Option<usize> {
        self.sample(index).map(|(at, _)| at)
    }

    /// Where the value stored at `index` was built.
    pub(super) fn built_at(&self, data: &[u8], index: usize) -> Option<usize> {
        let (mut p, mut left) = self.sample(index)?;
        let mut built = p;
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

#[cfg(test)]
mod tests {
    use super::{Counted, Earlier, batch_boundary, count, frame_after, next_op};
    use crate::import::pickle::opcodes::{BINPUT, LONG_BINPUT, MEMOIZE};

    /// Where each value stored from `start` to `end` was built, walking one opcode after
    /// another: what the count's samples must lead to.
    fn built_one_by_one(data: &[u8], start: usize, end: usize) -> Option<Vec<usize>> {
        let (mut p, mut built, mut all) = (start, start, Vec::new());
        while p < end {
            match data[p] {
                MEMOIZE => all.push(built),
                BINPUT | LONG_BINPUT => return None,
                _ => built = p,
            }
            p = next_op(data, p)?;
        }
        (p == end).then_some(all)
    }

    #[test]
    fn frames_walked_two_at_a_time_count_what_one_walk_counts() {
        let root = std::env::var_os("CARGO_MANIFEST_DIR")
            .map_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf(), std::path::PathBuf::from);
        let dir = root.join("../../shared/fixtures/pytorch-snapshots");
        let mut stretches = 0;
        for entry in std::fs::read_dir(&dir).expect("the shared fixtures") {
            let data = std::fs::read(entry.expect("an entry").path()).expect("a fixture");
            // Cuts where the pieces would make them, and the file's end.
            let mut cuts: Vec<usize> = (1..6)
                .filter_map(|k| batch_boundary(&data, frame_after(&data, data.len() * k / 6)?))
                .chain([data.len()])
                .collect();
            cuts.dedup();
            // From the start to each cut, and from each cut to the next (starting inside a frame).
            let mut pairs: Vec<(usize, usize)> = cuts.iter().map(|&c| (0, c)).collect();
            pairs.extend(cuts.windows(2).map(|w| (w[0], w[1])));
            for (start, end) in pairs {
                let Some(expected) = built_one_by_one(&data, start, end) else { continue };
                let counted = count(&data, start, end, |_| true).expect("counted");
                assert_eq!(counted.count, expected.len(), "{start}..{end}");
                let earlier = Earlier { stretches: vec![Counted { base: 100, ..counted }] };
                for (i, &at) in expected.iter().enumerate() {
                    assert_eq!(earlier.built_at(&data, 100 + i), Some(at), "value {i} of {start}..{end}");
                    assert!(earlier.sample_at(100 + i).is_some_and(|s| s <= at));
                }
                assert_eq!(earlier.built_at(&data, 100 + expected.len()), None);
                assert_eq!(earlier.built_at(&data, 99), None);
                stretches += 1;
            }
        }
        assert!(stretches >= 10, "only {stretches} stretches counted");
    }
}
