//! The phases of a training step (forward, backward, the optimizer step), per iteration, and the
//! high point of allocated memory in each: what two runs are compared by when their global peaks
//! hide what changed (both peak in the optimizer step, while one's activations are far larger).
//!
//! Where the phases come from, best first:
//!
//! 1. **Recorded**: the spans the recorder's PyTorch shim writes (forward, backward, optimizer
//!    step, iteration).
//! 2. **Annotations**: ranges named like phases (`record_function("forward")`, `"backward"`,
//!    PyTorch's own `Optimizer.step#AdamW.step`, the profiler's `ProfilerStep#N`), and a
//!    profiler's backward operators (`autograd::engine::evaluate_function: ...`).
//! 3. **Stacks**: where neither covers both forward and backward, each allocation is given the
//!    phase its stack shows (a frame in `torch/optim` or inside an optimizer-step range: the
//!    step; the autograd engine, `torch/autograd` backward or a checkpoint's recomputation:
//!    backward; a Python `forward`: forward; with Python-only stacks, an allocation with no
//!    frames after the forward began: backward, as autograd's threads have no Python frames),
//!    and the phase changes at the first allocation that shows another. Allocations that show
//!    none stay in the phase before them; after an optimizer step, the first one with a stack
//!    (or, without stacks, after the step's range ended) starts the next iteration's forward.
//!
//! A phase's window runs from its first event to the event before the next phase's first (with
//! recorded spans: the events inside the span; forward reaches to the backward after it, as
//! the loss is computed in between). Its high point is the most allocated after any event in
//! the window, or when it opens. Iterations: the recorded iteration spans; else a forward after
//! an optimizer step (after a backward when the trace has no optimizer step) begins one; a
//! forward after a backward inside one is another micro-batch of the same iteration.

use std::collections::BTreeMap;

use serde::Serialize;
use vramscope_trace_format::{AnnotationKind, DeviceId, EventKind, StackId, Trace};

use crate::attribution::Attributor;
use crate::replay;

/// A phase of a training step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PhaseKind {
    /// The forward pass (and the loss after it).
    Forward,
    /// The backward pass.
    Backward,
    /// The optimizer step.
    OptimizerStep,
}

impl PhaseKind {
    /// In the order of a step.
    pub const ALL: [Self; 3] = [Self::Forward, Self::Backward, Self::OptimizerStep];

    /// Its name in JSON and on the command line: `forward`, `backward`, `optimizer_step`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Forward => "forward",
            Self::Backward => "backward",
            Self::OptimizerStep => "optimizer_step",
        }
    }

    /// The phase a name names (`optimizer`, `optimizer-step` and `step` name the step too).
    pub fn from_name(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().replace('-', "_").as_str() {
            "forward" | "fwd" => Some(Self::Forward),
            "backward" | "bwd" => Some(Self::Backward),
            "optimizer_step" | "optimizer" | "step" | "optim" => Some(Self::OptimizerStep),
            _ => None,
        }
    }
}

/// How the phases were found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PhasesFrom {
    /// The recorder's spans.
    Recorded,
    /// Ranges named like phases (`record_function`, `Optimizer.step#...`, `ProfilerStep#N`).
    Annotations,
    /// The allocations' stacks (with any phase-named range that covers them).
    Stacks,
}

/// A phase of one iteration (or, with `kind` none, the whole iteration) and its high point.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PhaseHigh {
    /// The phase; none for the whole iteration.
    pub kind: Option<PhaseKind>,
    /// The iteration, from 1.
    pub iteration: u32,
    /// Its first event's time on the trace's clock.
    #[serde(rename = "start_us", serialize_with = "as_us")]
    pub start_ns: i64,
    /// Its last event's time.
    #[serde(rename = "end_us", serialize_with = "as_us")]
    pub end_ns: i64,
    /// The trace index of its first event.
    #[serde(skip)]
    pub first_event: usize,
    /// The trace index of its last event.
    #[serde(skip)]
    pub last_event: usize,
    /// The most allocated in it.
    pub high_bytes: u64,
    /// When that was first reached.
    #[serde(rename = "high_time_us", serialize_with = "as_us")]
    pub high_time_ns: i64,
    /// The event after which it was reached (`None`: before the device's first event).
    #[serde(skip)]
    pub high_event: Option<usize>,
    /// Bytes by category at the high point (none when not worked out: past the first
    /// [`MAX_WITH_CATEGORIES`] phases, only each kind's highest has them).
    pub categories: Option<BTreeMap<&'static str, u64>>,
}

fn as_us<S: serde::Serializer>(ns: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_i64(ns.div_euclid(1000))
}

/// Phases past this many get their categories only when they are the highest of their kind.
pub const MAX_WITH_CATEGORIES: usize = 256;

