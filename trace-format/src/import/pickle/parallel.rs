//! Running a large pickle in pieces, on several cores, with the result of running it in one go.
//!
//! Nearly all of a big snapshot is one list of trace entries, pickled in batches of 1,000:
//! `MARK <entry dict>... APPENDS`. A batch boundary (`APPENDS MARK EMPTY_DICT MEMOIZE`) can be
//! found from any `FRAME` of a protocol 4 pickle, since frames start at opcode boundaries. The
//! file is cut at such boundaries into pieces. The first is run by the ordinary machine; each
//! other piece by a machine of its own, on its own thread, that starts inside a list and stops
//! at the next cut or where the list ends.
//!
//! Memo indices are the one thing a piece cannot know alone: every `MEMOIZE` takes the next one.
//! So before its piece, each thread counts the stores of the stretch before it (walking opcodes
//! is several times faster than running them), noting where every 64th stored value was built.
//! A piece that refers to a value stored before it (the keys, the action names, frames and
//! their lists) reads that value from the file, from where it was built, into its own tables.
//!
//! The machine that runs the whole takes a piece in when it reaches the piece's start in the
//! state the piece assumed (a list on top, the memo as long as counted): the piece's records
//! are appended, its strings, frames and stacks interned again, its memo becomes part of the
//! whole's. Anything a piece cannot do (another opcode, an error, a shape it does not know) only
//! means it is not taken in: the whole runs that stretch itself, and reports any error itself.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, mpsc};

use rustc_hash::FxHashMap;

use super::fast::memo_index;
use super::memo::{Memo, Remap, Slots};
use super::opcodes::{
    APPEND, APPENDS, BINGET, BININT, BININT1, BININT2, BINUNICODE, BINUNICODE8, EMPTY_DICT, EMPTY_LIST, FRAME,
    LONG_BINGET, LONG1, MARK, MEMOIZE, NEWFALSE, NEWTRUE, NONE, PROTO, SETITEMS, SHORT_BINUNICODE,
};
use super::store::{ContainerKind, RecordKind, Sink, Store, Value};
use super::walk::{CHECK_BYTES, Counted, Earlier, batch_boundary, count, frame_after, next_op};
use super::{Loaded, Machine};
use crate::error::Result;
use crate::model::ids::{ContextId, FrameId, StackId, StringId};
use crate::model::interner::{Context, Frame, Interner};
use crate::progress::Progress;

/// Pickles smaller than this run in one go: a piece would not pay for its thread.
const MIN_BYTES: usize = 64 << 20;
/// How much longer the first piece is: the cut after piece `k` of `n` falls at `(k + LEAD) /
/// (n + LEAD)` of the file. Counting a stretch runs at about 2.8 times the parse's speed per
/// byte, so on two cores the second thread finishes with the first when the first piece is
/// 61-66% of the file; 0.8 makes it 64% (with 0.6 the first thread still waited up to 0.17 s
/// for the second on the 36M file, with 0.9 not at all: docs/BENCHMARKS.md).
const LEAD: f64 = 0.8;
/// At most this many pieces.
const MAX_PIECES: usize = 8;
/// How deep a value of an earlier piece may nest (a frame dict in a list of frames).
const MAX_EARLIER_DEPTH: u8 = 4;

/// A sink whose dicts can be converted in pieces and the pieces joined.
pub(crate) trait PieceSink: Sink + Send + Sized {
    /// A sink for a piece, with its keys interned in `interner` first as in the whole's.
    fn for_piece(interner: &mut Interner) -> Self;
    /// Converts a frame dict, and nothing else (no record is made): a dict of an earlier piece
    /// that a piece refers to, or one inside a list being scanned as frames.
    fn convert_earlier(&mut self, store: &mut Store, pairs: &[Value]) -> Option<Value>;
    /// Whether every record the sink made is a trace entry or an external annotation (a piece
    /// that made anything else is not taken in).
    fn only_entries(&self) -> bool;
    /// Number of entry records made.
    fn entry_count(&self) -> u32;
    /// Number of external annotation records made.
    fn external_count(&self) -> u32;
    /// Appends a piece's entries and external annotations, with their ids mapped by `remap` (but
    /// for `entries_from` and `externals_from`); returns the index the first of each now has.
    fn take_in(&mut self, piece: Self, remap: &Remap) -> (u32, u32);
}

