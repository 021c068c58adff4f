//! Building a long trace of one device on two threads: the first and second halves of its
//! entries turned into events side by side, then the frees of the second half whose allocation
//! is in the first paired with it, then the sizes settled half by half. The result is the
//! one-thread build's (`build.rs`), event for event: a test compares them on every snapshot
//! the piece tests read.

use std::collections::HashMap;
use std::sync::mpsc;

use rustc_hash::FxHashMap;

use super::entries::{ChunkReader, Entries, Entry};
use super::listed::Listed;
use super::settle::{EXACT, UNPAIRED, mark_exact, settle_free, settle_part, settle_waiting};
use crate::model::event::{Event, EventKind};
use crate::model::ids::{DeviceId, StringId};
use crate::model::oom::Oom;
use crate::model::segment::Block;

/// A device with fewer entries is built on one thread: starting a second costs more than it
/// saves.
pub(super) const MIN_ENTRIES: usize = 1 << 18;

/// A removed allocation in the second half's map: the address was touched there, so a free of
/// it later in the half does not look in the first half.
const REMOVED: u32 = u32::MAX - 1;

/// How many devices' events were built in halves in this process (for tests).
#[doc(hidden)]
pub static BUILT_IN_HALVES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Events in each piece of the second half.
const PIECE: usize = 1 << 16;

/// What one half of a device's entries became.
pub(super) struct Half {
    /// Its events: in the first half, one vector with room for the device's; in the second, in
    /// pieces of [`PIECE`] (the last one being filled), so that joining them never holds two
    /// copies whole. The second half's full pieces are handed to the first half's thread as
    /// they are made, when it runs on a thread of its own; `pieces` keeps them otherwise.
    events: Vec<Event>,
    pieces: Vec<Vec<Event>>,
    /// Events pushed in all.
    pushed: usize,
    /// The allocations open at the half's end, by address (their index in the half); in the
    /// second half, [`REMOVED`] where a free removed one.
    live: FxHashMap<u64, u32>,
    /// Frees of the second half that found no allocation there: their index in the half, their
    /// address and whether they complete the free. Paired with the first half's afterwards.
    deferred: Vec<(u32, u64, bool)>,
    /// Requests to free a block whose allocation the half does not hold, not completed since
    /// in the half, by address: their index in the half (as `build.rs`'s pairing keeps them).
    requests: FxHashMap<u64, u32>,
    pub(super) ooms: Vec<Oom>,
    /// `snapshot` and `annotate` entries, and their times, for the caller to make markers of.
    pub(super) markers: Vec<(Entry, i64)>,
    pub(super) unknown: FxHashMap<StringId, usize>,
    in_time_order: bool,
    first_ns: Option<i64>,
    last_ns: i64,
}

/// How a half is read: the entries it covers (positions in the device's list), the time of the
/// entry before it (for entries without one), and whether it is the second half.
struct Span {
    from: usize,
    to: usize,
    last_time_ns: i64,
    second: bool,
}

/// The device's events built in two halves, and what else the entries held (OOMs, markers,
/// unknown actions, in the order one thread meets them), with whether the events are in time
/// order.
pub(super) struct Built {
    pub(super) events: Vec<Event>,
    pub(super) halves: [Half; 2],
    pub(super) in_time_order: bool,
}