/// A device's phases and iterations.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Phases {
    /// How they were found; none when the trace shows no phase.
    pub from: Option<PhasesFrom>,
    /// Each iteration's phases, in time order (micro-batches of one iteration taken together).
    pub phases: Vec<PhaseHigh>,
    /// Each iteration as a whole.
    pub iterations: Vec<PhaseHigh>,
}

impl Phases {
    /// Whether no phase was found.
    pub fn is_empty(&self) -> bool {
        self.phases.is_empty()
    }

    /// The instance of `kind` with the highest high point (the first of equals).
    pub fn highest(&self, kind: PhaseKind) -> Option<&PhaseHigh> {
        self.phases.iter().filter(|p| p.kind == Some(kind)).fold(None, |best: Option<&PhaseHigh>, p| match best {
            Some(b) if b.high_bytes >= p.high_bytes => Some(b),
            _ => Some(p),
        })
    }

    /// The phase whose window holds trace event `event` (or whose high point is reached at it).
    pub fn phase_of_event(&self, event: Option<usize>) -> Option<&PhaseHigh> {
        let e = event?;
        self.phases.iter().find(|p| p.first_event <= e && e <= p.last_event)
    }

    /// The kinds found, in the order of a step.
    pub fn kinds(&self) -> Vec<PhaseKind> {
        PhaseKind::ALL.into_iter().filter(|k| self.phases.iter().any(|p| p.kind == Some(*k))).collect()
    }
}

/// What an allocation shows of its phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Label {
    Phase(PhaseKind),
    /// No frames at all.
    Empty,
    /// Frames, none telling.
    Other,
}

/// The phase a name given to a range means (`record_function`, a profiler's operator).
pub fn phase_of_name(name: &str) -> Option<PhaseKind> {
    if name.starts_with("Optimizer.step#") {
        return Some(PhaseKind::OptimizerStep);
    }
    if name.starts_with("autograd::engine::evaluate_function") {
        return Some(PhaseKind::Backward);
    }
    let plain: String =
        name.trim().to_ascii_lowercase().chars().map(|c| if c.is_alphanumeric() { c } else { '_' }).collect();
    match plain.trim_matches('_') {
        "forward" | "forward_pass" | "fwd" | "model_forward" => Some(PhaseKind::Forward),
        "backward" | "backward_pass" | "bwd" | "loss_backward" => Some(PhaseKind::Backward),
        "optimizer_step" | "optimizer" | "optim_step" | "opt_step" | "optimizer_step_" => {
            Some(PhaseKind::OptimizerStep)
        }
        _ => None,
    }
}

fn is_iteration_name(name: &str) -> bool {
    name.starts_with("ProfilerStep#")
}

/// The label the frames of `stack` give.
fn stack_label(trace: &Trace, stack: StackId) -> Label {
    let interner = &trace.interner;
    let frames = interner.frames_of(stack);
    if frames.is_empty() {
        return Label::Empty;
    }
    let mut forward = false;
    for &id in frames {
        let Some(frame) = interner.frame_of(id) else { continue };
        let file = interner.resolve(frame.file).replace('\\', "/");
        let function = interner.resolve(frame.function);
        if file.contains("torch/optim/") {
            return Label::Phase(PhaseKind::OptimizerStep);
        }
        let recompute = file.ends_with("torch/utils/checkpoint.py")
            && matches!(function, "unpack_hook" | "recompute_fn" | "backward" | "unpack");
        if function.contains("torch::autograd::Engine")
            || function.contains("_engine_run_backward")
            || (file.contains("torch/autograd/") && function == "backward")
            || recompute
        {
            return Label::Phase(PhaseKind::Backward);
        }
        forward |= function == "forward" && file.ends_with(".py");
    }
    if forward { Label::Phase(PhaseKind::Forward) } else { Label::Other }
}

/// A time span of one phase kind.
#[derive(Clone, Copy, Debug)]
struct Span {
    start: i64,
    end: i64,
    kind: PhaseKind,
}

/// A window of trace events with its label, before its high point is known.
#[derive(Clone, Copy, Debug)]
struct Window {
    kind: Option<PhaseKind>,
    iteration: u32,
    first: usize,
    last: usize,
}

/// The phases of `device` and the high point of each.
pub fn phases(trace: &Trace, device: DeviceId) -> Phases {
    let events = replay::device_events(trace, device);
    if events.is_empty() {
        return Phases::default();
    }
    let initial = replay::initial_state(trace, device, &events);
    let mut attributor = Attributor::new(trace, device);
    attributor.prepare_persistent(&events, &initial);
    phases_and_ranges(trace, Device { id: device, events: &events, initial: &initial }, &mut attributor, false).0
}