/// Where to cut a pickle: the start of each piece after the first.
#[derive(Debug)]
pub(super) struct Plan {
    cuts: Vec<usize>,
}

/// This machine's part in a run.
pub(super) enum Role<'a, S> {
    /// The whole pickle, in one go.
    Alone,
    /// The whole pickle, taking pieces in as it reaches them.
    Whole(Vec<Pending<S>>),
    /// One piece.
    Piece(Piece<'a>),
}

/// A piece that the whole may take in when it reaches `at`.
pub(super) struct Pending<S> {
    at: usize,
    result: mpsc::Receiver<Option<Done<S>>>,
}

/// A piece's machine: where earlier values are, and those read already.
pub(super) struct Piece<'a> {
    earlier: &'a Earlier,
    read: FxHashMap<usize, Value>,
    /// Values of earlier pieces being read, one inside another.
    reading: u8,
    /// The stretch of the file that reading earlier values brought back since the last check
    /// (handed back then: otherwise the pages of every value read stay resident to the end).
    touched: Option<(usize, usize)>,
}

impl Piece<'_> {
    /// The stretch of the file read for earlier values since the last call, widened to the
    /// 64 KiB windows a page fault maps in.
    pub(super) fn take_touched(&mut self) -> Option<(u64, u64)> {
        const AROUND: usize = 64 << 10;
        let (start, end) = self.touched.take()?;
        Some(((start / AROUND * AROUND) as u64, end.div_ceil(AROUND).saturating_mul(AROUND) as u64))
    }
}

/// A piece run to its end.
pub(super) struct Done<S> {
    /// The first memo index it stored to.
    base: usize,
    /// Where it stopped.
    end: usize,
    memo: Slots,
    interner: Interner,
    sink: S,
}

/// Where to cut `data` into `pieces`: as the caller asks, else as `VRAMSCOPE_PICKLE_PIECES` says
/// (a number; `1` runs every pickle in one go), else one piece per core for a pickle large enough
/// to be worth it.
///
/// On two cores the 2.26 GB snapshot of 36M entries opens in the app 2.6 to 2.9 s sooner in
/// pieces (11.4-13.0 s against 14.3-15.6 s). A 565 MB snapshot out of the page cache once read
/// 2.6x slower in pieces: the frame runs were compared against the file's bytes, and the pages
/// handed back behind the parser were read again; they are compared against a copy now, and
/// out of the page cache pieces read it as fast as one go (docs/BENCHMARKS.md).
pub(super) fn plan(data: &[u8], pieces: Option<usize>) -> Option<Plan> {
    let setting = std::env::var("VRAMSCOPE_PICKLE_PIECES").ok();
    let cores = || std::thread::available_parallelism().map_or(1, usize::from);
    let asked = match pieces {
        Some(n) => Some(n),
        None => match setting.as_deref().map(str::trim) {
            Some("auto") | None if data.len() >= MIN_BYTES => Some(cores()),
            Some("auto") | None => None,
            Some(n) => n.parse().ok(),
        },
    };
    let cores = asked?.min(MAX_PIECES);
    if cores < 2 || data.first() != Some(&PROTO) || data.get(1).is_none_or(|&p| p < 4) {
        return None;
    }
    // The first piece is longer: the stretch before each other piece is counted while it runs.
    let mut cuts: Vec<usize> = Vec::new();
    for k in 1..cores {
        let target = (data.len() as f64 * (k as f64 + LEAD) / (cores as f64 + LEAD)) as usize;
        if let Some(frame) = frame_after(data, target)
            && let Some(cut) = batch_boundary(data, frame)
            && cuts.last().is_none_or(|&last| cut > last)
        {
            cuts.push(cut);
        }
    }
    (!cuts.is_empty()).then_some(Plan { cuts })
}

/// Stops counting and pieces once the whole no longer needs them, and hands their pages back.
struct Check<'a> {
    abandon: &'a AtomicBool,
    progress: &'a dyn Progress,
}

