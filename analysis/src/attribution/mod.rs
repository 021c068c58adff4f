//! What each block is for: a category and the evidence for it.
//!
//! In the order of DESIGN.md: a tag recorded for the block's address during its lifetime wins;
//! otherwise the phase it was allocated in and how long it lived, where the recording has phases
//! (allocated in forward and alive after it: an activation; allocated and freed inside one phase:
//! a temporary; kept after backward: a gradient; kept after an optimizer step: optimizer state);
//! otherwise a rule over the frames of the stack that allocated it (as Mosaic does for snapshots
//! recorded without hooks); otherwise `unknown`. Every answer keeps its evidence so the GUI can
//! say why.

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

/// Tensors that live inside a larger allocation (a checkpoint loaded into one buffer, a
/// flattened parameter, a contiguous gradient buffer) are tagged at their own addresses, which
/// start no block: each such tag is also filed under the block that held its address when it was
/// written, so that the block takes the category of what it holds.
fn tags_inside_blocks(trace: &Trace, device: DeviceId, tags: &mut HashMap<u64, Vec<(i64, Category, StringId)>>) {
    if tags.is_empty() {
        return;
    }
    let events = crate::replay::device_events(trace, device);
    let starts: rustc_hash::FxHashSet<u64> = events
        .iter()
        .filter_map(|i| trace.events.get(i as usize))
        .filter(|e| e.kind == EventKind::Alloc)
        .map(|e| e.address)
        .collect();
    let mut inside: Vec<(i64, u64, Category, StringId)> = tags
        .iter()
        .filter(|(address, _)| !starts.contains(address))
        .flat_map(|(&address, list)| list.iter().map(move |&(time, category, name)| (time, address, category, name)))
        .collect();
    if inside.is_empty() {
        return;
    }
    inside.sort_unstable_by_key(|t| (t.0, t.1));
    let two_step = trace.frees_in_two_steps(device);
    let mut live: std::collections::BTreeMap<u64, u64> = std::collections::BTreeMap::new();
    let mut next = inside.iter().peekable();
    let mut file = |live: &std::collections::BTreeMap<u64, u64>, until: i64| {
        while let Some(&&(time, address, category, name)) = next.peek().filter(|t| t.0 < until) {
            next.next();
            if let Some((&start, &size)) = live.range(..=address).next_back()
                && address < start.saturating_add(size)
            {
                tags.entry(start).or_default().push((time, category, name));
            }
        }
    };
    for e in events.iter().filter_map(|i| trace.events.get(i as usize)) {
        file(&live, e.time_ns);
        match e.kind {
            EventKind::Alloc => {
                live.insert(e.address, e.size_bytes);
            }
            EventKind::FreeRequested | EventKind::FreeCompleted if e.ends_allocation(two_step) => {
                live.remove(&e.address);
            }
            _ => {}
        }
    }
    file(&live, i64::MAX);
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

impl<'a> Attributor<'a> {
    /// Prepares attribution for the blocks of `device`.
    pub fn new(trace: &'a Trace, device: DeviceId) -> Self {
        let two_step = trace.frees_in_two_steps(device);
        let mut tags: HashMap<u64, Vec<(i64, Category, StringId)>> = HashMap::default();
        for tag in trace.tags.iter().filter(|t| t.device == device) {
            tags.entry(tag.address).or_default().push((tag.time_ns, tag.category, tag.name));
        }
        tags_inside_blocks(trace, device, &mut tags);
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

mod persistent;
mod rules;

use persistent::Persistent;

use rules::classify_stack;

#[cfg(test)]
mod tests;