/// A device with its events and initial state worked out (by the caller, once).
#[derive(Clone, Copy)]
pub struct Device<'a> {
    /// The device.
    pub id: DeviceId,
    /// Its events ([`replay::device_events`]).
    pub events: &'a [u32],
    /// Its initial state ([`replay::initial_state`]).
    pub initial: &'a replay::Initial,
}

/// The phases of a device, and with `with_ranges` the first of each user range
/// (`record_function`, external annotations) by name, at most [`MAX_RANGES`] names, with the
/// high point of allocated memory inside it (what two runs without phases can still be compared
/// by); all in one replay. `attributor` gives the categories at the high points.
pub fn phases_and_ranges(
    trace: &Trace,
    device: Device<'_>,
    attributor: &mut Attributor<'_>,
    with_ranges: bool,
) -> (Phases, Vec<RangeHigh>) {
    let Device { id: device, events, initial } = device;
    if events.is_empty() {
        return (Phases::default(), Vec::new());
    }
    let (mut recorded, named, iteration_spans) = spans(trace, device);
    let covers = |list: &[Span]| {
        list.iter().any(|s| s.kind == PhaseKind::Forward) && list.iter().any(|s| s.kind == PhaseKind::Backward)
    };
    let mut combined: Vec<Span> = recorded.iter().chain(&named).copied().collect();
    combined.sort_by_key(|s| (s.start, s.end));
    merge_overlapping(&mut recorded);
    merge_overlapping(&mut combined);
    let (from, windows) = if covers(&recorded) {
        (PhasesFrom::Recorded, from_spans(trace, events, &recorded))
    } else if covers(&combined) {
        (PhasesFrom::Annotations, from_spans(trace, events, &combined))
    } else {
        (PhasesFrom::Stacks, from_stacks(trace, events, &combined, &iteration_spans))
    };
    let phase_windows = number_iterations(trace, windows, &iteration_spans);
    let iteration_windows = iterations_of(&phase_windows, events, trace, &iteration_spans);
    let (named_ranges, range_windows) =
        if with_ranges { first_ranges(trace, device, events) } else { (Vec::new(), Vec::new()) };
    if phase_windows.is_empty() && range_windows.is_empty() {
        return (Phases::default(), Vec::new());
    }
    let phase_count = phase_windows.len();
    let iteration_count = iteration_windows.len();
    let mut all: Vec<Window> = phase_windows;
    all.extend(iteration_windows);
    all.extend(range_windows);
    let mut highs = high_points(trace, device, events, initial, &all);
    let ranges_highs = highs.split_off(phase_count + iteration_count);
    let ranges = named_ranges
        .into_iter()
        .zip(ranges_highs)
        .map(|((name, start_ns, end_ns), h)| RangeHigh { name, start_ns, end_ns, high_bytes: h.high_bytes })
        .collect();
    if phase_count == 0 {
        return (Phases::default(), ranges);
    }
    with_categories(trace, events, initial, attributor, &mut highs, phase_count);
    let iterations = highs.split_off(phase_count);
    (Phases { from: Some(from), phases: highs, iterations }, ranges)
}

/// The first of each user range by name (at most [`MAX_RANGES`]) and its window of events.
type NamedRanges = (Vec<(String, i64, i64)>, Vec<Window>);

fn first_ranges(trace: &Trace, device: DeviceId, events: &[u32]) -> NamedRanges {
    let mut seen = std::collections::BTreeSet::new();
    let (mut names, mut windows) = (Vec::new(), Vec::new());
    let mut ranges: Vec<&vramscope_trace_format::Annotation> = trace
        .annotations
        .iter()
        .filter(|a| a.kind == AnnotationKind::UserRange && a.end_ns > a.start_ns)
        .filter(|a| a.applies_to(device) || a.device == Some(DeviceId::HOST))
        .collect();
    ranges.sort_by_key(|a| a.start_ns);
    for a in ranges {
        let name = trace.interner.resolve(a.name);
        if name.is_empty() || names.len() >= MAX_RANGES || !seen.insert(name) {
            continue;
        }
        let (from, to) =
            (position_at(trace, events, a.start_ns), position_at(trace, events, a.end_ns.saturating_add(1)));
        if let (Some(&first), Some(&last)) = (events.get(from), to.checked_sub(1).and_then(|p| events.get(p)))
            && to > from
        {
            windows.push(Window { kind: None, iteration: 0, first: first as usize, last: last as usize });
            names.push((name.to_owned(), a.start_ns, a.end_ns));
        }
    }
    (names, windows)
}

/// Ranges compared by name at most.
pub const MAX_RANGES: usize = 64;

/// A named range's first occurrence and its high point.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RangeHigh {
    /// Its name.
    pub name: String,
    /// Its start on the trace's clock.
    #[serde(skip)]
    pub start_ns: i64,
    /// Its end.
    #[serde(skip)]
    pub end_ns: i64,
    /// The most allocated inside it (or when it began).
    pub high_bytes: u64,
}

