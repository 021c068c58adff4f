//! The blocks alive from before the recording to its end: which are the model's parameters and
//! its optimizer's state, by the gradients' sizes ([`match_by_gradients`]) or by the optimizer
//! state the recording shows.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap as HashMap;
use vramscope_trace_format::{Category, EventKind, StackId};

use super::{Attributor, Evidence};

/// The blocks alive from before the recording to its end, and those of them whose sizes match
/// the gradients' (or the optimizer state's) one for one.
pub(super) struct Persistent {
    pub(super) alive_throughout: rustc_hash::FxHashSet<u64>,
    pub(super) parameters: rustc_hash::FxHashSet<u64>,
    pub(super) matched: Category,
    /// Blocks named optimizer state by their sizes: the gradients' sizes held once more than
    /// `per_parameter` times among the blocks from before the recording (a parameter and its
    /// optimizer's tensors of each).
    pub(super) state: rustc_hash::FxHashSet<u64>,
    pub(super) per_parameter: u8,
}

/// The blocks of each size from before the recording, with what the tags and rules say of each.
type BeforeBySize = BTreeMap<u64, Vec<(u64, Category)>>;

/// Names blocks from before the recording by the gradients' sizes (`at_most`: how many gradients
/// of each size were alive when they were most, `most_bytes` in all). PyTorch keeps one gradient
/// per parameter, and an optimizer as many state tensors of each parameter's size for every
/// parameter (Adam's two moments, SGD's momentum), so a size the model's parameters have is held
/// `r` times as often as its gradients: a parameter and `r` - 1 state tensors each, for the same
/// `r` at every size, whatever the optimizer. Where one `r` holds for nine tenths of the
/// gradients' bytes, each size's blocks are named so: those the tags and rules name keep their
/// names, and of the rest the lowest addresses (the model, allocated before its optimizer's first
/// step) are taken as the parameters. Returns the parameters, the state and `r`.
fn match_by_gradients(
    before: &BeforeBySize,
    at_most: &BTreeMap<u64, usize>,
    most_bytes: u64,
) -> Option<(Vec<u64>, Vec<u64>, usize)> {
    // Bytes of gradients each ratio explains.
    let mut by_ratio: BTreeMap<usize, u64> = BTreeMap::new();
    for (size, &count) in at_most {
        let held = before.get(size).map_or(0, Vec::len);
        if count > 0 && held > 0 && held.is_multiple_of(count) {
            *by_ratio.entry(held / count).or_default() += size * count as u64;
        }
    }
    let (&ratio, &explained) = by_ratio.iter().max_by_key(|&(r, b)| (*b, std::cmp::Reverse(*r)))?;
    if most_bytes == 0 || explained * 10 < most_bytes * 9 {
        return None;
    }
    let (mut parameters, mut state) = (Vec::new(), Vec::new());
    for (size, &count) in at_most {
        let Some(blocks) = before.get(size).filter(|b| b.len() == count * ratio) else { continue };
        let named = |c: Category| blocks.iter().filter(|b| b.1 == c).count();
        let (Some(want_parameters), Some(want_state)) = (
            count.checked_sub(named(Category::Parameter)),
            (count * (ratio - 1)).checked_sub(named(Category::OptimizerState)),
        ) else {
            continue;
        };
        let mut unknown: Vec<u64> = blocks.iter().filter(|b| b.1 == Category::Unknown).map(|b| b.0).collect();
        if unknown.len() != want_parameters + want_state {
            continue;
        }
        unknown.sort_unstable();
        parameters.extend_from_slice(&unknown[..want_parameters]);
        state.extend_from_slice(&unknown[want_parameters..]);
    }
    (parameters.len() + state.len() >= MIN_SIZE_MATCHES).then_some((parameters, state, ratio))
}

/// Fewer model tensors than this are not matched by size: a handful of equal sizes can meet by
/// chance.
const MIN_SIZE_MATCHES: usize = 4;

