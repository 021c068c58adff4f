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
use vramscope_trace_format::{AnnotationKind, Category, DeviceId, Trace};

use crate::attribution::Attributor;
use crate::replay;

mod highs;
mod windows;

use self::highs::high_points;
#[cfg(test)]
use self::windows::phase_of_name;
use self::windows::{
    Clock, Span, Window, from_spans, from_stacks, iterations_of, merge_overlapping, number_iterations, spans,
};

/// A phase of a training step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, schemars::JsonSchema)]
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
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
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct PhaseHigh {
    /// The phase; none for the whole iteration.
    pub kind: Option<PhaseKind>,
    /// The iteration, from 1.
    pub iteration: u32,
    /// Its first event's time on the trace's clock.
    #[serde(rename = "start_us", serialize_with = "crate::micros::ns_as_us")]
    pub start_ns: i64,
    /// Its last event's time.
    #[serde(rename = "end_us", serialize_with = "crate::micros::ns_as_us")]
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
    #[serde(rename = "high_time_us", serialize_with = "crate::micros::ns_as_us")]
    pub high_time_ns: i64,
    /// The event after which it was reached (`None`: before the device's first event).
    #[serde(skip)]
    pub high_event: Option<usize>,
    /// Bytes by category at the high point (none when not worked out: past the first
    /// `MAX_WITH_CATEGORIES` phases, only each kind's highest has them).
    pub categories: Option<BTreeMap<Category, u64>>,
}

/// Phases past this many get their categories only when they are the highest of their kind.
pub const MAX_WITH_CATEGORIES: usize = 256;

/// A device's phases and iterations.
#[derive(Clone, Debug, Default, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Phases {
    /// How they were found; none when the trace shows no phase.
    pub from: Option<PhasesFrom>,
    /// Each iteration's phases, in time order (micro-batches of one iteration taken together).
    pub phases: Vec<PhaseHigh>,
    /// Each iteration as a whole.
    pub iterations: Vec<PhaseHigh>,
    /// Whether a summary lists every phase and iteration, not only the outline (`--all-phases`).
    #[serde(skip)]
    pub listed: bool,
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

    /// Iterations found: those with a whole-iteration row, or else those any phase is numbered in.
    pub fn iteration_count(&self) -> usize {
        if self.iterations.is_empty() {
            let mut numbers: Vec<u32> = self.phases.iter().map(|p| p.iteration).collect();
            numbers.sort_unstable();
            numbers.dedup();
            numbers.len()
        } else {
            self.iterations.len()
        }
    }

    /// What a summary says of them, the same size however long the run: the counts, each kind's
    /// highest instance and the `OUTLINE_ITERATIONS` highest iterations.
    pub fn outline(&self) -> Outline<'_> {
        let mut highest_iterations: Vec<&PhaseHigh> = self.iterations.iter().collect();
        // The highest first (the first of equals), then back in time order.
        highest_iterations.sort_by(|a, b| b.high_bytes.cmp(&a.high_bytes).then(a.iteration.cmp(&b.iteration)));
        highest_iterations.truncate(OUTLINE_ITERATIONS);
        highest_iterations.sort_by_key(|p| p.iteration);
        Outline {
            from: self.from,
            iteration_count: self.iteration_count(),
            phase_count: self.phases.len(),
            highest: self.kinds().into_iter().filter_map(|k| self.highest(k)).collect(),
            highest_iterations,
            phases: self.listed.then_some(self.phases.as_slice()),
            iterations: self.listed.then_some(self.iterations.as_slice()),
        }
    }
}

/// Iterations an [`Outline`] names.
pub const OUTLINE_ITERATIONS: usize = 5;

/// A summary of a device's [`Phases`] whose size does not grow with the run.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Outline<'a> {
    /// How they were found.
    pub from: Option<PhasesFrom>,
    /// Iterations found.
    pub iteration_count: usize,
    /// Phase instances found (a kind in an iteration is one).
    pub phase_count: usize,
    /// Each kind's highest instance, in the order of a step.
    pub highest: Vec<&'a PhaseHigh>,
    /// The iterations with the highest high points, at most [`OUTLINE_ITERATIONS`], in time order.
    pub highest_iterations: Vec<&'a PhaseHigh>,
    /// Every phase, when they are listed ([`Phases::listed`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phases: Option<&'a [PhaseHigh]>,
    /// Every iteration, when they are listed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iterations: Option<&'a [PhaseHigh]>,
}