/// The recorded phase spans, the ranges named like phases, and the iteration spans, applying to
/// `device`, each sorted by start.
fn spans(trace: &Trace, device: DeviceId) -> (Vec<Span>, Vec<Span>, Vec<(i64, i64)>) {
    let (mut recorded, mut named, mut iterations) = (Vec::new(), Vec::new(), Vec::new());
    // The host's ranges count for every device: the CPU thread inside `record_function` or an
    // optimizer step makes the allocations on the GPU too (the caching allocator answers on it).
    for a in trace.annotations.iter().filter(|a| a.applies_to(device) || a.device == Some(DeviceId::HOST)) {
        let span = |kind| Span { start: a.start_ns, end: a.end_ns.max(a.start_ns), kind };
        match a.kind {
            AnnotationKind::Forward => recorded.push(span(PhaseKind::Forward)),
            AnnotationKind::Backward => recorded.push(span(PhaseKind::Backward)),
            AnnotationKind::OptimizerStep => recorded.push(span(PhaseKind::OptimizerStep)),
            AnnotationKind::Iteration => iterations.push((a.start_ns, a.end_ns.max(a.start_ns))),
            AnnotationKind::UserRange | AnnotationKind::Op => {
                let name = trace.interner.resolve(a.name);
                if is_iteration_name(name) {
                    iterations.push((a.start_ns, a.end_ns.max(a.start_ns)));
                } else if let Some(kind) = phase_of_name(name) {
                    named.push(span(kind));
                }
            }
            _ => {}
        }
    }
    for list in [&mut recorded, &mut named] {
        list.sort_by_key(|s| (s.start, s.end));
    }
    iterations.sort_unstable();
    iterations.dedup();
    (recorded, named, iterations)
}

/// Spans of one kind that overlap (nested ranges) are one; so are a profiler's backward
/// operators one after another with nothing of another phase between and a short gap (at most
/// 100 µs or a quarter of the backward so far: the next iteration's backward is a forward away).
fn merge_overlapping(list: &mut Vec<Span>) {
    let mut out: Vec<Span> = Vec::with_capacity(list.len());
    for s in list.drain(..) {
        match out.last_mut() {
            Some(last) if last.kind == s.kind && s.start <= last.end => last.end = last.end.max(s.end),
            Some(last)
                if last.kind == s.kind
                    && s.kind == PhaseKind::Backward
                    && s.start.saturating_sub(last.end) <= (last.end.saturating_sub(last.start) / 4).max(100_000) =>
            {
                last.end = last.end.max(s.end);
            }
            _ => out.push(s),
        }
    }
    *list = out;
}

/// The position in `events` of the first event at or after `time_ns`.
fn position_at(trace: &Trace, events: &[u32], time_ns: i64) -> usize {
    events.partition_point(|&i| trace.events.get(i as usize).is_some_and(|e| e.time_ns < time_ns))
}

/// Windows from spans: each span's events; forward reaches to the backward right after it.
fn from_spans(trace: &Trace, events: &[u32], spans: &[Span]) -> Vec<Window> {
    let mut out: Vec<Window> = Vec::new();
    for (k, s) in spans.iter().enumerate() {
        let mut end = s.end;
        if s.kind == PhaseKind::Forward
            && let Some(next) = spans.get(k + 1).filter(|n| n.kind == PhaseKind::Backward)
        {
            end = end.max(next.start.saturating_sub(1));
        }
        let from = position_at(trace, events, s.start);
        let to = position_at(trace, events, end.saturating_add(1));
        if to > from
            && let (Some(&first), Some(&last)) = (events.get(from), events.get(to - 1))
        {
            out.push(Window { kind: Some(s.kind), iteration: 0, first: first as usize, last: last as usize });
        }
    }
    out
}

/// Numbers the iterations of `windows` (in time order) and takes micro-batches together: the
/// recorded iteration span holding each; else a forward after an optimizer step begins one
/// (after a backward, when there is no optimizer step), as does a backward right after a step.
fn number_iterations(trace: &Trace, windows: Vec<Window>, iterations: &[(i64, i64)]) -> Vec<Window> {
    let has_step = windows.iter().any(|w| w.kind == Some(PhaseKind::OptimizerStep));
    let mut out = Vec::with_capacity(windows.len());
    let (mut iteration, mut previous) = (0u32, None::<PhaseKind>);
    for mut w in windows {
        let Some(kind) = w.kind else { continue };
        if iterations.is_empty() {
            let begins = match (previous, kind) {
                (None, _) => true,
                (Some(PhaseKind::OptimizerStep), PhaseKind::Forward | PhaseKind::Backward) => true,
                (Some(PhaseKind::Backward), PhaseKind::Forward) => !has_step,
                _ => false,
            };
            if begins {
                iteration += 1;
            }
        } else {
            let start = trace.events.get(w.first).map_or(0, |e| e.time_ns);
            iteration = iterations.partition_point(|it| it.0 <= start).max(1) as u32;
        }
        previous = Some(kind);
        w.iteration = iteration;
        out.push(w);
    }
    merge_micro_batches(out)
}