impl Check<'_> {
    /// Called every [`CHECK_BYTES`] of a stretch from `start`: hands back the pages read since
    /// the last call (but the last MiB), says whether to go on.
    fn go_on(&self, start: usize, pos: usize) -> bool {
        const KEEP: usize = 1 << 20;
        let from = pos.saturating_sub(CHECK_BYTES + KEEP).max(start);
        self.progress.release(from as u64, pos.saturating_sub(KEEP) as u64);
        !self.abandon.load(Ordering::Relaxed)
    }
}

/// The progress of a piece's machine: checks, never reports.
struct PieceProgress<'a> {
    check: Check<'a>,
    start: usize,
}

impl Progress for PieceProgress<'_> {
    fn update(&self, done: u64, _total: u64) -> bool {
        self.check.go_on(self.start, done as usize)
    }

    fn release(&self, start: u64, end: u64) {
        self.check.progress.release(start, end);
    }
}

/// Runs `data` in pieces as `plan` cuts it.
pub(super) fn load<S: PieceSink>(
    data: &[u8],
    store: Store,
    sink: &mut S,
    progress: &dyn Progress,
    plan: Plan,
) -> Result<Loaded> {
    let pieces = plan.cuts.len();
    let starts: Vec<usize> = std::iter::once(0).chain(plan.cuts.iter().copied()).collect();
    let ends: Vec<usize> = plan.cuts.iter().copied().chain(std::iter::once(data.len())).collect();
    let abandon = AtomicBool::new(false);
    // Each thread counts one stretch, then waits for all the stretches before its piece.
    let counts = Counts { counted: Mutex::new((vec![None; pieces], 0)), all: Condvar::new() };
    std::thread::scope(|scope| {
        let mut pending = Vec::new();
        for piece in 1..=pieces {
            let (sender, result) = mpsc::channel();
            pending.push(Pending { at: starts[piece], result });
            let (starts, ends, counts, abandon) = (&starts, &ends, &counts, &abandon);
            let spawned =
                std::thread::Builder::new().name(format!("vramscope-pickle-{piece}")).spawn_scoped(scope, move || {
                    let check = Check { abandon, progress };
                    // Every thread reports its count, whatever happens while counting.
                    let counted = catch_unwind(AssertUnwindSafe(|| {
                        count(data, starts[piece - 1], starts[piece], |p| check.go_on(starts[piece - 1], p))
                    }))
                    .ok()
                    .flatten();
                    let stretches = counts.report(piece - 1, counted, pieces, abandon);
                    let stretches = stretches.and_then(|counted| stretches_before(&counted, piece));
                    let done = stretches.and_then(|stretches| {
                        let earlier = Earlier { stretches };
                        let base = earlier.stretches.last().map_or(0, |s| s.base + s.count);
                        run_piece::<S>(data, starts[piece], ends[piece], base, &earlier, &check)
                    });
                    // The whole may have finished without this piece.
                    let _ = sender.send(done);
                });
            if spawned.is_err() {
                // A count would be missing: the threads spawned stop waiting, and the whole
                // runs in one go.
                abandon.store(true, Ordering::Relaxed);
                counts.wake();
                pending.clear();
                break;
            }
        }
        let next_stop = pending.first().map_or(usize::MAX, |p| p.at);
        let mut machine = Machine::new(data, store, sink, Role::Whole(pending));
        machine.next_stop = next_stop;
        let result = machine.run(progress);
        abandon.store(true, Ordering::Relaxed);
        counts.wake();
        let Machine { store, role, pieces_taken, .. } = machine;
        drop(role);
        result.map(|root| Loaded { root, store, pieces_taken })
    })
}

/// The counts of the stretches, and how many threads have reported one.
struct Counts {
    counted: Mutex<(Vec<Option<Counted>>, usize)>,
    all: Condvar,
}

impl Counts {
    /// Records stretch `stretch`'s count, then waits for all `threads` to have reported theirs
    /// (or for the whole to give the pieces up); returns every count.
    fn report(
        &self,
        stretch: usize,
        counted: Option<Counted>,
        threads: usize,
        abandon: &AtomicBool,
    ) -> Option<Vec<Option<Counted>>> {
        let mut state = self.counted.lock().ok()?;
        *state.0.get_mut(stretch)? = counted;
        state.1 += 1;
        self.all.notify_all();
        let state = self.all.wait_while(state, |s| s.1 < threads && !abandon.load(Ordering::Relaxed)).ok()?;
        (state.1 == threads).then(|| state.0.clone())
    }

