//! What a timeline keeps of its points' times and bytes: every point's (a timeline that outlives
//! its trace, or one of counters), or the state every block, the rest replayed from the events.

use std::sync::Arc;

use vramscope_trace_format::Trace;

use super::BLOCK;

/// Where the points' times, allocated and requested bytes come from.
#[derive(Clone)]
pub(super) enum Points {
    /// Kept for every point.
    Stored { times: Times, allocated: Vec<u64>, requested: Requested },
    /// Replayed from the trace's events when asked for. Point 0 holds at the first event's time;
    /// every later point follows one event, whose time it has.
    Replayed {
        trace: Arc<Trace>,
        first_time_ns: i64,
        /// (allocated, requested) at the first point of each block.
        block_state: Vec<(u64, u64)>,
        len: usize,
    },
}

impl Default for Points {
    fn default() -> Self {
        Self::Stored { times: Times::default(), allocated: Vec::new(), requested: Requested::default() }
    }
}

/// Times of the points, as offsets in nanoseconds from the first point of their block (a block
/// of 64 points nearly always spans less than 4.3 s), or whole once one does not fit: half the
/// memory of a curve of tens of millions of points, most of the time.
#[derive(Clone, Debug)]
pub(super) enum Times {
    Offsets(Vec<u32>),
    Whole(Vec<i64>),
}

impl Default for Times {
    fn default() -> Self {
        Self::Offsets(Vec::new())
    }
}

impl Times {
    pub(super) fn reserve_exact(&mut self, n: usize) {
        match self {
            Self::Offsets(v) => v.reserve_exact(n),
            Self::Whole(v) => v.reserve_exact(n),
        }
    }

    /// Appends the time of the next point, whose block starts at `block_start`.
    pub(super) fn push(&mut self, time_ns: i64, block_start: i64, block_starts: &[i64]) {
        if let Self::Offsets(v) = self {
            match u32::try_from(time_ns.wrapping_sub(block_start)) {
                Ok(offset) if time_ns >= block_start => {
                    v.push(offset);
                    return;
                }
                _ => {
                    let mut whole = Vec::with_capacity(v.capacity());
                    whole.extend(
                        v.iter()
                            .enumerate()
                            .map(|(i, &o)| block_starts.get(i / BLOCK).copied().unwrap_or(0) + i64::from(o)),
                    );
                    *self = Self::Whole(whole);
                }
            }
        }
        if let Self::Whole(v) = self {
            v.push(time_ns);
        }
    }

    pub(super) fn get(&self, i: usize, block_starts: &[i64]) -> Option<i64> {
        match self {
            Self::Offsets(v) => Some(block_starts.get(i / BLOCK)? + i64::from(*v.get(i)?)),
            Self::Whole(v) => v.get(i).copied(),
        }
    }
}

/// Requested bytes of the points, as what the allocator added to them (allocated less requested,
/// which fits 32 bits nearly always), or whole once that does not fit.
#[derive(Clone, Debug)]
pub(super) enum Requested {
    Rounding(Vec<u32>),
    Whole(Vec<u64>),
}

impl Default for Requested {
    fn default() -> Self {
        Self::Rounding(Vec::new())
    }
}

impl Requested {
    pub(super) fn reserve_exact(&mut self, n: usize) {
        match self {
            Self::Rounding(v) => v.reserve_exact(n),
            Self::Whole(v) => v.reserve_exact(n),
        }
    }

    /// Appends the next point's requested bytes, with its allocated bytes; `allocated` holds
    /// every earlier point's.
    pub(super) fn push(&mut self, requested: u64, allocated_now: u64, allocated: &[u64]) {
        if let Self::Rounding(v) = self {
            match allocated_now.checked_sub(requested).and_then(|r| u32::try_from(r).ok()) {
                Some(rounding) => {
                    v.push(rounding);
                    return;
                }
                None => {
                    let mut whole = Vec::with_capacity(v.capacity());
                    whole.extend(v.iter().zip(allocated).map(|(&r, &a)| a - u64::from(r)));
                    *self = Self::Whole(whole);
                }
            }
        }
        if let Self::Whole(v) = self {
            v.push(requested);
        }
    }

    pub(super) fn get(&self, i: usize, allocated: &[u64]) -> Option<u64> {
        match self {
            Self::Rounding(v) => Some(allocated.get(i)? - u64::from(*v.get(i)?)),
            Self::Whole(v) => v.get(i).copied(),
        }
    }
}