/// Windows from the allocations' stacks (and the phase ranges that cover them).
fn from_stacks(trace: &Trace, events: &[u32], known: &[Span], iterations: &[(i64, i64)]) -> Vec<Window> {
    let python_only = python_only_stacks(trace, events);
    let in_span = |t: i64| {
        let k = known.partition_point(|s| s.start <= t);
        k.checked_sub(1).and_then(|k| known.get(k)).filter(|s| t <= s.end).map(|s| s.kind)
    };
    // The latest end of the optimizer steps begun by a time: a running maximum over their starts.
    let mut steps: Vec<(i64, i64)> = Vec::new();
    for s in known.iter().filter(|s| s.kind == PhaseKind::OptimizerStep) {
        let end = steps.last().map_or(s.end, |&(_, e)| e.max(s.end));
        steps.push((s.start, end));
    }
    let step_end = |t: i64| {
        let k = steps.partition_point(|&(start, _)| start <= t);
        k.checked_sub(1).and_then(|k| steps.get(k)).map(|&(_, end)| end)
    };
    let mut by_stack: rustc_hash::FxHashMap<StackId, Label> = rustc_hash::FxHashMap::default();
    let mut windows: Vec<Window> = Vec::new();
    let mut current: Option<PhaseKind> = None;
    let mut last_iteration_span = 0usize;
    for &i in events {
        let Some(e) = trace.events.get(i as usize).filter(|e| e.kind == EventKind::Alloc) else { continue };
        let (i, t) = (i as usize, e.time_ns);
        let label = match in_span(t) {
            Some(kind) => Label::Phase(kind),
            None => *by_stack.entry(e.stack).or_insert_with(|| stack_label(trace, e.stack)),
        };
        let span_index = iterations.partition_point(|it| it.0 <= t);
        let new_iteration_span = !iterations.is_empty() && span_index != last_iteration_span;
        last_iteration_span = span_index;
        let next = match (current, label) {
            (_, Label::Phase(kind)) => Some(kind),
            (Some(PhaseKind::Forward | PhaseKind::Backward), Label::Empty) if python_only => Some(PhaseKind::Backward),
            // A new recorded iteration (a profiler step) begins with its forward.
            (_, _) if new_iteration_span => Some(PhaseKind::Forward),
            (Some(PhaseKind::OptimizerStep), Label::Other) => Some(PhaseKind::Forward),
            (Some(PhaseKind::OptimizerStep), Label::Empty) if step_end(t).is_some_and(|end| t > end) => {
                Some(PhaseKind::Forward)
            }
            (current, _) => current,
        };
        let Some(kind) = next else { continue };
        if current != Some(kind) || new_iteration_span {
            windows.push(Window { kind: Some(kind), iteration: 0, first: i, last: i });
            current = Some(kind);
        }
    }
    // Without stacks, the first backward's forward shows nothing: it is what came before it.
    if let (Some(first), Some(&start)) = (windows.first(), events.first())
        && first.kind == Some(PhaseKind::Backward)
        && first.first > start as usize
    {
        windows.insert(
            0,
            Window { kind: Some(PhaseKind::Forward), iteration: 0, first: start as usize, last: start as usize },
        );
    }
    // The last phase runs to the device's last event.
    if let (Some(open), Some(&end)) = (windows.last_mut(), events.last()) {
        open.last = end as usize;
    }
    // A window ends at the event before the next one's first (frees belong to the phase before).
    let firsts: Vec<usize> = windows.iter().map(|w| w.first).collect();
    for (k, w) in windows.iter_mut().enumerate() {
        if let Some(&next) = firsts.get(k + 1) {
            let before = events.partition_point(|&e| (e as usize) < next);
            w.last = before.checked_sub(1).and_then(|p| events.get(p)).map_or(w.first, |&e| e as usize).max(w.first);
        }
    }
    windows
}

/// Whether the device's allocations carry Python frames only (no native ones): then autograd's
/// threads show as allocations without frames.
fn python_only_stacks(trace: &Trace, events: &[u32]) -> bool {
    let interner = &trace.interner;
    let mut seen = rustc_hash::FxHashSet::default();
    let mut any_python = false;
    for &i in events {
        let Some(e) = trace.events.get(i as usize).filter(|e| e.kind == EventKind::Alloc) else { continue };
        if !seen.insert(e.stack) {
            continue;
        }
        for &f in interner.frames_of(e.stack) {
            let Some(frame) = interner.frame_of(f) else { continue };
            if interner.resolve(frame.file).ends_with(".py") {
                any_python = true;
            } else {
                return false;
            }
        }
    }
    any_python
}