    /// Wakes the threads waiting for counts (to see that the pieces were given up). The lock is
    /// taken first, so that a thread about to wait cannot miss it.
    fn wake(&self) {
        drop(self.counted.lock());
        self.all.notify_all();
    }
}

/// The stretches before piece `piece`, with their bases, if all were counted.
fn stretches_before(counts: &[Option<Counted>], piece: usize) -> Option<Vec<Counted>> {
    let mut stretches = Vec::with_capacity(piece);
    let mut base = 0usize;
    for counted in counts.get(..piece)? {
        let mut counted = counted.clone()?;
        counted.base = base;
        base += counted.count;
        stretches.push(counted);
    }
    Some(stretches)
}

/// Runs one piece: from `start`, inside a list, to `end` or where the list ends.
fn run_piece<S: PieceSink>(
    data: &[u8],
    start: usize,
    end: usize,
    base: usize,
    earlier: &Earlier,
    check: &Check<'_>,
) -> Option<Done<S>> {
    let mut interner = Interner::new();
    let mut sink = S::for_piece(&mut interner);
    let mut store = Store::new(interner);
    store.memo = Memo::from_base(base);
    store.memo.reserve((end - start) / 16);
    let list = store.new_container(ContainerKind::List);
    let role = Role::Piece(Piece { earlier, read: FxHashMap::default(), reading: 0, touched: None });
    let mut machine = Machine::new(data, store, &mut sink, role);
    machine.stack.push(Value::Container(list));
    machine.cur.pos = start;
    machine.next_stop = end;
    let progress = PieceProgress { check: Check { abandon: check.abandon, progress: check.progress }, start };
    let ran = catch_unwind(AssertUnwindSafe(|| machine.run(&progress))).ok()?.is_ok();
    let clean = ran && machine.marks.is_empty() && machine.stack == [Value::Container(list)];
    let stopped = machine.cur.pos;
    let Machine { store, .. } = machine;
    if !clean || !sink.only_entries() {
        return None;
    }
    // The piece's list is one run of records of one kind: entries, or external annotations.
    let run = match (sink.entry_count(), sink.external_count()) {
        (0, 0) => None,
        (entries, 0) => Some((RecordKind::Entry, 0, entries)),
        (0, externals) => Some((RecordKind::External, 0, externals)),
        _ => return None,
    };
    if let Some(run) = run
        && store.record_run(list).ok()? != run
    {
        return None;
    }
    let Store { memo, interner, .. } = store;
    let memo = memo.into_own();
    // What the whole cannot read through a remap: containers of the piece's own pool.
    if memo
        .values()
        .any(|v| matches!(v, Value::Container(_) | Value::Record(RecordKind::Block | RecordKind::Segment, _)))
    {
        return None;
    }
    Some(Done { base, end: stopped, memo, interner, sink })
}

