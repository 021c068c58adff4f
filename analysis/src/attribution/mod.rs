//! What each block is for: a category and the evidence for it.
//!
//! In the order of DESIGN.md: a tag recorded for the block's address during its lifetime wins;
//! otherwise the phase it was allocated in and how long it lived, where the recording has phases
//! (allocated in forward and alive after it: an activation; allocated and freed inside one phase:
//! a temporary; kept after backward: a gradient; kept after an optimizer step: optimizer state);
//! otherwise a rule over the frames of the stack that allocated it (as Mosaic does for snapshots
//! recorded without hooks); otherwise `unknown`. Every answer keeps its evidence so the GUI can
//! say why.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap as HashMap;

use vramscope_trace_format::{
    AnnotationKind, Category, DeviceId, EventKind, FrameId, StackId, StringId, Trace, event_flags,
};

/// Why a block has its category.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Evidence {
    /// A tag from the recorder's hooks, with its name (e.g. a parameter's qualified name).
    Tag(StringId),
    /// A stack-frame rule matched this frame.
    Frame {
        /// What the rule looks for.
        rule: &'static str,
        /// The frame it matched.
        frame: FrameId,
    },
    /// The phase it was allocated in and whether it outlived it.
    Phase {
        /// The rule, in words.
        rule: &'static str,
        /// The innermost module whose forward was running, when one was.
        module: Option<StringId>,
    },
    /// Allocated before the recording began, with no tag and no rule; `persistent`: never
    /// freed in it either (model state, most likely: parameters, or what the program keeps).
    BeforeRecording {
        /// Alive from before the recording to its end.
        persistent: bool,
    },
    /// Allocated before the recording began and never freed, and its size is one of the
    /// gradients' (or, with no gradients, the optimizer state's) sizes, matched one for one as a
    /// model's parameters match them.
    SizeMatches {
        /// Whose sizes it matched.
        of: Category,
    },
    /// Allocated before the recording began and never freed, and its size one of the gradients'
    /// held once more than `per_parameter` times among such blocks: a parameter and
    /// `per_parameter` optimizer state tensors of each (inferred from the sizes, the parameters taken to be the
    /// lowest addresses where the tags and rules do not say).
    StateSizeMatches {
        /// State tensors per parameter.
        per_parameter: u8,
    },
    /// Memory the source's running totals count but none of its events allocate (a profiler
    /// that reports allocations only on the threads it follows).
    Unreported,
    /// No tag and no rule.
    Nothing,
}

/// A block's category and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attribution {
    /// The category.
    pub category: Category,
    /// The evidence for it.
    pub evidence: Evidence,
}

impl Attribution {
    /// Whether the block is data the program holds whole: input its recorder tagged as a data
    /// loader's dataset (`dataset...`), which no smaller batch shrinks.
    pub fn is_resident_input(&self, trace: &Trace) -> bool {
        self.category == Category::Input
            && matches!(self.evidence, Evidence::Tag(name) if trace.interner.resolve(name).starts_with("dataset"))
    }

    const UNKNOWN: Self = Self { category: Category::Unknown, evidence: Evidence::Nothing };
}

/// Attributes blocks of one trace, caching the stack rules by stack.
pub struct Attributor<'a> {
    trace: &'a Trace,
    /// The stack rules' answer by stack id (ids are dense: a list, not a map).
    by_stack: Vec<Option<Attribution>>,
    /// Tags by address, in time order.
    tags: HashMap<u64, Vec<(i64, Category, StringId)>>,
    /// When each block (address, alloc time) was freed; only for traces with tags or phases.
    frees: HashMap<(u64, i64), i64>,
    /// Forward, backward and optimizer-step spans by start: (start, end, kind).
    phases: Vec<(i64, i64, AnnotationKind)>,
    /// For each phase, what follows it: the start of the second forward after it (the next
    /// iteration's end, roughly), and whether a backward comes after it. Worked out once: a
    /// long recording has thousands of phases and a million blocks to ask about them.
    phases_after: Vec<(Option<i64>, bool)>,
    /// Module forwards by start: (start, end, name).
    modules: Vec<(i64, i64, StringId)>,
    /// Each module span's enclosing one (index into `modules`), for the innermost module
    /// running at an instant: an ancestor of the last span started before it.
    module_parents: Vec<Option<usize>>,
    /// Whether the recorder tagged gradients, and optimizer state (then blocks kept after
    /// backward or a step without such a tag are something else).
    gradients_tagged: bool,
    state_tagged: bool,
    /// Blocks from before the recording named parameters by their sizes (worked out when the
    /// first such block is asked for).
    persistent: Option<Persistent>,
    device: DeviceId,
    /// Blocks (address, alloc time) that a trace opened at a range of its source shows allocated
    /// at its start, allocated before it: they are attributed as allocated before the recording.
    before_range: rustc_hash::FxHashSet<(u64, i64)>,
    /// Blocks (address, alloc time) that stand for memory the source's totals count and no
    /// event reports ([`event_flags::UNREPORTED`]).
    unreported: rustc_hash::FxHashSet<(u64, i64)>,
    /// Whether the device's frees come in two steps: a block's lifetime ends at the request.
    two_step: bool,
    /// Of the blocks a range shows allocated at its start, when each was allocated in its
    /// source, by address (those the source shows allocated).
    allocated_before: HashMap<u64, i64>,
    /// Evaluations inside a training run (validation, a trainer's evaluation loop), by start.
    evaluations: Vec<(i64, i64)>,
}