/// Whether the run went backward: a recorded backward phase, or autograd's backward in a stack
/// (its Python frames, or the engine's operators a profiler names).
pub fn ran_backward(trace: &Trace) -> bool {
    if trace.annotations.iter().any(|a| a.kind == AnnotationKind::Backward) {
        return true;
    }
    let interner = &trace.interner;
    interner.frames().iter().any(|f| {
        let function = interner.resolve(f.function);
        let file = interner.resolve(f.file);
        (function.contains("backward") && (file.contains("autograd") || file.contains("_tensor.py")))
            || function == "backward"
            || function.contains("autograd::Engine")
            || function.contains("autograd::engine")
    })
}

/// The phases of `device` and the high point of each.
pub fn phases(trace: &Trace, device: DeviceId) -> Phases {
    let events = replay::device_events(trace, device);
    if events.is_empty() {
        return Phases::default();
    }
    let initial = replay::initial_state(trace, device, &events);
    phases_of(trace, Device { id: device, events: &events, initial: &initial })
}

/// [`phases`] of a device whose events and initial state the caller has worked out.
pub fn phases_of(trace: &Trace, device: Device<'_>) -> Phases {
    if device.events.is_empty() {
        return Phases::default();
    }
    let mut attributor = Attributor::new(trace, device.id);
    attributor.prepare_persistent(device.events, device.initial);
    phases_and_ranges(trace, device, &mut attributor, false).0
}

/// A device with its events and initial state worked out (by the caller, once).
#[derive(Clone, Copy)]
pub struct Device<'a> {
    /// The device.
    pub id: DeviceId,
    /// Its events ([`replay::device_events`]).
    pub events: &'a replay::DeviceEvents,
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
    // Built only where ranges are placed among the events.
    let clock = std::cell::LazyCell::new(|| Clock::new(trace, events));
    let (from, windows) = if covers(&recorded) {
        (PhasesFrom::Recorded, from_spans(events, &clock, &recorded))
    } else if covers(&combined) {
        (PhasesFrom::Annotations, from_spans(events, &clock, &combined))
    } else {
        (PhasesFrom::Stacks, from_stacks(trace, events, &combined, &iteration_spans))
    };
    let phase_windows = number_iterations(trace, windows, &iteration_spans);
    let recorded_iterations = (!iteration_spans.is_empty()).then(|| (&*clock, iteration_spans.as_slice()));
    let iteration_windows = iterations_of(&phase_windows, events, recorded_iterations);
    let (named_ranges, range_windows) =
        if with_ranges { first_ranges(trace, device, events, &clock) } else { (Vec::new(), Vec::new()) };
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
    (Phases { from: Some(from), phases: highs, iterations, listed: false }, ranges)
}

/// The first of each user range by name (at most [`MAX_RANGES`]) and its window of events.
type NamedRanges = (Vec<(String, i64, i64)>, Vec<Window>);

fn first_ranges(trace: &Trace, device: DeviceId, events: &replay::DeviceEvents, clock: &Clock) -> NamedRanges {
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
        let from = clock.position_at(a.start_ns);
        let to = clock.position_from(from, a.end_ns.saturating_add(1));
        if let (Some(first), Some(last)) = (events.get(from), to.checked_sub(1).and_then(|p| events.get(p)))
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
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

/// Bytes by category at each high point, in one pass over the events: all of them up to
/// [`MAX_WITH_CATEGORIES`], past that each kind's highest and the highest iteration.
fn with_categories(
    trace: &Trace,
    events: &replay::DeviceEvents,
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
        let mut totals: BTreeMap<Category, u64> = BTreeMap::new();
        for b in &blocks {
            let alloc_ns = b.alloc_event.and_then(|i| trace.events.get(i)).map_or(i64::MIN, |e| e.time_ns);
            let category = attributor.block(b.address, alloc_ns, time_ns, b.stack).category;
            *totals.entry(category).or_insert(0) += b.size_bytes;
        }
        totals.retain(|_, v| *v > 0);
        if let Some(h) = highs.get_mut(k) {
            h.categories = Some(totals);
        }
    });
}

#[cfg(test)]
mod tests;