/// Builds `listed`'s events on two threads (the caller decides whether it has enough for that,
/// [`MIN_ENTRIES`]); see [`Built`]. `None` when its entries cannot be split between chunks
/// (then nothing was changed). The entries must all be stored (no
/// range), read in increasing order, none of them `annotate` (whose text goes to an earlier
/// allocation). `has_time`: whether the trace has times.
pub(super) fn build(
    entries: &mut Entries,
    listed: &Listed,
    device: DeviceId,
    has_time: bool,
    final_blocks: &FxHashMap<u64, Block>,
) -> Option<Built> {
    let n = listed.len();
    // Indices in a half must stay below the markers `UNPAIRED` and `REMOVED`.
    if n >= (REMOVED as usize) {
        return None;
    }
    // Split at the start of the chunk of the middle entry: each half then owns its chunks.
    let chunk = Entries::chunk_of(listed.get(n / 2)?);
    let below = |k: usize| listed.get(k).is_some_and(|i| Entries::chunk_of(i) < chunk);
    let split = partition(n, below);
    // The entries are in increasing order (the caller checked), so the halves' chunks are apart;
    // checked again at the split, where an entry read by the wrong half would be lost.
    if split == 0 || split >= n || !below(split - 1) || below(split) {
        return None;
    }
    // The time an entry without one takes in the second half: the last before it.
    let last_time_ns = if has_time {
        (0..split).rev().find_map(|k| entries.get(listed.get(k)?)?.time_us).map_or(0, |us| us.saturating_mul(1000))
    } else {
        0
    };
    let (mut first, mut second) = entries.split_readers(chunk)?;
    let spans = [
        Span { from: 0, to: split, last_time_ns: 0, second: false },
        Span { from: split, to: n, last_time_ns, second: true },
    ];
    let [span_a, span_b] = &spans;
    let (a, b) = std::thread::scope(|scope| {
        // The second half's full pieces come through here, for this thread to copy in once its
        // own half is done, while the second half goes on.
        let (sender, full_pieces) = mpsc::channel();
        let second = &mut second;
        let spawned = std::thread::Builder::new()
            .name("vramscope-build".to_owned())
            .spawn_scoped(scope, move || half(second, listed, span_b, device, has_time, Some(&sender)));
        let mut a = half(&mut first, listed, span_a, device, has_time, None);
        let b = match spawned {
            Ok(handle) => {
                // Ends when the second half is done (its sender dropped).
                for piece in full_pieces {
                    a.take_piece(piece, a.pushed);
                }
                Some(handle.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
            }
            // No thread could be started: the second half after the first, on this one.
            Err(_) => None,
        };
        (a, b)
    });
    let b = b.unwrap_or_else(|| half(&mut second, listed, span_b, device, has_time, None));
    BUILT_IN_HALVES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Some(join(a, b, final_blocks))
}

/// The first position in `0..n` where `below` is false (it is true, then false).
fn partition(n: usize, below: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if below(mid) { lo = mid + 1 } else { hi = mid }
    }
    lo
}

/// Turns a half's entries into events, pairing frees with allocations inside the half. The
/// second half's full pieces go to `full_pieces` where given (and it still listens), else they
/// are kept.
fn half(
    reader: &mut ChunkReader<'_>,
    listed: &Listed,
    span: &Span,
    device: DeviceId,
    has_time: bool,
    full_pieces: Option<&mpsc::Sender<Vec<Event>>>,
) -> Half {
    let mut half = Half {
        events: Vec::with_capacity(if span.second { PIECE.min(span.to - span.from) } else { listed.len() }),
        pieces: Vec::new(),
        pushed: 0,
        live: FxHashMap::default(),
        deferred: Vec::new(),
        requests: FxHashMap::default(),
        ooms: Vec::new(),
        markers: Vec::new(),
        unknown: FxHashMap::default(),
        in_time_order: true,
        first_ns: None,
        last_ns: i64::MIN,
    };
    let mut last_time_ns = span.last_time_ns;
    for k in span.from..span.to {
        let Some(entry) = listed.get(k).and_then(|index| reader.get(index)) else { continue };
        let time_ns = match entry.time_us {
            Some(us) => us.saturating_mul(1000),
            None if has_time => last_time_ns,
            None => k as i64,
        };
        last_time_ns = time_ns;
        match entry.action {
            super::entries::Action::Event(kind) => {
                let mut event = entry.event(kind, time_ns, device, 0);
                half.pair(&mut event, span.second);
                half.in_time_order &= time_ns >= half.last_ns;
                half.last_ns = time_ns;
                half.first_ns.get_or_insert(time_ns);
                if span.second && half.events.len() == PIECE {
                    let full = std::mem::replace(&mut half.events, Vec::with_capacity(PIECE));
                    let kept = match full_pieces {
                        Some(to) => to.send(full).err().map(|mpsc::SendError(full)| full),
                        None => Some(full),
                    };
                    half.pieces.extend(kept);
                }
                half.events.push(event);
                half.pushed += 1;
            }
            super::entries::Action::Oom => half.ooms.push(entry.oom(time_ns, device)),
            super::entries::Action::Snapshot | super::entries::Action::Annotate => {
                half.markers.push((entry, time_ns));
            }
            super::entries::Action::Unknown(name) => *half.unknown.entry(name).or_default() += 1,
        }
    }
    half
}

impl Half {
    /// Moves a piece of the second half's events to the end of the first half's (which has room
    /// for them), its frees' allocations moved on by `base`, the first half's length.
    fn take_piece(&mut self, piece: Vec<Event>, base: usize) {
        self.events.extend(piece.into_iter().map(|mut e| {
            if matches!(e.kind, EventKind::FreeRequested | EventKind::FreeCompleted) && e.slack_bytes != UNPAIRED {
                e.slack_bytes += base as u32;
            }
            e
        }));
    }