/// Phases of one kind in one iteration (micro-batches) taken as one window.
fn merge_micro_batches(windows: Vec<Window>) -> Vec<Window> {
    let mut out: Vec<Window> = Vec::with_capacity(windows.len());
    for w in windows {
        // Windows come in time order: one of the same iteration is among the last ones.
        let same = out.iter_mut().rev().take_while(|o| o.iteration == w.iteration).find(|o| o.kind == w.kind);
        if let Some(same) = same {
            same.first = same.first.min(w.first);
            same.last = same.last.max(w.last);
        } else {
            out.push(w);
        }
    }
    out
}

/// Each iteration's window: a recorded iteration span's events, else from its first phase's
/// first event to the event before the next iteration's.
fn iterations_of(phases: &[Window], events: &[u32], trace: &Trace, spans: &[(i64, i64)]) -> Vec<Window> {
    let mut out: Vec<Window> = Vec::new();
    for w in phases {
        match out.last_mut() {
            Some(it) if it.iteration == w.iteration => {
                it.first = it.first.min(w.first);
                it.last = it.last.max(w.last);
            }
            _ => out.push(Window { kind: None, ..*w }),
        }
    }
    if !spans.is_empty() {
        for it in &mut out {
            if let Some(&(start, end)) = (it.iteration as usize).checked_sub(1).and_then(|k| spans.get(k)) {
                let (from, to) = (position_at(trace, events, start), position_at(trace, events, end.saturating_add(1)));
                if let (Some(&first), Some(&last)) = (events.get(from), to.checked_sub(1).and_then(|p| events.get(p)))
                    && last >= first
                {
                    it.first = it.first.min(first as usize);
                    it.last = it.last.max(last as usize);
                }
            }
        }
    } else {
        let firsts: Vec<usize> = out.iter().map(|w| w.first).collect();
        for (k, it) in out.iter_mut().enumerate() {
            if let Some(&next) = firsts.get(k + 1) {
                let before = events.partition_point(|&e| (e as usize) < next);
                if let Some(&e) = before.checked_sub(1).and_then(|p| events.get(p)) {
                    it.last = it.last.max(e as usize);
                }
            }
        }
    }
    out
}

/// The high point of each window, in one replay.
fn high_points(
    trace: &Trace,
    device: DeviceId,
    events: &[u32],
    initial: &replay::Initial,
    windows: &[Window],
) -> Vec<PhaseHigh> {
    let mut order: Vec<usize> = (0..windows.len()).collect();
    order.sort_by_key(|&k| windows.get(k).map_or(0, |w| w.first));
    let mut highs: Vec<Option<(u64, i64, Option<usize>)>> = vec![None; windows.len()];
    let mut next_open = 0usize;
    let mut open: Vec<usize> = Vec::new();
    let mut previous: Option<(u64, i64, Option<usize>)> = None;
    replay::replay_from(trace, device, events, initial, |event, point| {
        let now = (point.allocated_bytes, point.time_ns, event);
        if let Some(i) = event {
            // Windows opening at this event start from the state before it.
            while let Some(&k) = order.get(next_open) {
                if windows.get(k).is_none_or(|w| w.first > i) {
                    break;
                }
                if let Some(slot) = highs.get_mut(k) {
                    *slot = previous.or(Some(now));
                }
                open.push(k);
                next_open += 1;
            }
            open.retain(|&k| {
                let Some(w) = windows.get(k) else { return false };
                if w.last < i {
                    return false;
                }
                if let Some(slot) = highs.get_mut(k)
                    && slot.is_none_or(|h| now.0 > h.0)
                {
                    *slot = Some(now);
                }
                true
            });
        }
        previous = Some(now);
    });
    windows
        .iter()
        .zip(highs)
        .map(|(w, high)| {
            let (high_bytes, high_time_ns, high_event) = high.unwrap_or((0, 0, None));
            let time = |i: usize| trace.events.get(i).map_or(0, |e| e.time_ns);
            PhaseHigh {
                kind: w.kind,
                iteration: w.iteration,
                start_ns: time(w.first),
                end_ns: time(w.last),
                first_event: w.first,
                last_event: w.last,
                high_bytes,
                high_time_ns,
                high_event,
                categories: None,
            }
        })
        .collect()
}