/// The blocks alive from before the recording to its end, and those of them whose sizes match
/// the gradients' (or the optimizer state's) one for one.
struct Persistent {
    alive_throughout: rustc_hash::FxHashSet<u64>,
    parameters: rustc_hash::FxHashSet<u64>,
    matched: Category,
    /// Blocks named optimizer state by their sizes: the gradients' sizes held once more than
    /// `per_parameter` times among the blocks from before the recording (a parameter and its
    /// optimizer's tensors of each).
    state: rustc_hash::FxHashSet<u64>,
    per_parameter: u8,
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

impl<'a> Attributor<'a> {
    /// Prepares attribution for the blocks of `device`.
    pub fn new(trace: &'a Trace, device: DeviceId) -> Self {
        let two_step = trace.frees_in_two_steps(device);
        let mut tags: HashMap<u64, Vec<(i64, Category, StringId)>> = HashMap::default();
        for tag in trace.tags.iter().filter(|t| t.device == device) {
            tags.entry(tag.address).or_default().push((tag.time_ns, tag.category, tag.name));
        }
        for list in tags.values_mut() {
            list.sort_by_key(|t| t.0);
        }
        let mut phases = Vec::new();
        let mut modules = Vec::new();
        let mut evaluations = Vec::new();
        // A part of a trace (a range) keeps when the blocks alive at its start were allocated
        // and the spans they were allocated in: they are what they were in the whole. A span
        // that ran across the part's start is there whole; the part's own copy, cut at the
        // start, is left out (it would read as a later phase).
        let mut allocated_before: HashMap<u64, i64> = HashMap::default();
        let mut whole_spans: rustc_hash::FxHashSet<(&str, i64)> = rustc_hash::FxHashSet::default();
        if let Some(range) = &trace.metadata.range {
            for a in range.alive_since.iter().filter(|a| a.device == device.0) {
                allocated_before.insert(a.address, a.time_ns);
            }
            for span in range.spans_before.iter().filter(|s| s.device.is_none_or(|d| d == device.0)) {
                whole_spans.insert((span.kind.as_str(), span.end_ns));
                match span.kind.as_str() {
                    "forward" => phases.push((span.start_ns, span.end_ns, AnnotationKind::Forward)),
                    "backward" => phases.push((span.start_ns, span.end_ns, AnnotationKind::Backward)),
                    "optimizer_step" => phases.push((span.start_ns, span.end_ns, AnnotationKind::OptimizerStep)),
                    "evaluation" => evaluations.push((span.start_ns, span.end_ns)),
                    "module" => {
                        if let Some(name) = trace.interner.find_string(&span.name) {
                            modules.push((span.start_ns, span.end_ns, name));
                        }
                    }
                    _ => {}
                }
            }
        }
        // An evaluation inside a training run (what the recorder names so, or a range the program
        // names so) is a phase too: what it allocates and drops are its temporaries.
        let evaluation = trace.interner.find_string("evaluation");
        for a in &trace.annotations {
            let kind = match a.kind {
                AnnotationKind::Forward => "forward",
                AnnotationKind::Backward => "backward",
                AnnotationKind::OptimizerStep => "optimizer_step",
                AnnotationKind::UserRange if Some(a.name) == evaluation => "evaluation",
                AnnotationKind::Module => "module",
                _ => continue,
            };
            if !whole_spans.is_empty() && whole_spans.contains(&(kind, a.end_ns)) {
                continue;
            }
            match a.kind {
                AnnotationKind::Module => modules.push((a.start_ns, a.end_ns, a.name)),
                AnnotationKind::UserRange => evaluations.push((a.start_ns, a.end_ns)),
                kind => phases.push((a.start_ns, a.end_ns, kind)),
            }
        }
        evaluations.sort_unstable();
        phases.sort_unstable_by_key(|p| p.0);
        // What runs between the end of forward and backward (the loss, usually) is forward too:
        // an activation is what is still alive when backward starts.
        for i in 1..phases.len() {
            if let [(_, end, AnnotationKind::Forward), (start, _, AnnotationKind::Backward)] = phases[i - 1..=i] {
                phases[i - 1].1 = end.max(start - 1);
            }
        }
        let mut phases_after = vec![(None, false); phases.len()];
        let (mut forwards, mut backward) = ([None::<i64>; 2], false);
        for (i, p) in phases.iter().enumerate().rev() {
            phases_after[i] = (forwards[1], backward);
            match p.2 {
                AnnotationKind::Forward => forwards = [Some(p.0), forwards[0]],
                AnnotationKind::Backward => backward = true,
                _ => {}
            }
        }
        modules.sort_unstable_by_key(|m| m.0);
        let mut module_parents = Vec::with_capacity(modules.len());
        let mut open: Vec<usize> = Vec::new();
        for (k, m) in modules.iter().enumerate() {
            while open.last().is_some_and(|&top| modules.get(top).is_some_and(|t| t.1 < m.0)) {
                open.pop();
            }
            module_parents.push(open.last().copied());
            open.push(k);
        }
        // Lifetimes matter only where tags or phases can use them (recordings by the shim).
        let mut frees = HashMap::default();
        if !tags.is_empty() || !phases.is_empty() {
            let mut live: HashMap<u64, i64> = HashMap::default();
            for e in trace.events.iter().filter(|e| e.device == device) {
                match e.kind {
                    EventKind::Alloc => {
                        live.insert(e.address, e.time_ns);
                    }
                    EventKind::FreeRequested | EventKind::FreeCompleted if e.ends_allocation(two_step) => {
                        if let Some(alloc_ns) = live.remove(&e.address) {
                            frees.insert((e.address, alloc_ns), e.time_ns);
                        }
                    }
                    _ => {}
                }
            }
        }
        let tagged = |category: Category| tags.values().flatten().any(|t| t.1 == category);
        let (gradients_tagged, state_tagged) = (tagged(Category::Gradient), tagged(Category::OptimizerState));
        let before_range = if trace.metadata.range.is_some() {
            trace
                .events
                .iter()
                .filter(|e| {
                    e.device == device && e.kind == EventKind::Alloc && e.flags & event_flags::BEFORE_RANGE != 0
                })
                .map(|e| (e.address, e.time_ns))
                .collect()
        } else {
            rustc_hash::FxHashSet::default()
        };
        let has_unreported = trace
            .metadata
            .devices
            .iter()
            .any(|d| d.device == device && d.totals.is_some_and(|t| t.unreported_max_bytes > 0));
        let unreported = if has_unreported {
            trace
                .events
                .iter()
                .filter(|e| e.device == device && e.kind == EventKind::Alloc && e.flags & event_flags::UNREPORTED != 0)
                .map(|e| (e.address, e.time_ns))
                .collect()
        } else {
            rustc_hash::FxHashSet::default()
        };
        Self {
            trace,
            by_stack: Vec::new(),
            tags,
            frees,
            phases,
            phases_after,
            modules,
            module_parents,
            gradients_tagged,
            state_tagged,
            persistent: None,
            device,
            before_range,
            unreported,
            two_step,
            allocated_before,
            evaluations,
        }
    }