    /// Notes `event`, about to be pushed, as `build.rs`'s pairing does; in the second half a
    /// free of an address the half never touched is deferred to the first half's allocations.
    fn pair(&mut self, event: &mut Event, second: bool) {
        let index = self.pushed as u32;
        match event.kind {
            EventKind::Alloc => {
                self.live.insert(event.address, index);
            }
            EventKind::FreeRequested | EventKind::FreeCompleted => {
                let completes = event.kind == EventKind::FreeCompleted;
                if completes {
                    if !self.requests.is_empty() {
                        self.requests.remove(&event.address);
                    }
                } else if !matches!(self.live.get(&event.address), Some(&alloc) if alloc != REMOVED) {
                    self.requests.insert(event.address, index);
                }
                event.slack_bytes = match self.live.get(&event.address).copied() {
                    Some(REMOVED) => UNPAIRED,
                    Some(alloc) => {
                        if completes {
                            if second {
                                self.live.insert(event.address, REMOVED);
                            } else {
                                self.live.remove(&event.address);
                            }
                        }
                        alloc
                    }
                    None => {
                        if second {
                            self.deferred.push((index, event.address, completes));
                            if completes {
                                self.live.insert(event.address, REMOVED);
                            }
                        }
                        UNPAIRED
                    }
                };
            }
            _ => {}
        }
    }
}

/// Joins the halves into the device's events (the second's pieces not taken in yet, then its
/// last), pairs the deferred frees, settles the sizes.
fn join(mut a: Half, mut b: Half, final_blocks: &FxHashMap<u64, Block>) -> Built {
    let base = a.pushed;
    let last = std::mem::take(&mut b.events);
    for piece in std::mem::take(&mut b.pieces).into_iter().chain(std::iter::once(last)) {
        a.take_piece(piece, base);
    }
    let mut events = std::mem::take(&mut a.events);
    // The deferred frees, in order, against the first half's allocations still open.
    let mut crossing = Vec::new();
    for &(index, address, completes) in &b.deferred {
        let alloc = if completes { a.live.remove(&address) } else { a.live.get(&address).copied() };
        if let (Some(alloc), Some(free)) = (alloc, events.get_mut(base + index as usize)) {
            free.slack_bytes = alloc;
            crossing.push(base + index as usize);
        }
    }
    // What is open at the end: the second half's, and the first half's where the second never
    // touched the address.
    let mut live: FxHashMap<u64, u32> =
        a.live.iter().filter(|(address, _)| !b.live.contains_key(address)).map(|(&k, &v)| (k, v)).collect();
    live.extend(b.live.iter().filter(|&(_, &i)| i != REMOVED).map(|(&address, &i)| (address, i + base as u32)));
    mark_exact(&mut events, &live, final_blocks);
    let (first, second) = events.split_at_mut(base);
    let settled = std::thread::scope(|scope| {
        let spawned = std::thread::Builder::new()
            .name("vramscope-build".to_owned())
            .spawn_scoped(scope, || settle_part(second, base));
        settle_part(first, 0);
        match spawned {
            Ok(handle) => handle.join().map_or_else(|panic| std::panic::resume_unwind(panic), |()| true),
            Err(_) => false,
        }
    });
    if !settled {
        // No thread could be started: the second half after the first, on this one.
        settle_part(second, base);
    }
    for &i in &crossing {
        let alloc = events.get(events.get(i).map_or(usize::MAX, |e| e.slack_bytes as usize)).copied();
        if let Some(free) = events.get_mut(i) {
            settle_free(free, alloc);
        }
    }
    // Requests to free a block allocated before the trace: the first half's where the second
    // never touched the address, and the second's whose allocation the first half does not hold.
    let mut requests: FxHashMap<u64, u32> = a
        .requests
        .iter()
        .filter(|(address, _)| !b.live.contains_key(address) && !b.requests.contains_key(address))
        .map(|(&k, &v)| (k, v))
        .collect();
    let crossed: rustc_hash::FxHashSet<usize> = crossing.iter().copied().collect();
    requests.extend(
        b.requests
            .iter()
            .filter(|&(_, &i)| !crossed.contains(&(base + i as usize)))
            .map(|(&address, &i)| (address, i + base as u32)),
    );
    settle_waiting(&mut events, &requests, final_blocks);
    debug_assert!(events.iter().all(|e| e.flags & EXACT == 0));
    let in_time_order = a.in_time_order
        && b.in_time_order
        && match (a.first_ns.map(|_| a.last_ns), b.first_ns) {
            (Some(last), Some(first)) => last <= first,
            _ => true,
        };
    Built { events, halves: [a, b], in_time_order }
}

/// Merges unknown actions' counts by their names.
pub(super) fn unknown_names(
    unknown: FxHashMap<StringId, usize>,
    resolve: impl Fn(StringId) -> String,
    into: &mut HashMap<String, usize>,
) {
    for (name, count) in unknown {
        *into.entry(resolve(name)).or_default() += count;
    }
}