impl<S: PieceSink> Machine<'_, S> {
    /// What to do on reaching `next_stop`: `Some` ends the run (a piece is done).
    pub(super) fn stop_here(&mut self) -> Result<Option<Value>> {
        let pending = match &mut self.role {
            Role::Piece(_) => return Ok(Some(Value::None)),
            Role::Alone => {
                self.next_stop = usize::MAX;
                return Ok(None);
            }
            Role::Whole(pending) => pending,
        };
        if pending.is_empty() {
            self.next_stop = usize::MAX;
            return Ok(None);
        }
        let piece = pending.remove(0);
        self.next_stop = pending.first().map_or(usize::MAX, |p| p.at);
        if self.cur.pos != piece.at {
            // Run past (the cut was not where the whole's opcodes are): the piece is not needed.
            return Ok(None);
        }
        if let Ok(Some(done)) = piece.result.recv() {
            self.take_in(done);
        }
        // A piece that ended at its own end leaves the whole at the next cut.
        while self.next_stop != usize::MAX && self.cur.pos > self.next_stop {
            if let Role::Whole(pending) = &mut self.role {
                pending.remove(0);
                self.next_stop = pending.first().map_or(usize::MAX, |p| p.at);
            }
        }
        Ok(None)
    }

    /// Takes a piece in, if the whole is where the piece began.
    fn take_in(&mut self, done: Done<S>) {
        let Some(&Value::Container(list)) = self.stack.last() else { return };
        let Ok(&container) = self.store.container(list) else { return };
        let (entries, externals) = (done.sink.entry_count(), done.sink.external_count());
        let records = entries.max(externals);
        // The list's items and the sink's records (entries padded to a chunk) stay countable in
        // 32 bits.
        let fits = (container.len as usize).checked_add(records as usize).is_some_and(|n| n <= u32::MAX as usize)
            && (self.sink.entry_count() as usize + entries as usize) < (u32::MAX as usize) - (1 << 17)
            && (self.sink.external_count() as usize + externals as usize) < u32::MAX as usize;
        if container.kind != ContainerKind::List
            || container.resolved != Value::None
            || !fits
            || self.store.memo.len() != done.base
            || self.memo_overwritten
        {
            return;
        }
        let Done { end, memo, interner: piece, sink, .. } = done;
        let whole = &mut self.store.interner;
        let strings: Vec<StringId> = piece.strings().map(|text| whole.string(text)).collect();
        let string = |id: StringId| strings.get(id.index()).copied().unwrap_or(StringId(0));
        let frames: Vec<FrameId> = piece
            .frames()
            .iter()
            .map(|f| whole.frame(Frame { function: string(f.function), file: string(f.file), line: f.line }))
            .collect();
        let mut mapped = Vec::new();
        let stacks: Vec<StackId> = piece
            .stacks()
            .map(|of| {
                mapped.clear();
                mapped.extend(of.iter().map(|f| frames.get(f.index()).copied().unwrap_or(FrameId(0))));
                whole.stack(&mapped)
            })
            .collect();
        let contexts: Vec<ContextId> = piece
            .contexts()
            .iter()
            .map(|c| {
                whole.context(Context {
                    compile_context: string(c.compile_context),
                    user_metadata: string(c.user_metadata),
                })
            })
            .collect();
        let mut remap = Remap { strings, frames, stacks, contexts, entries_from: 0, externals_from: 0 };
        let (entries_from, externals_from) = self.sink.take_in(sink, &remap);
        remap.entries_from = entries_from;
        remap.externals_from = externals_from;
        // A piece made one kind of record or none (checked when it ended).
        let run = if entries > 0 {
            Some((RecordKind::Entry, entries_from, entries))
        } else {
            (externals > 0).then_some((RecordKind::External, externals_from, externals))
        };
        if let Some((kind, from, n)) = run {
            self.touched(list);
            // Cannot fail: the list is open and the count fits (checked above).
            let _ = self.store.append_record_run(list, kind, from, n);
        }
        self.store.memo.take_in(memo, Arc::new(remap));
        self.cur.pos = end;
        self.pieces_taken += 1;
    }

    /// In a piece: after an `APPENDS` that leaves only the piece's list, whether the list goes on.
    pub(super) fn piece_list_may_end(&mut self) {
        if matches!(self.role, Role::Piece(_))
            && self.stack.len() == 1
            && self.cur.data.get(self.cur.pos) != Some(&MARK)
        {
            self.next_stop = self.cur.pos;
        }
    }

    /// In a piece: the value an earlier piece stored at `index`, read from where it was built.
    pub(super) fn earlier_piece_value(&mut self, index: usize) -> Option<Value> {
        let Role::Piece(piece) = &self.role else { return None };
        if let Some(&value) = piece.read.get(&index) {
            return Some(value);
        }
        // A damaged file can make references chase each other: a piece then gives up.
        if piece.reading >= MAX_EARLIER_DEPTH {
            return None;
        }
        let at = piece.earlier.built_at(self.cur.data, index)?;
        self.reading(1);
        let read = self.read_earlier(at, 0);
        self.reading(-1);
        let (value, end) = read?;
        if let Role::Piece(piece) = &mut self.role {
            piece.read.insert(index, value);
            // Where the value was found from: at most a sample's stores before it.
            let from = piece.earlier.sample_at(index).unwrap_or(at).min(at);
            piece.touched = Some(piece.touched.map_or((from, end), |(a, b)| (a.min(from), b.max(end))));
        }
        Some(value)
    }

    fn reading(&mut self, change: i8) {
        if let Role::Piece(piece) = &mut self.role {
            piece.reading = piece.reading.saturating_add_signed(change);
        }
    }

    /// Reads the value built at `p` by an earlier piece: a string, a number, a reference, a frame
    /// dict or a list of frames. Returns it and where it ends (past its `MEMOIZE`).
    fn read_earlier(&mut self, p: usize, depth: u8) -> Option<(Value, usize)> {
        if depth > MAX_EARLIER_DEPTH {
            return None;
        }
        let data = self.cur.data;
        let mut p = p;
        // A frame may begin before any value (the pickler starts them between objects).
        while data.get(p) == Some(&FRAME) {
            p = next_op(data, p)?;
        }
        let op = *data.get(p)?;
        let after = next_op(data, p)?;
        let memoized = |q: usize| if data.get(q) == Some(&MEMOIZE) { q + 1 } else { q };
        let value = match op {
            SHORT_BINUNICODE | BINUNICODE | BINUNICODE8 => {
                let width = match op {
                    SHORT_BINUNICODE => 1,
                    BINUNICODE => 4,
                    _ => 8,
                };
                let bytes = data.get(p + 1 + width..after)?;
                let id = self.store.interner.string_from_utf8(bytes)?;
                return Some((Value::Str(id), memoized(after)));
            }
            BININT1 => Value::Int(i64::from(*data.get(p + 1)?)),
            BININT2 => {
                let b = data.get(p + 1..p + 3)?;
                Value::Int(i64::from(u16::from_le_bytes([b[0], b[1]])))
            }
            BININT => {
                let b = data.get(p + 1..p + 5)?;
                Value::Int(i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])))
            }
            LONG1 => super::scalars::long_from_le(data.get(p + 2..after)?),
            NONE => Value::None,
            NEWTRUE => Value::Bool(true),
            NEWFALSE => Value::Bool(false),
            BINGET | LONG_BINGET => self.memo_value(memo_index(data, op, p + 1)?.0)?,
            EMPTY_DICT => return self.read_earlier_dict(memoized(after), depth),
            EMPTY_LIST => return self.read_earlier_frames(memoized(after), depth),
            _ => return None,
        };
        Some((value, after))
    }

    /// The items of a dict from `p` (`MARK (key value)* SETITEMS`), converted by the sink.
    fn read_earlier_dict(&mut self, mut p: usize, depth: u8) -> Option<(Value, usize)> {
        if self.cur.data.get(p) != Some(&MARK) {
            return None;
        }
        p += 1;
        let mut pairs = Vec::with_capacity(8);
        while self.cur.data.get(p) != Some(&SETITEMS) {
            let (value, next) = self.read_earlier(p, depth + 1)?;
            pairs.push(value);
            p = next;
            if pairs.len() > 64 {
                return None;
            }
        }
        if !pairs.len().is_multiple_of(2) {
            return None;
        }
        let value = self.sink.convert_earlier(&mut self.store, &pairs)?;
        Some((value, p + 1))
    }

    /// The frames of a list from `p`: `MARK frame* APPENDS`, one frame and `APPEND`, or none.
    fn read_earlier_frames(&mut self, p: usize, depth: u8) -> Option<(Value, usize)> {
        let mut frames: Vec<FrameId> = Vec::new();
        let end = if self.cur.data.get(p) == Some(&MARK) {
            let mut q = p + 1;
            while self.cur.data.get(q) != Some(&APPENDS) {
                let (Value::Frame(id), next) = self.read_earlier(q, depth + 1)? else { return None };
                frames.push(id);
                q = next;
                if frames.len() >= super::PICKLER_BATCH {
                    return None;
                }
            }
            q + 1
        } else {
            match self.read_earlier(p, depth + 1) {
                Some((Value::Frame(id), next)) if self.cur.data.get(next) == Some(&APPEND) => {
                    frames.push(id);
                    next + 1
                }
                // An empty list; what follows is not its.
                _ => p,
            }
        };
        let stack = if frames.is_empty() { StackId(0) } else { self.store.interner.stack(&frames) };
        Some((Value::Stack(stack), end))
    }
}