impl Attributor<'_> {
    /// Works out which blocks alive from before the recording to its end are parameters and
    /// optimizer state by their sizes ([`match_by_gradients`]: a parameter and `r` - 1 state
    /// tensors per gradient of each size, the same `r` at every size), else, without gradients,
    /// parameters by the optimizer state the recording shows (two a parameter). Sizes are the
    /// ones asked for (what a snapshot records exactly).
    pub(super) fn find_persistent(&mut self) {
        if self.persistent.is_some() {
            return;
        }
        let events = crate::replay::device_events(self.trace, self.device);
        let initial = crate::replay::initial_state(self.trace, self.device, &events);
        self.find_persistent_with(&events, &initial);
    }

    /// Where a block from before the recording will need it (one the tags, phases and stack
    /// rules say nothing of, or a range's), works out which such blocks are parameters from
    /// the device's events and initial state already at hand, rather than replaying the device
    /// again when the first such block is asked for.
    pub fn prepare_persistent(&mut self, events: &crate::replay::DeviceEvents, initial: &crate::replay::Initial) {
        if self.persistent.is_some() {
            return;
        }
        let trace = self.trace;
        let needed = !self.before_range.is_empty()
            || initial.blocks.iter().any(|b| {
                let found = self.known(b.address, i64::MIN, i64::MAX, b.stack(trace));
                found.category == Category::Unknown && found.evidence == Evidence::Nothing
            });
        if needed {
            self.find_persistent_with(events, initial);
        }
    }

    pub(super) fn find_persistent_with(
        &mut self,
        events: &crate::replay::DeviceEvents,
        initial: &crate::replay::Initial,
    ) {
        let trace = self.trace;
        // The blocks from before the recording that live to its end, with what the tags and
        // rules say of each.
        let mut before: Vec<(u64, u64, Category)> = Vec::new();
        for b in initial.blocks.iter().filter(|b| b.freed_by.is_none() && !b.awaiting) {
            let category = self.known(b.address, i64::MIN, i64::MAX, b.stack(trace)).category;
            before.push((b.address, b.requested_bytes, category));
        }
        // A range of a trace shows what was alive at its start allocated there.
        if !self.before_range.is_empty() {
            let mut alive: HashMap<u64, (u64, StackId)> = HashMap::default();
            for e in events.iter().filter_map(|i| trace.events.get(i as usize)) {
                match e.kind {
                    // Only what its source had from before it too: the rest were allocated in
                    // the recording, as in the whole trace.
                    EventKind::Alloc
                        if self.before_range.contains(&(e.address, e.time_ns))
                            && !self.allocated_before.contains_key(&e.address) =>
                    {
                        alive.insert(e.address, (e.requested_bytes(), e.stack));
                    }
                    EventKind::FreeRequested | EventKind::FreeCompleted if e.ends_allocation(self.two_step) => {
                        alive.remove(&e.address);
                    }
                    _ => {}
                }
            }
            // What the range shows allocated at its start holds the gradients and optimizer
            // state of the steps before it too, which their stacks name: only the blocks nothing
            // names are candidates, as they are for a trace read whole (whose gradients are
            // allocated inside it).
            for (address, (size, stack)) in alive {
                let known = self.known(address, i64::MIN, i64::MAX, stack);
                if known.category == Category::Unknown {
                    before.push((address, size, Category::Unknown));
                }
            }
        }
        let mut persistent = Persistent {
            alive_throughout: before.iter().map(|b| b.0).collect(),
            parameters: Default::default(),
            matched: Category::Gradient,
            state: Default::default(),
            per_parameter: 0,
        };
        let mut before_by_size: BeforeBySize = BTreeMap::new();
        for &(address, size, category) in &before {
            before_by_size.entry(size).or_default().push((address, category));
        }
        let [gradients, optimizer_state] = self.most_alive(events);
        // By the gradients: a parameter and its optimizer's state tensors of each size.
        if let Some((parameters, state, ratio)) = match_by_gradients(&before_by_size, &gradients.1, gradients.0) {
            persistent.parameters = parameters.into_iter().collect();
            persistent.state = state.into_iter().collect();
            persistent.per_parameter = u8::try_from(ratio - 1).unwrap_or(u8::MAX);
            self.persistent = Some(persistent);
            return;
        }
        // Without gradients to go by, by the optimizer state the recording shows: two a
        // parameter (Adam's moments), the unknown blocks of those sizes being the parameters.
        let (most_bytes, at_most) = optimizer_state;
        let mut matched = Vec::new();
        let mut matched_bytes = 0u64;
        for (size, &count) in &at_most {
            let unknown: Vec<u64> = before_by_size
                .get(size)
                .map(|b| b.iter().filter(|b| b.1 == Category::Unknown).map(|b| b.0).collect())
                .unwrap_or_default();
            if !unknown.is_empty() && unknown.len() * 2 == count {
                matched_bytes += size * unknown.len() as u64;
                matched.extend(unknown);
            }
        }
        let parameter_bytes = most_bytes / 2;
        if matched.len() >= MIN_SIZE_MATCHES && parameter_bytes > 0 && matched_bytes * 10 >= parameter_bytes * 9 {
            persistent.parameters = matched.into_iter().collect();
            persistent.matched = Category::OptimizerState;
        }
        self.persistent = Some(persistent);
    }

    /// For the gradients and the optimizer state (in that order): the most bytes of each alive
    /// together (as asked for), and how many blocks of each size were alive then. One pass
    /// attributes each allocation once and finds both highs; a second pass per category, up to
    /// its high, counts the blocks by size from what the first pass found.
    pub(super) fn most_alive(&mut self, events: &crate::replay::DeviceEvents) -> [(u64, BTreeMap<u64, usize>); 2] {
        const WATCHED: [Category; 2] = [Category::Gradient, Category::OptimizerState];
        const NEITHER: u8 = u8::MAX;
        let trace = self.trace;
        // Per event (by its place in `events`): which watched category it allocates, if any.
        let mut which: Vec<u8> = Vec::with_capacity(events.len());
        let mut live: HashMap<u64, (usize, u64)> = HashMap::default();
        let (mut bytes, mut most, mut most_at) = ([0u64; 2], [0u64; 2], [None::<usize>; 2]);
        for (n, i) in events.iter().map(|i| i as usize).enumerate() {
            let Some(e) = trace.events.get(i) else {
                which.push(NEITHER);
                continue;
            };
            let mut watched = NEITHER;
            match e.kind {
                EventKind::Alloc => {
                    let category = self.known(e.address, e.time_ns, i64::MAX, e.stack).category;
                    if let Some(w) = WATCHED.iter().position(|&c| c == category) {
                        watched = w as u8;
                        live.insert(e.address, (w, e.requested_bytes()));
                        bytes[w] += e.requested_bytes();
                        if bytes[w] > most[w] {
                            (most[w], most_at[w]) = (bytes[w], Some(n));
                        }
                    }
                }
                EventKind::FreeRequested | EventKind::FreeCompleted if e.ends_allocation(self.two_step) => {
                    if let Some((w, size)) = live.remove(&e.address) {
                        bytes[w] -= size;
                    }
                }
                _ => {}
            }
            which.push(watched);
        }
        std::array::from_fn(|w| {
            let mut counts: BTreeMap<u64, usize> = BTreeMap::new();
            let Some(at) = most_at[w] else { return (most[w], counts) };
            let mut live: HashMap<u64, u64> = HashMap::default();
            for (n, i) in events.iter().map(|i| i as usize).enumerate().take(at + 1) {
                let Some(e) = trace.events.get(i) else { continue };
                match e.kind {
                    EventKind::Alloc if which[n] == w as u8 => {
                        live.insert(e.address, e.requested_bytes());
                    }
                    EventKind::FreeRequested | EventKind::FreeCompleted if e.ends_allocation(self.two_step) => {
                        live.remove(&e.address);
                    }
                    _ => {}
                }
            }
            for size in live.values() {
                *counts.entry(*size).or_default() += 1;
            }
            (most[w], counts)
        })
    }
}