#[cfg(test)]
mod tests {
    use super::super::build::build_trace;
    use super::super::entries::{Action, Entries, Entry};
    use super::super::listed::Listed;
    use crate::model::event::EventKind;
    use crate::model::ids::{ContextId, DeviceId, ProcessId, StackId, StringId};
    use crate::model::interner::Interner;
    use crate::model::segment::{Block, BlockState, Segment, SegmentPool};

    fn entry(action: Action, addr: u64, size: u64, time_us: Option<i64>) -> Entry {
        Entry {
            action,
            addr,
            size,
            stream: 0,
            time_us,
            stack: StackId(0),
            context: ContextId(0),
            device_free: None,
            name: StringId(0),
        }
    }

    /// Entries that put on both sides of the split everything it must carry over.
    fn entries(n: u64, unknown: StringId) -> Entries {
        let mut entries = Entries::default();
        let alloc = Action::Event(EventKind::Alloc);
        let (requested, completed) = (Action::Event(EventKind::FreeRequested), Action::Event(EventKind::FreeCompleted));
        let mut time = 1_000i64;
        for i in 0..n {
            time += 3;
            // Across the split (at the middle entry's chunk of 65,536: the third), entries
            // without a time.
            let at = if (131_072 - 5_000..131_072 + 5_000).contains(&i) { None } else { Some(time) };
            // Addresses 0..64 stay allocated across the split; the rest churn.
            let addr = 0x1000 * (i % 4_000);
            let kind = match i % 7 {
                _ if i < 64 => alloc,
                _ if addr < 0x1000 * 64 => requested,
                0 | 3 => alloc,
                1 | 4 => requested,
                2 | 5 => completed,
                _ if i % 2 == 0 => Action::Oom,
                _ if i % 3 == 0 => Action::Snapshot,
                _ => Action::Unknown(unknown),
            };
            entries.push(entry(kind, addr, 1000 + i % 5_000, at));
        }
        // Allocations of the first half freed in the second, and one allocated again there.
        for addr in [0u64, 0x1000, 0x2000] {
            entries.push(entry(requested, addr, 1, Some(time)));
            entries.push(entry(completed, addr, 1, Some(time)));
        }
        entries.push(entry(alloc, 0x2000, 77, Some(time + 1)));
        entries
    }

    #[test]
    fn a_trace_built_in_halves_is_the_trace_built_on_one_thread() {
        let n = 300_000u64;
        let build = |two_threads_from| {
            let mut interner = Interner::new();
            let unknown = interner.string("mystery");
            let entries = entries(n, unknown);
            let mut listed = Listed::default();
            listed.push_run(0, entries.len() as u32);
            // The final state holds some blocks of each half: their sizes are exact.
            let blocks = [0x3000u64, 0x2000, 0x1000 * 3_999].map(|address| Block {
                address,
                size_bytes: 8192,
                requested_bytes: 1,
                state: BlockState::ActiveAllocated,
                stack: StackId(0),
            });
            let segment = Segment {
                device: DeviceId(0),
                process: ProcessId(0),
                address: 0,
                size_bytes: 1 << 30,
                stream: 0,
                pool: SegmentPool::Large,
                pool_id: (0, 0),
                is_expandable: false,
                stack: StackId(0),
                blocks: blocks.to_vec(),
            };
            let mut warnings = Vec::new();
            let trace = build_trace(
                two_threads_from,
                interner,
                vec![segment],
                entries,
                vec![(0, listed)],
                &[],
                serde_json::Value::Null,
                serde_json::Map::new(),
                None,
                &mut warnings,
            )
            .expect("builds");
            (trace, warnings)
        };
        let before = super::BUILT_IN_HALVES.load(std::sync::atomic::Ordering::Relaxed);
        let (one, one_warnings) = build(None);
        let (two, two_warnings) = build(Some(2));
        assert!(super::BUILT_IN_HALVES.load(std::sync::atomic::Ordering::Relaxed) > before);
        assert_eq!(one_warnings, two_warnings);
        assert_eq!(one.ooms, two.ooms);
        assert_eq!(one.annotations, two.annotations);
        assert_eq!(one.events.len(), two.events.len());
        for (i, (a, b)) in one.events.iter().zip(&two.events).enumerate() {
            assert_eq!(a, b, "event {i}");
        }
        // The entries without a time took the time before them, on both sides of the split.
        assert!(one.events.iter().all(|e| e.time_ns > 1_000_000));
        assert!(one.events.iter().any(|e| e.size_bytes == 8192), "no size from the final state");
    }
}