    /// When a block counts as allocated: for a block a range shows allocated at its start, when
    /// its source allocated it, else `i64::MIN` (before the recording).
    fn alloc_time(&self, address: u64, alloc_ns: i64) -> i64 {
        if !self.before_range.is_empty() && self.before_range.contains(&(address, alloc_ns)) {
            self.allocated_before.get(&address).copied().unwrap_or(i64::MIN)
        } else {
            alloc_ns
        }
    }

    /// Works out which blocks alive from before the recording to its end are parameters and
    /// optimizer state by their sizes ([`match_by_gradients`]: a parameter and `r` - 1 state
    /// tensors per gradient of each size, the same `r` at every size), else, without gradients,
    /// parameters by the optimizer state the recording shows (two a parameter). Sizes are the
    /// ones asked for (what a snapshot records exactly).
    fn find_persistent(&mut self) {
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

    fn find_persistent_with(&mut self, events: &crate::replay::DeviceEvents, initial: &crate::replay::Initial) {
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
    fn most_alive(&mut self, events: &crate::replay::DeviceEvents) -> [(u64, BTreeMap<u64, usize>); 2] {
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

    /// When the block at `address` allocated at `alloc_ns` was freed (`i64::MAX`: never, or not
    /// known).
    fn freed_at(&self, address: u64, alloc_ns: i64) -> i64 {
        self.frees.get(&(address, alloc_ns)).copied().unwrap_or(i64::MAX)
    }

    /// The phase rule for a block alive from `alloc_ns` to `free_ns`, if it was allocated in one.
    fn phase(&self, alloc_ns: i64, free_ns: i64) -> Option<Attribution> {
        // The innermost phase around it: the latest-starting one that still runs. Phases nest
        // where an optimizer takes a closure (`optimizer.step(closure)`: Lightning, LBFGS), which
        // runs forward and backward inside the step; what the step allocates after them is the
        // step's. A bounded walk back past the phases that ended before it.
        let i = self.phases.partition_point(|p| p.0 <= alloc_ns);
        let Some(index) = (i.saturating_sub(8)..i).rev().find(|&k| self.phases.get(k).is_some_and(|p| p.1 >= alloc_ns))
        else {
            return self.in_evaluation(alloc_ns, free_ns);
        };
        let &(_, end, kind) = self.phases.get(index)?;
        let kept = free_ns > end;
        // Activations die with their iteration, or soon after when the program still holds the
        // last outputs; what lives through the whole next iteration (or, after a backward, to the
        // end) is kept for longer than any activation.
        let (second_forward, backward_follows) = self.phases_after.get(index).copied().unwrap_or((None, false));
        let outlives_iteration = match second_forward {
            Some(start) => free_ns > start,
            None => backward_follows && free_ns == i64::MAX,
        };
        let tagged = |category: Category| match category {
            Category::Gradient => self.gradients_tagged,
            _ => self.state_tagged,
        };
        let (category, rule) = match (kind, kept) {
            (AnnotationKind::Forward, true) if outlives_iteration => (
                Category::Unknown,
                "allocated in forward and kept through the next iteration: not an activation (a \
                 library's workspace or a cache)",
            ),
            (AnnotationKind::Forward, true) => (Category::Activation, "allocated in forward and alive after it"),
            (AnnotationKind::Backward, true) if tagged(Category::Gradient) => (
                Category::Unknown,
                "allocated in backward and kept after it, but not a parameter's gradient (a library's \
                 workspace or a cache)",
            ),
            (AnnotationKind::Backward, true) => (Category::Gradient, "allocated in backward and kept after it"),
            (AnnotationKind::OptimizerStep, true) if tagged(Category::OptimizerState) => {
                (Category::Unknown, "allocated in an optimizer step and kept after it, but not the optimizer's state")
            }
            (AnnotationKind::OptimizerStep, true) => {
                (Category::OptimizerState, "allocated in an optimizer step and kept after it")
            }
            (AnnotationKind::Forward, false) => (Category::Temporary, "allocated and freed inside forward"),
            (AnnotationKind::Backward, false) => (Category::Temporary, "allocated and freed inside backward"),
            (AnnotationKind::OptimizerStep, false) => {
                (Category::Temporary, "allocated and freed inside an optimizer step")
            }
            _ => return None,
        };
        // The innermost module running then: the latest-starting span that contains it.
        let mut at = self.modules.partition_point(|m| m.0 <= alloc_ns).checked_sub(1);
        let mut module = None;
        // Spans nest: the innermost one running is the last started or one enclosing it (a
        // bounded walk, in case spans of several threads overlap without nesting).
        for _ in 0..256 {
            let Some(k) = at else { break };
            match self.modules.get(k) {
                Some(m) if m.1 >= alloc_ns => {
                    module = Some(m.2);
                    break;
                }
                Some(_) => at = self.module_parents.get(k).copied().flatten(),
                None => break,
            }
        }
        Some(Attribution { category, evidence: Evidence::Phase { rule, module } })
    }

    /// What a block allocated outside forward, backward and the optimizer step is when an
    /// evaluation runs then: a temporary of it when freed before it ends.
    fn in_evaluation(&self, alloc_ns: i64, free_ns: i64) -> Option<Attribution> {
        let i = self.evaluations.partition_point(|e| e.0 <= alloc_ns);
        let &(_, end) = i.checked_sub(1).and_then(|k| self.evaluations.get(k)).filter(|e| e.1 >= alloc_ns)?;
        (free_ns <= end).then_some(Attribution {
            category: Category::Temporary,
            evidence: Evidence::Phase {
                rule: "allocated and freed inside an evaluation (validation, a trainer's evaluation loop)",
                module: None,
            },
        })
    }

    /// The category of a block at `address` alive from `alloc_ns` (`i64::MIN` when allocated
    /// before the trace) until `until_ns`, allocated by `stack`.
    pub fn block(&mut self, address: u64, alloc_ns: i64, until_ns: i64, stack: StackId) -> Attribution {
        let found = self.known(address, alloc_ns, until_ns, stack);
        let alloc_ns = self.alloc_time(address, alloc_ns);
        if found.category != Category::Unknown || alloc_ns != i64::MIN || found.evidence != Evidence::Nothing {
            return found;
        }
        self.find_persistent();
        let Some(persistent) = &self.persistent else { return found };
        if persistent.parameters.contains(&address) {
            return Attribution {
                category: Category::Parameter,
                evidence: Evidence::SizeMatches { of: persistent.matched },
            };
        }
        if persistent.state.contains(&address) {
            return Attribution {
                category: Category::OptimizerState,
                evidence: Evidence::StateSizeMatches { per_parameter: persistent.per_parameter },
            };
        }
        let persistent = persistent.alive_throughout.contains(&address);
        Attribution { category: Category::Unknown, evidence: Evidence::BeforeRecording { persistent } }
    }

    /// What the tags, the phases and the stack rules say of a block (see [`Attributor::block`]).
    fn known(&mut self, address: u64, alloc_ns: i64, until_ns: i64, stack: StackId) -> Attribution {
        if !self.unreported.is_empty() && self.unreported.contains(&(address, alloc_ns)) {
            return Attribution { category: Category::Unknown, evidence: Evidence::Unreported };
        }
        // Its whole life counts where it is known, else up to `until_ns`.
        let free_ns = self.freed_at(address, alloc_ns);
        let alloc_ns = self.alloc_time(address, alloc_ns);
        let end_ns = if free_ns == i64::MAX && self.frees.is_empty() { until_ns } else { free_ns };
        if let Some(list) = self.tags.get(&address) {
            let start = list.partition_point(|t| t.0 < alloc_ns);
            if let Some(&(_, category, name)) = list.get(start).filter(|t| t.0 <= end_ns) {
                return Attribution { category, evidence: Evidence::Tag(name) };
            }
        }
        if let Some(found) = self.phase(alloc_ns, free_ns) {
            return found;
        }
        self.stack(stack)
    }

    /// The category the stack-frame rules give `stack`.
    pub fn stack(&mut self, stack: StackId) -> Attribution {
        if let Some(Some(found)) = self.by_stack.get(stack.index()) {
            return *found;
        }
        let found = classify_stack(self.trace, stack);
        // The list grows to the trace's stack table at most (an id past it is not cached).
        if self.by_stack.len() <= stack.index() && stack.index() < self.trace.interner.stack_count() {
            self.by_stack.resize(stack.index() + 1, None);
        }
        if let Some(slot) = self.by_stack.get_mut(stack.index()) {
            *slot = Some(found);
        }
        found
    }
}

mod rules;

use rules::classify_stack;

#[cfg(test)]
mod tests {
    use vramscope_trace_format::Tag;

    use super::*;
    use crate::testing::stack;

    #[test]
    fn nearest_frame_decides_and_tags_win() {
        let mut trace = Trace::default();
        let adam = stack(
            &mut trace,
            &[("??", "at::empty_cuda"), ("/venv/torch/optim/adam.py", "_init_group"), ("train.py", "forward")],
        );
        let fwd = stack(&mut trace, &[("??", "at::native::forward_impl"), ("C:\\m\\model.py", "forward")]);
        let none = stack(&mut trace, &[("train.py", "main")]);
        let mut a = Attributor::new(&trace, DeviceId(0));
        assert_eq!(a.stack(adam).category, Category::OptimizerState);
        assert_eq!(a.stack(fwd).category, Category::Activation);
        assert_eq!(a.stack(none), Attribution::UNKNOWN);

        let name = trace.interner.string("layer.weight");
        trace.tags.push(Tag {
            time_ns: 15,
            device: DeviceId(0),
            process: Default::default(),
            address: 0x100,
            category: Category::Parameter,
            name,
        });
        let mut a = Attributor::new(&trace, DeviceId(0));
        // Tagged during its lifetime.
        assert_eq!(a.block(0x100, 10, 20, fwd).category, Category::Parameter);
        // A later block at the same address, after the tag: the stack decides.
        assert_eq!(a.block(0x100, 30, 40, fwd).category, Category::Activation);
        let evidence = a.block(0x100, 10, 20, fwd).evidence;
        assert!(
            matches!(evidence, Evidence::Tag(tag) if trace.interner.resolve(tag).contains("layer.weight")),
            "{evidence:?}"
        );
    }

    /// A snapshot whose recording began after the model was built: its parameters are blocks
    /// from before, alive to the end, one of each gradient's size.
    fn persistent_trace(sizes: &[u64], extra_before: usize) -> Trace {
        use vramscope_trace_format::{Block, BlockState, Event, Segment};
        let mut trace = Trace::default();
        let grad = stack(&mut trace, &[("??", "torch::autograd::AccumulateGrad::apply")]);
        let mut blocks = Vec::new();
        let mut address = 0x10_0000u64;
        for (i, &size) in sizes.iter().enumerate() {
            for _ in 0..=(if i == 0 { extra_before } else { 0 }) {
                blocks.push(Block {
                    address,
                    size_bytes: size,
                    requested_bytes: size,
                    state: BlockState::ActiveAllocated,
                    stack: StackId(0),
                });
                address += size;
            }
        }
        // One block from before that matches no gradient.
        blocks.push(Block {
            address,
            size_bytes: 12_345 * 512,
            requested_bytes: 12_345 * 512,
            state: BlockState::ActiveAllocated,
            stack: StackId(0),
        });
        trace.segments.push(Segment::new(DeviceId(0), 0x10_0000, address + (12_345 * 512) - 0x10_0000, blocks));
        // Two steps of gradients: allocated in backward, freed by zero_grad(set_to_none=True).
        let mut t = 0;
        for _ in 0..2 {
            for (i, &size) in sizes.iter().enumerate() {
                let mut e = Event::new(EventKind::Alloc, t, 0, 0x1000_0000 + i as u64 * 0x100_0000, size);
                e.stack = grad;
                trace.events.push(e);
                t += 1;
            }
            for (i, &size) in sizes.iter().enumerate() {
                trace.events.push(Event::new(
                    EventKind::FreeCompleted,
                    t,
                    0,
                    0x1000_0000 + i as u64 * 0x100_0000,
                    size,
                ));
                t += 1;
            }
        }
        trace
    }

    #[test]
    fn blocks_from_before_the_recording_are_parameters_when_their_sizes_meet_the_gradients() {
        let sizes = [4096 * 512, 1024 * 512, 512, 8 * 512, 4096 * 512 * 3];
        let trace = persistent_trace(&sizes, 0);
        let mut a = Attributor::new(&trace, DeviceId(0));
        let first = a.block(0x10_0000, i64::MIN, 100, StackId(0));
        assert_eq!(first.category, Category::Parameter, "{first:?}");
        assert_eq!(first.evidence, Evidence::SizeMatches { of: Category::Gradient });
        let odd = trace.segments[0].blocks.last().map_or(0, |b| b.address);
        let other = a.block(odd, i64::MIN, 100, StackId(0));
        assert_eq!(
            other,
            Attribution { category: Category::Unknown, evidence: Evidence::BeforeRecording { persistent: true } }
        );
        // A block allocated in the window is not one of them, whatever its size.
        assert_eq!(a.block(0x10_0000, 5, 100, StackId(0)).category, Category::Unknown);

        // Two blocks of the first size from before for one gradient of it (a parameter and
        // something else): which is which cannot be told; the others still match, but the
        // first size no longer does, and four sizes in five is below nine in ten.
        let trace = persistent_trace(&sizes, 1);
        let mut a = Attributor::new(&trace, DeviceId(0));
        assert_eq!(
            a.block(0x10_0000, i64::MIN, 100, StackId(0)).evidence,
            Evidence::BeforeRecording { persistent: true }
        );
        // Too few tensors to tell from chance.
        let trace = persistent_trace(&sizes[..3], 0);
        let mut a = Attributor::new(&trace, DeviceId(0));
        assert_eq!(a.block(0x10_0000, i64::MIN, 100, StackId(0)).category, Category::Unknown);
    }
}
