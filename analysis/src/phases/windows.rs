//! Where the phases are: spans recorded or named like phases, or each allocation's stack, turned
//! into windows of a device's events, numbered by iteration.

use vramscope_trace_format::{AnnotationKind, DeviceId, EventKind, StackId, StringId, Trace};

use super::PhaseKind;

/// What an allocation shows of its phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Label {
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

pub(super) fn is_iteration_name(name: &str) -> bool {
    name.starts_with("ProfilerStep#")
}

/// The label the frames of `stack` give.
pub(super) fn stack_label(trace: &Trace, stack: StackId) -> Label {
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
pub(super) struct Span {
    pub(super) start: i64,
    pub(super) end: i64,
    pub(super) kind: PhaseKind,
}

/// A window of trace events with its label, before its high point is known.
#[derive(Clone, Copy, Debug)]
pub(super) struct Window {
    pub(super) kind: Option<PhaseKind>,
    pub(super) iteration: u32,
    pub(super) first: usize,
    pub(super) last: usize,
}

/// The recorded phase spans, the ranges named like phases, and the iteration spans, applying to
/// `device`, each sorted by start.
pub(super) fn spans(trace: &Trace, device: DeviceId) -> (Vec<Span>, Vec<Span>, Vec<(i64, i64)>) {
    let (mut recorded, mut named, mut iterations) = (Vec::new(), Vec::new(), Vec::new());
    // What each name says, worked out once: a long run repeats a few names a million times.
    let mut said: rustc_hash::FxHashMap<StringId, (bool, Option<PhaseKind>)> = rustc_hash::FxHashMap::default();
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
                let (iteration, phase) = *said.entry(a.name).or_insert_with(|| {
                    let name = trace.interner.resolve(a.name);
                    (is_iteration_name(name), phase_of_name(name))
                });
                if iteration {
                    iterations.push((a.start_ns, a.end_ns.max(a.start_ns)));
                } else if let Some(kind) = phase {
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
pub(super) fn merge_overlapping(list: &mut Vec<Span>) {
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

/// A device's event times in order: positions in its events by time, without reading the
/// events themselves (a long run has hundreds of thousands of ranges to place among millions
/// of events).
pub(super) struct Clock {
    times: Vec<i64>,
}

impl Clock {
    pub(super) fn new(trace: &Trace, events: &crate::replay::DeviceEvents) -> Self {
        Self { times: events.iter().map(|i| trace.events.get(i as usize).map_or(i64::MAX, |e| e.time_ns)).collect() }
    }

    /// The position in the events of the first event at or after `time_ns`.
    pub(super) fn position_at(&self, time_ns: i64) -> usize {
        self.times.partition_point(|&t| t < time_ns)
    }

    /// [`Clock::position_at`], searched for from `from` onwards (times asked for in order are
    /// found near the last answer).
    pub(super) fn position_from(&self, from: usize, time_ns: i64) -> usize {
        partition_from(&self.times, from, |&t| t < time_ns)
    }
}

/// `items.partition_point(below)`, searched for from `from` onwards: doubling steps, then a
/// binary search within the last one (answers asked for in order lie near each other). The
/// whole is searched when the answer lies before `from`.
pub(super) fn partition_from<T>(items: &[T], from: usize, below: impl Fn(&T) -> bool) -> usize {
    if from > 0 && items.get(from - 1).is_none_or(|item| !below(item)) {
        return items.partition_point(below);
    }
    let len = items.len();
    let (mut low, mut high, mut step) = (from, from, 1usize);
    while high < len && items.get(high).is_some_and(&below) {
        low = high + 1;
        high = from.saturating_add(step);
        step = step.saturating_mul(2);
    }
    let high = high.min(len);
    low + items.get(low..high).map_or(0, |part| part.partition_point(below))
}

/// [`partition_from`] over a device's events.
pub(super) fn events_partition_from(
    events: &crate::replay::DeviceEvents,
    from: usize,
    below: impl Fn(u32) -> bool,
) -> usize {
    match events.as_list() {
        Some(list) => partition_from(list, from, |&e| below(e)),
        None => events.partition_point(below),
    }
}

/// Windows from spans (sorted by start): each span's events; forward reaches to the backward
/// right after it.
pub(super) fn from_spans(events: &crate::replay::DeviceEvents, clock: &Clock, spans: &[Span]) -> Vec<Window> {
    let mut out: Vec<Window> = Vec::new();
    let mut previous = 0;
    for (k, s) in spans.iter().enumerate() {
        let mut end = s.end;
        if s.kind == PhaseKind::Forward
            && let Some(next) = spans.get(k + 1).filter(|n| n.kind == PhaseKind::Backward)
        {
            end = end.max(next.start.saturating_sub(1));
        }
        let from = clock.position_from(previous, s.start);
        previous = from;
        let to = clock.position_from(from, end.saturating_add(1));
        if to > from
            && let (Some(first), Some(last)) = (events.get(from), events.get(to - 1))
        {
            out.push(Window { kind: Some(s.kind), iteration: 0, first: first as usize, last: last as usize });
        }
    }
    out
}

/// Numbers the iterations of `windows` (in time order) and takes micro-batches together: the
/// recorded iteration span holding each; else a forward after an optimizer step begins one
/// (after a backward, when there is no optimizer step), as does a backward right after a step.
pub(super) fn number_iterations(trace: &Trace, windows: Vec<Window>, iterations: &[(i64, i64)]) -> Vec<Window> {
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
pub(super) fn from_stacks(
    trace: &Trace,
    events: &crate::replay::DeviceEvents,
    known: &[Span],
    iterations: &[(i64, i64)],
) -> Vec<Window> {
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
    for i in events.iter() {
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
    if let (Some(first), Some(start)) = (windows.first(), events.first())
        && first.kind == Some(PhaseKind::Backward)
        && first.first > start as usize
    {
        windows.insert(
            0,
            Window { kind: Some(PhaseKind::Forward), iteration: 0, first: start as usize, last: start as usize },
        );
    }
    // The last phase runs to the device's last event.
    if let (Some(open), Some(end)) = (windows.last_mut(), events.last()) {
        open.last = end as usize;
    }
    // A window ends at the event before the next one's first (frees belong to the phase before).
    let firsts: Vec<usize> = windows.iter().map(|w| w.first).collect();
    for (k, w) in windows.iter_mut().enumerate() {
        if let Some(&next) = firsts.get(k + 1) {
            let before = events.partition_point(|e| (e as usize) < next);
            w.last = before.checked_sub(1).and_then(|p| events.get(p)).map_or(w.first, |e| e as usize).max(w.first);
        }
    }
    windows
}

/// Whether the device's allocations carry Python frames only (no native ones): then autograd's
/// threads show as allocations without frames.
pub(super) fn python_only_stacks(trace: &Trace, events: &crate::replay::DeviceEvents) -> bool {
    let interner = &trace.interner;
    let mut seen = rustc_hash::FxHashSet::default();
    let mut any_python = false;
    for i in events.iter() {
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
pub(super) fn merge_micro_batches(windows: Vec<Window>) -> Vec<Window> {
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

/// Each iteration's window: a recorded iteration span's events (`recorded`: the spans, and the
/// clock that places them), else from its first phase's first event to the event before the next
/// iteration's.
pub(super) fn iterations_of(
    phases: &[Window],
    events: &crate::replay::DeviceEvents,
    recorded: Option<(&Clock, &[(i64, i64)])>,
) -> Vec<Window> {
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
    if let Some((clock, spans)) = recorded {
        for it in &mut out {
            if let Some(&(start, end)) = (it.iteration as usize).checked_sub(1).and_then(|k| spans.get(k)) {
                let from = clock.position_at(start);
                let to = clock.position_from(from, end.saturating_add(1));
                if let (Some(first), Some(last)) = (events.get(from), to.checked_sub(1).and_then(|p| events.get(p)))
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
                let before = events.partition_point(|e| (e as usize) < next);
                if let Some(e) = before.checked_sub(1).and_then(|p| events.get(p)) {
                    it.last = it.last.max(e as usize);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::Clock;

    #[test]
    fn a_search_from_a_position_finds_what_the_whole_search_finds() {
        // Times with repeats, as events sharing a timestamp have.
        let times: Vec<i64> = [1, 1, 2, 5, 5, 5, 8, 9, 9, 20, 21, 21, 40].to_vec();
        let clock = Clock { times: times.clone() };
        for time in -1..45 {
            let expected = times.partition_point(|&t| t < time);
            assert_eq!(clock.position_at(time), expected, "at {time}");
            for from in 0..=times.len() + 2 {
                assert_eq!(clock.position_from(from, time), expected, "at {time} from {from}");
            }
        }
    }
}