/// Bytes by category at each high point, in one pass over the events: all of them up to
/// [`MAX_WITH_CATEGORIES`], past that each kind's highest and the highest iteration.
fn with_categories(
    trace: &Trace,
    events: &[u32],
    initial: &replay::Initial,
    attributor: &mut Attributor<'_>,
    highs: &mut [PhaseHigh],
    phase_count: usize,
) {
    let mut wanted: Vec<usize> = if highs.len() <= MAX_WITH_CATEGORIES {
        (0..highs.len()).collect()
    } else {
        let (phases, iterations) = highs.split_at(phase_count.min(highs.len()));
        let mut picked: Vec<usize> = PhaseKind::ALL
            .into_iter()
            .filter_map(|kind| {
                phases
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.kind == Some(kind))
                    .max_by_key(|(k, p)| (p.high_bytes, std::cmp::Reverse(*k)))
                    .map(|(k, _)| k)
            })
            .collect();
        if let Some((k, _)) = iterations.iter().enumerate().max_by_key(|(k, p)| (p.high_bytes, std::cmp::Reverse(*k))) {
            picked.push(phase_count + k);
        }
        picked
    };
    wanted.sort_by_key(|&k| highs.get(k).map(|h| h.high_event));
    let targets: Vec<(usize, Option<usize>, i64)> =
        wanted.iter().filter_map(|&k| highs.get(k).map(|h| (k, h.high_event, h.high_time_ns))).collect();
    let at: Vec<Option<usize>> = targets.iter().map(|t| t.1).collect();
    crate::peak::live_at_each_from(trace, events, initial, &at, |n, blocks| {
        let Some(&(k, _, time_ns)) = targets.get(n) else { return };
        let mut totals: BTreeMap<&'static str, u64> = BTreeMap::new();
        for b in &blocks {
            let alloc_ns = b.alloc_event.and_then(|i| trace.events.get(i)).map_or(i64::MIN, |e| e.time_ns);
            let category = attributor.block(b.address, alloc_ns, time_ns, b.stack).category;
            *totals.entry(category.name()).or_insert(0) += b.size_bytes;
        }
        totals.retain(|_, v| *v > 0);
        if let Some(h) = highs.get_mut(k) {
            h.categories = Some(totals);
        }
    });
}

#[cfg(test)]
mod tests {
    use vramscope_trace_format::Event;

    use super::*;
    use crate::testing::{span, stack};

    /// Allocates `size` at `address` at time `t` (with `stack`), or frees it when `size` is 0.
    fn event(trace: &mut Trace, t: i64, address: u64, size: u64, stack: StackId) {
        let kind = if size == 0 { EventKind::FreeCompleted } else { EventKind::Alloc };
        let size = if size == 0 {
            trace.events.iter().rev().find(|e| e.address == address).map_or(0, |e| e.size_bytes)
        } else {
            size
        };
        let mut e = Event::new(kind, t, DeviceId(0), address, size);
        e.requested_bytes = size;
        e.stack = stack;
        trace.events.push(e);
    }

    fn summary(p: &Phases) -> Vec<(u32, Option<&'static str>, u64)> {
        p.phases.iter().chain(&p.iterations).map(|h| (h.iteration, h.kind.map(PhaseKind::name), h.high_bytes)).collect()
    }

    /// Two steps with recorded spans: forward allocates 100 + 50 (the loss after forward's span
    /// still counts as forward), backward frees them and allocates 30, the step allocates 200
    /// once (state) and 10 each time.
    fn recorded() -> Trace {
        let mut trace = Trace::default();
        let none = StackId(0);
        for (i, base) in [0i64, 1000].into_iter().enumerate() {
            span(&mut trace, AnnotationKind::Forward, "forward", base, base + 100);
            span(&mut trace, AnnotationKind::Backward, "backward", base + 200, base + 300);
            span(&mut trace, AnnotationKind::OptimizerStep, "AdamW", base + 400, base + 500);
            event(&mut trace, base + 10, 0x1000, 100, none);
            event(&mut trace, base + 150, 0x2000, 50, none);
            event(&mut trace, base + 210, 0x1000, 0, none);
            event(&mut trace, base + 220, 0x3000, 30, none);
            event(&mut trace, base + 230, 0x2000, 0, none);
            if i == 0 {
                event(&mut trace, base + 410, 0x4000, 200, none);
            }
            event(&mut trace, base + 420, 0x5000, 10, none);
            event(&mut trace, base + 430, 0x5000, 0, none);
            event(&mut trace, base + 440, 0x3000, 0, none);
        }
        trace.events.sort_by_key(|e| e.time_ns);
        trace
    }

    #[test]
    fn recorded_phases_have_the_high_points_computed_by_hand() {
        let trace = recorded();
        let p = phases(&trace, DeviceId(0));
        assert_eq!(p.from, Some(PhasesFrom::Recorded));
        assert_eq!(
            summary(&p),
            [
                // Forward: 100 + 50 (the loss at 150, before backward began at 200).
                (1, Some("forward"), 150),
                // Backward opens at 150 and frees before it allocates.
                (1, Some("backward"), 150),
                // The step: 30 gradients + 200 state + 10.
                (1, Some("optimizer_step"), 240),
                (2, Some("forward"), 200 + 150),
                (2, Some("backward"), 350),
                (2, Some("optimizer_step"), 240),
                (1, None, 240),
                (2, None, 350),
            ]
        );
        assert_eq!(p.highest(PhaseKind::Forward).map(|h| h.iteration), Some(2));
        // Categories at each high point, from the attribution (no tags or stacks: by phase).
        let step = p.highest(PhaseKind::OptimizerStep).and_then(|h| h.categories.as_ref()).expect("categories");
        assert_eq!(step.values().sum::<u64>(), 240);
    }

    #[test]
    fn micro_batches_of_one_iteration_are_one_phase_each() {
        let mut trace = Trace::default();
        let none = StackId(0);
        for (k, base) in [0i64, 300].into_iter().enumerate() {
            span(&mut trace, AnnotationKind::Forward, "forward", base, base + 100);
            span(&mut trace, AnnotationKind::Backward, "backward", base + 150, base + 250);
            event(&mut trace, base + 10, 0x1000 + k as u64, 100 * (k as u64 + 1), none);
            event(&mut trace, base + 200, 0x1000 + k as u64, 0, none);
        }
        span(&mut trace, AnnotationKind::OptimizerStep, "SGD", 700, 800);
        event(&mut trace, 710, 0x9000, 5, none);
        trace.events.sort_by_key(|e| e.time_ns);
        let p = phases(&trace, DeviceId(0));
        assert_eq!(
            summary(&p),
            [(1, Some("forward"), 200), (1, Some("backward"), 200), (1, Some("optimizer_step"), 5), (1, None, 200)]
        );
    }

    #[test]
    fn stacks_tell_the_phases_of_a_snapshot_with_python_frames_only() {
        let mut trace = Trace::default();
        let fwd = stack(&mut trace, &[("model.py", "forward"), ("train.py", "main")]);
        let setup = stack(&mut trace, &[("train.py", "main")]);
        let optim = stack(&mut trace, &[("/venv/torch/optim/adamw.py", "_init_group"), ("train.py", "main")]);
        let autograd_thread = StackId(0);
        event(&mut trace, 1, 0x100, 1000, setup); // the model
        event(&mut trace, 2, 0x200, 40, fwd);
        event(&mut trace, 3, 0x300, 60, fwd);
        event(&mut trace, 4, 0x400, 7, autograd_thread); // backward: no Python frames
        event(&mut trace, 5, 0x200, 0, fwd);
        event(&mut trace, 6, 0x500, 300, optim);
        event(&mut trace, 7, 0x500, 0, optim);
        event(&mut trace, 8, 0x600, 20, fwd); // the next iteration
        let p = phases(&trace, DeviceId(0));
        assert_eq!(p.from, Some(PhasesFrom::Stacks));
        assert_eq!(
            summary(&p),
            [
                (1, Some("forward"), 1100),
                (1, Some("backward"), 1107),
                (1, Some("optimizer_step"), 1367),
                (2, Some("forward"), 1087),
                (1, None, 1367),
                (2, None, 1087),
            ]
        );
        // With native frames somewhere, a frameless allocation says nothing: it stays in forward.
        let native = stack(&mut trace, &[("??", "at::native::empty"), ("model.py", "forward")]);
        if let Some(e) = trace.events.get_mut(2) {
            e.stack = native;
        }
        let p = phases(&trace, DeviceId(0));
        assert_eq!(
            p.phases.iter().map(|h| h.kind.map(PhaseKind::name)).collect::<Vec<_>>(),
            [Some("forward"), Some("optimizer_step"), Some("forward")]
        );
    }

    #[test]
    fn ranges_named_like_phases_are_phases() {
        assert_eq!(phase_of_name("Optimizer.step#AdamW.step"), Some(PhaseKind::OptimizerStep));
        assert_eq!(phase_of_name("## Forward ##"), Some(PhaseKind::Forward));
        assert_eq!(phase_of_name("loss.backward"), Some(PhaseKind::Backward));
        assert_eq!(phase_of_name("autograd::engine::evaluate_function: MmBackward0"), Some(PhaseKind::Backward));
        assert_eq!(phase_of_name("forward_attention"), None);
        let mut trace = recorded();
        // The same spans as user ranges (record_function, and PyTorch's own name for the
        // optimizer's step) give the same phases.
        let step = trace.interner.string("Optimizer.step#AdamW.step");
        for a in &mut trace.annotations {
            if a.kind == AnnotationKind::OptimizerStep {
                a.name = step;
            }
            a.kind = AnnotationKind::UserRange;
        }
        let p = phases(&trace, DeviceId(0));
        assert_eq!(p.from, Some(PhasesFrom::Annotations));
        assert_eq!(summary(&p), summary(&phases(&recorded(), DeviceId(0))));
    }
}
