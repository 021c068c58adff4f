//! Memory that grows every iteration: a loss kept with its graph, outputs kept for logging, a
//! cache that only fills.
//!
//! The iterations come from the recorded iteration spans, else from a repeating pattern: the
//! allocation site that recurs evenly (at least four times, each after the same number of events
//! within 10%, the first period left out) over most of the trace, each period freeing most of
//! what it allocated and reaching outside one call of a module's `forward` (the program's loop,
//! never the layers of one forward pass, whose activations are kept for backward by design), the
//! coarsest such period being taken as the iteration. The
//! allocated bytes at the start of each complete iteration are compared, leaving out the first
//! iteration (warm-up: optimizer state, workspaces, the allocator's first segments). Memory
//! grows when these starts rise across the iterations after it, in at least three of every four
//! steps, by at least [`MIN_BYTES_PER_ITERATION`] per iteration. What grows is named by the blocks
//! that survive: allocated in an iteration (after the first, before the last) and still alive
//! at the end of the last, grouped by allocation site. Reserved memory is not looked at:
//! the caching allocator keeping freed memory is not a leak.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap as HashMap;
use serde::Serialize;
use vramscope_trace_format::{AnnotationKind, DeviceId, EventKind, StackId, Trace};

use crate::instant::allocation_site;

/// Growth smaller than this per iteration is not reported (alignment, a counter, a small list).
pub const MIN_BYTES_PER_ITERATION: u64 = 64 << 10;

/// Where the iterations came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Iterations {
    /// The recorded iteration spans.
    Spans,
    /// The recorded calls of the top-level model, in a run that does not go backward
    /// (inference, evaluation): each call is an iteration.
    ModelCalls,
    /// A repeating pattern: this allocation site recurs once per period.
    Pattern {
        /// The site.
        site: String,
    },
}

/// What the growth is, as far as the trace tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Nature {
    /// Blocks allocated in one iteration are kept past the next: a leak, unless the program
    /// means to keep them.
    Kept,
    /// What is kept is a key/value cache (the attention's keys and values, kept for the next
    /// step) in a run without a backward pass: generation, by design, bounded by the sequence
    /// length or a static cache.
    KvCache,
    /// Nothing allocated in one iteration outlives the next, in a run without a backward pass:
    /// each iteration works on more (a sequence that grows), which is not memory kept.
    WorkingSet,
}

/// A site whose blocks accumulate.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct GrowingSite {
    /// `function  file:line` (or the operator, where the source records no Python stack).
    pub site: String,
    /// Bytes left alive per iteration.
    pub bytes_per_iteration: u64,
    /// Blocks left alive per iteration.
    pub blocks_per_iteration: f64,
    /// Whether its stack says it is a key/value cache (`k_proj`, `v_proj`, `past_key_values`,
    /// a `Cache` class's `update`, names with `kv_cache`, `key_cache`, `value_cache`).
    pub kv_cache: bool,
}

/// When the device's memory would be reached at the rate of growth.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Reach {
    /// The device's memory.
    pub device_bytes: u64,
    /// Iterations after the last one recorded.
    pub iterations: u64,
    /// Time after the end of the last iteration recorded (at the median iteration's length).
    pub after_ns: i64,
}

/// What the iterations of a device show.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Growth {
    /// The device.
    pub device: DeviceId,
    /// Where the iterations came from.
    pub iterations: Iterations,
    /// Complete iterations.
    pub count: usize,
    /// Allocated bytes at the start of the second iteration (the first after warm-up).
    pub steady_start_bytes: u64,
    /// Allocated bytes at the end of the last complete iteration.
    pub end_bytes: u64,
    /// When each complete iteration starts, and when the last ends.
    #[serde(skip)]
    pub boundary_ns: Vec<i64>,
    /// Allocated bytes at each boundary.
    #[serde(skip)]
    pub boundary_bytes: Vec<u64>,
    /// Median length of an iteration.
    pub iteration_ns: i64,
    /// Whether memory grows (the rest is only filled in when it does).
    pub grows: bool,
    /// What the growth is, when memory grows.
    pub nature: Nature,
    /// Growth per iteration after the first (the boundaries' least-squares slope).
    pub bytes_per_iteration: u64,
    /// The sites whose surviving blocks accumulate, most first.
    pub sites: Vec<GrowingSite>,
    /// When the device's memory would be reached, where it is known.
    pub reach: Option<Reach>,
    /// Iterations (after the first) left out of the rate and the sites because a stretch of
    /// them was not recorded (the recording's `metadata.unrecorded`).
    pub unrecorded_iterations: usize,
}

/// The iterations of `device` and whether its memory grows across them; `None` when the trace
/// shows fewer than three complete iterations (too few to tell growth from warm-up).
pub fn growth(trace: &Trace, device: DeviceId) -> Option<Growth> {
    growth_with(trace, device, &crate::replay::device_events(trace, device))
}

/// [`growth`] of a device whose events ([`crate::replay::device_events`]) the caller has.
pub fn growth_with(trace: &Trace, device: DeviceId, events: &crate::replay::DeviceEvents) -> Option<Growth> {
    let (boundary_ns, iterations) = match spans(trace, device) {
        Some(found) => found,
        None => pattern(trace, events)?,
    };
    // Iterations 0..m: the first is warm-up, the growth is measured over 1..m.
    let m = boundary_ns.len().checked_sub(1)?;
    if m < 3 {
        return None;
    }
    // A device the iterations do not allocate on (the host beside a GPU) has nothing to say.
    let (from, to) = (boundary_ns[1], boundary_ns[m]);
    let allocates = events
        .iter()
        .filter_map(|i| trace.events.get(i as usize))
        .any(|e| e.kind == EventKind::Alloc && (from..to).contains(&e.time_ns));
    if !allocates {
        return None;
    }
    let mut boundary_bytes = Vec::with_capacity(boundary_ns.len());
    // Blocks alive, by address: (alloc time, size, stack).
    let mut alive: HashMap<u64, (i64, u64, StackId)> = HashMap::default();
    let end_ns = boundary_ns[m];
    // Allocated bytes before the event visited.
    let mut before = 0;
    let two_step = trace.frees_in_two_steps(device);
    let final_point = crate::replay::replay(trace, device, |event, point| {
        let Some(e) = event.and_then(|i| trace.events.get(i)) else {
            before = point.allocated_bytes;
            return;
        };
        // The state in force at a boundary: after every event before it.
        while boundary_ns.get(boundary_bytes.len()).is_some_and(|&b| e.time_ns >= b) {
            boundary_bytes.push(before);
        }
        before = point.allocated_bytes;
        if e.time_ns >= end_ns {
            return;
        }
        match e.kind {
            EventKind::Alloc => {
                alive.insert(e.address, (e.time_ns, e.size_bytes, e.stack));
            }
            EventKind::FreeRequested | EventKind::FreeCompleted if e.ends_allocation(two_step) => {
                alive.remove(&e.address);
            }
            _ => {}
        }
    });
    // Boundaries after the last event: the final state.
    boundary_bytes.resize(boundary_ns.len(), final_point.allocated_bytes);
    let mut lengths: Vec<i64> = boundary_ns.windows(2).map(|w| w[1] - w[0]).collect();
    lengths.sort_unstable();
    let iteration_ns = lengths.get(lengths.len() / 2).copied().unwrap_or(0);
    // Iterations (1..m) with a stretch the recording did not see: what they allocated and freed
    // is partly missing, and every start after them is off by that much. The rate is then the
    // mean of the whole iterations' own changes, and only they count.
    let unrecorded: Vec<bool> = (0..m)
        .map(|k| {
            let (a, b) = (boundary_ns[k], boundary_ns[k + 1]);
            trace.metadata.unrecorded.iter().any(|g| g.device == device && g.begin_ns < b && g.end_ns > a)
        })
        .collect();
    let unrecorded_iterations = unrecorded[1..].iter().filter(|&&u| u).count();
    let (slope, rising, steps) = if unrecorded_iterations == 0 {
        let steady = &boundary_bytes[1..];
        (slope(steady), steady.windows(2).filter(|w| w[1] > w[0]).count(), steady.len() - 1)
    } else {
        let changes: Vec<f64> = (1..m)
            .filter(|&k| !unrecorded[k])
            .map(|k| boundary_bytes[k + 1] as f64 - boundary_bytes[k] as f64)
            .collect();
        let mean = if changes.is_empty() { 0.0 } else { changes.iter().sum::<f64>() / changes.len() as f64 };
        (mean, changes.iter().filter(|&&c| c > 0.0).count(), changes.len())
    };
    let grows = steps >= 2 && slope >= MIN_BYTES_PER_ITERATION as f64 && rising * 4 >= steps * 3;
    let mut result = Growth {
        device,
        iterations,
        count: m,
        steady_start_bytes: boundary_bytes[1],
        end_bytes: boundary_bytes[m],
        boundary_ns,
        boundary_bytes,
        iteration_ns,
        grows,
        nature: Nature::Kept,
        bytes_per_iteration: 0,
        sites: Vec::new(),
        reach: None,
        unrecorded_iterations,
    };
    if !grows {
        return Some(result);
    }
    result.bytes_per_iteration = slope.round() as u64;
    // Survivors of the whole iterations among 1..m-1 (each outlived at least the iteration
    // after it).
    let (from, to) = (result.boundary_ns[1], result.boundary_ns[m - 1]);
    let whole = |time: i64| {
        let k = result.boundary_ns.partition_point(|&b| b <= time).saturating_sub(1);
        !unrecorded.get(k).copied().unwrap_or(false)
    };
    let counted = ((1..m - 1).filter(|&k| !unrecorded[k]).count()).max(1) as f64;
    let mut by_stack: BTreeMap<StackId, (u64, usize)> = BTreeMap::new();
    let mut kv_by_site: BTreeMap<String, bool> = BTreeMap::new();
    let modules = ModuleSpans::of(trace);
    let mut kv_stacks: BTreeMap<StackId, bool> = BTreeMap::new();
    for &(time, size, stack) in alive.values() {
        if time >= from && time < to && whole(time) {
            let entry = by_stack.entry(stack).or_default();
            entry.0 += size;
            entry.1 += 1;
            // Evidence from the module whose forward allocated it (recordings without Python
            // stacks name the module, not the frame).
            let by_module = modules.innermost(time).is_some_and(|name| module_is_kv(trace.interner.resolve(name)));
            *kv_stacks.entry(stack).or_insert(true) &= by_module;
        }
    }
    let mut by_site: BTreeMap<String, (u64, usize)> = BTreeMap::new();
    for (stack, (bytes, blocks)) in by_stack {
        let site = allocation_site(trace, stack, true);
        let kv = looks_like_kv_cache(trace, stack) || kv_stacks.get(&stack).copied().unwrap_or(false);
        *kv_by_site.entry(site.clone()).or_insert(true) &= kv;
        let entry = by_site.entry(site).or_default();
        entry.0 += bytes;
        entry.1 += blocks;
    }
    let mut sites: Vec<GrowingSite> = by_site
        .into_iter()
        .map(|(site, (bytes, blocks))| GrowingSite {
            kv_cache: kv_by_site.get(&site).copied().unwrap_or(false),
            site,
            bytes_per_iteration: (bytes as f64 / counted).round() as u64,
            blocks_per_iteration: blocks as f64 / counted,
        })
        .filter(|s| s.bytes_per_iteration > 0)
        .collect();
    sites.sort_by(|a, b| b.bytes_per_iteration.cmp(&a.bytes_per_iteration).then_with(|| a.site.cmp(&b.site)));
    // In a run that does not train (generation, evaluation): nothing kept past the next
    // iteration is each iteration working on more (a longer sequence, a cache regrown by
    // concatenation), and all that is kept a key/value cache is generation's. In training, a
    // tensor regrown each iteration and carried to the next (outputs gathered by `torch.cat`) is
    // kept memory as much as a list is.
    let kept: u64 = sites.iter().map(|s| s.bytes_per_iteration).sum();
    let kv: u64 = sites.iter().filter(|s| s.kv_cache).map(|s| s.bytes_per_iteration).sum();
    let training = crate::phases::ran_backward(trace);
    result.nature = if sites.is_empty() && !training {
        Nature::WorkingSet
    } else if !sites.is_empty() && kv * 10 >= kept * 9 && !training {
        Nature::KvCache
    } else {
        Nature::Kept
    };
    result.sites = sites;
    let total = trace.metadata.devices.iter().find(|d| d.device == device).and_then(|d| d.total_memory_bytes);
    if let Some(device_bytes) = total {
        let peak = crate::peak::peaks(trace, device).allocated.bytes;
        let left = device_bytes.saturating_sub(peak);
        let iterations = left.div_ceil(result.bytes_per_iteration.max(1));
        let after_ns = i64::try_from(iterations).unwrap_or(i64::MAX).saturating_mul(iteration_ns);
        result.reach = Some(Reach { device_bytes, iterations, after_ns });
    }
    Some(result)
}

impl Growth {
    /// Whether the growth is one to warn of: memory kept from iteration to iteration that is
    /// not a generation's key/value cache.
    pub fn alarms(&self) -> bool {
        self.grows && self.nature == Nature::Kept
    }
}

/// The recorded module spans, for the innermost one around an instant.
struct ModuleSpans {
    /// (start, end, name), by start.
    spans: Vec<(i64, i64, vramscope_trace_format::StringId)>,
}

impl ModuleSpans {
    fn of(trace: &Trace) -> Self {
        let mut spans: Vec<_> = trace
            .annotations
            .iter()
            .filter(|a| a.kind == AnnotationKind::Module)
            .map(|a| (a.start_ns, a.end_ns, a.name))
            .collect();
        spans.sort_unstable_by_key(|s| s.0);
        Self { spans }
    }

    /// The latest-starting span around `time` among the 64 that start last before it (modules
    /// nest, so that is the innermost).
    fn innermost(&self, time: i64) -> Option<vramscope_trace_format::StringId> {
        let upto = self.spans.partition_point(|s| s.0 <= time);
        self.spans[..upto].iter().rev().take(64).find(|s| s.1 >= time).map(|s| s.2)
    }
}

/// Whether a module's name (`model.layers.0.self_attn.k_proj`) says it makes keys or values.
fn module_is_kv(name: &str) -> bool {
    const NAMES: [&str; 14] = [
        "k",
        "v",
        "wk",
        "wv",
        "key",
        "value",
        "k_proj",
        "v_proj",
        "kv",
        "kv_proj",
        "to_k",
        "to_v",
        "key_proj",
        "value_proj",
    ];
    name.rsplit('.').next().is_some_and(|last| NAMES.contains(&last))
}

/// Whether a stack's frames say it allocates a key/value cache.
fn looks_like_kv_cache(trace: &Trace, stack: StackId) -> bool {
    const MARKS: [&str; 9] =
        ["k_proj", "v_proj", "past_key", "key_cache", "value_cache", "kv_cache", "cache_utils", "keycache", "kvcache"];
    let interner = &trace.interner;
    interner.frames_of(stack).iter().filter_map(|&f| interner.frame_of(f)).any(|frame| {
        let text = format!("{} {}", interner.resolve(frame.function), interner.resolve(frame.file)).to_lowercase();
        MARKS.iter().any(|m| text.contains(m)) || (text.contains("cache") && text.contains("update"))
    })
}

/// The least-squares slope of `values` over their index.
fn slope(values: &[u64]) -> f64 {
    let n = values.len() as f64;
    if values.len() < 2 {
        return 0.0;
    }
    let mean_x = (n - 1.0) / 2.0;
    let mean_y = values.iter().map(|&v| v as f64).sum::<f64>() / n;
    let (mut num, mut den) = (0.0, 0.0);
    for (i, &v) in values.iter().enumerate() {
        let dx = i as f64 - mean_x;
        num += dx * (v as f64 - mean_y);
        den += dx * dx;
    }
    if den == 0.0 { 0.0 } else { num / den }
}

/// The recorded iterations of `device` (of every device, or its own): their starts and the end
/// of the last, when there are at least two.
fn spans(trace: &Trace, device: DeviceId) -> Option<(Vec<i64>, Iterations)> {
    let mut from = Iterations::Spans;
    let mut spans: Vec<(i64, i64)> = trace
        .annotations
        .iter()
        .filter(|a| a.kind == AnnotationKind::Iteration && a.applies_to(device))
        .map(|a| (a.start_ns, a.end_ns))
        .collect();
    // A run without iteration spans that does not go backward (inference, evaluation): each
    // recorded call of the top-level model is an iteration.
    if spans.len() < 2 && !trace.annotations.iter().any(|a| a.kind == AnnotationKind::Backward) {
        spans = trace
            .annotations
            .iter()
            .filter(|a| a.kind == AnnotationKind::Forward && a.applies_to(device))
            .map(|a| (a.start_ns, a.end_ns))
            .collect();
        from = Iterations::ModelCalls;
    }
    if spans.len() < 2 {
        return None;
    }
    spans.sort_unstable();
    spans.dedup();
    let mut boundaries: Vec<i64> = spans.iter().map(|s| s.0).collect();
    // An iteration of a loop that calls the model runs from one call to the next (what the loop
    // does with the output is in it): the last call, whose loop body is not delimited, is not a
    // whole iteration.
    if from == Iterations::Spans {
        boundaries.push(spans.last().map_or(0, |s| s.1));
    }
    (boundaries.len() >= 2).then_some((boundaries, from))
}

/// Iterations from a repeating pattern: the allocation site (with a recorded stack) that recurs
/// at least four times, every time after the same number of the device's events (within 10% of
/// the median; the first period left out: warm-up), over most of the trace (60% of its
/// span), each period freeing most of what it allocated (half its bytes, in three periods of
/// four): what an iteration does, and reaching outside one call of a module's `forward` (an
/// iteration is the program's loop, never the layers inside one call: [`inside_one_call`]).
/// The longest such period is taken. A site that repeats per layer of the forward pass fails
/// these: every allocation of its period is inside the model's `forward`, and the activations
/// each layer saves for backward outlive its period.
fn pattern(trace: &Trace, events: &crate::replay::DeviceEvents) -> Option<(Vec<i64>, Iterations)> {
    // Where each site allocates, by position among the device's events: a loop does the same
    // allocations each time round, so positions repeat evenly where times (a busy machine, a
    // profiler draining) need not.
    // Positions are kept only for the sites that could be it (four to 100,000 allocations), the
    // fewest-allocating first (the coarsest period), at most 256 of them: memory stays bounded
    // on a trace of tens of millions of events.
    let mut counts: HashMap<StackId, u32> = HashMap::default();
    for e in events.iter().filter_map(|i| trace.events.get(i as usize)) {
        if e.kind == EventKind::Alloc && e.stack != StackId(0) {
            *counts.entry(e.stack).or_default() += 1;
        }
    }
    let mut sites: Vec<(u32, StackId)> =
        counts.into_iter().filter(|&(_, n)| (4..=100_000).contains(&n)).map(|(s, n)| (n, s)).collect();
    sites.sort_unstable();
    sites.truncate(256);
    let mut positions: HashMap<StackId, Vec<usize>> =
        sites.iter().map(|&(n, s)| (s, Vec::with_capacity(n as usize))).collect();
    for (position, e) in events.iter().filter_map(|i| trace.events.get(i as usize)).enumerate() {
        if e.kind == EventKind::Alloc
            && let Some(at) = positions.get_mut(&e.stack)
        {
            at.push(position);
        }
    }
    let span = events.len() as f64;
    let mut candidates: Vec<(usize, StackId)> = Vec::new();
    for (&stack, at) in &positions {
        if at.len() < 4 || at.len() > 100_000 {
            continue;
        }
        let covered = at.last().copied().unwrap_or(0) - at.first().copied().unwrap_or(0);
        if (covered as f64) < 0.6 * span {
            continue;
        }
        // The first period may differ (warm-up: first calls, a lazily made optimizer state):
        // the later ones must be even.
        let mut gaps: Vec<usize> = at.windows(2).skip(1).map(|w| w[1] - w[0]).collect();
        gaps.sort_unstable();
        let median = gaps.get(gaps.len() / 2).copied().unwrap_or(0);
        if median == 0 {
            continue;
        }
        let spread = gaps.iter().map(|&g| g.abs_diff(median)).max().unwrap_or(0) as f64 / median as f64;
        if spread <= 0.1 {
            candidates.push((median, stack));
        }
    }
    // Longest period first (ties: the lowest stack id, so the choice is the same every time).
    candidates.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for (_, stack) in candidates.into_iter().take(16) {
        let at = positions.get(&stack)?;
        let boundaries: Vec<i64> = at
            .iter()
            .filter_map(|&p| events.get(p).and_then(|i| trace.events.get(i as usize)))
            .map(|e| e.time_ns)
            .collect();
        if periods_free_what_they_allocate(trace, events, &boundaries) && !inside_one_call(trace, events, &boundaries) {
            return Some((boundaries, Iterations::Pattern { site: allocation_site(trace, stack, true) }));
        }
    }
    None
}

/// Whether the periods between `boundaries` run inside one call of a module's `forward` (in
/// three of four periods with Python frames): the Python frames every allocation of a period
/// shares, outermost first, reach into a `forward` (at one line of it), so what repeats is the
/// layers of one forward pass, not the program's loop. An iteration of a training loop holds
/// allocations outside any forward (the loss, the optimizer step, the next batch), and one of
/// an inference loop calls the model from the loop, where the frames part.
fn inside_one_call(trace: &Trace, events: &crate::replay::DeviceEvents, boundaries: &[i64]) -> bool {
    let periods = boundaries.len().saturating_sub(1);
    let interner = &trace.interner;
    // Each stack's Python frames, outermost first (the module's call plumbing left out).
    let mut python: HashMap<StackId, Vec<vramscope_trace_format::FrameId>> = HashMap::default();
    let mut common: Vec<Option<Vec<vramscope_trace_format::FrameId>>> = vec![None; periods];
    let mut last_stack = vec![StackId(0); periods];
    for e in events.iter().filter_map(|i| trace.events.get(i as usize)) {
        if e.kind != EventKind::Alloc || e.stack == StackId(0) {
            continue;
        }
        let period = boundaries.partition_point(|&b| b <= e.time_ns);
        let Some(period) = period.checked_sub(1).filter(|&p| p < periods) else { continue };
        if last_stack[period] == e.stack {
            continue;
        }
        last_stack[period] = e.stack;
        let frames = python.entry(e.stack).or_insert_with(|| {
            let mut frames: Vec<_> = interner
                .frames_of(e.stack)
                .iter()
                .copied()
                .filter(|&f| {
                    interner.frame_of(f).is_some_and(|frame| {
                        let file = interner.resolve(frame.file);
                        file.ends_with(".py") && !crate::instant::is_noise_frame(file, interner.resolve(frame.function))
                    })
                })
                .collect();
            frames.reverse();
            frames
        });
        if frames.is_empty() {
            continue;
        }
        match &mut common[period] {
            None => common[period] = Some(frames.clone()),
            Some(shared) => {
                let same = shared.iter().zip(frames.iter()).take_while(|(a, b)| a == b).count();
                shared.truncate(same);
            }
        }
    }
    let is_forward = |f: &vramscope_trace_format::FrameId| {
        interner.frame_of(*f).is_some_and(|frame| interner.resolve(frame.function) == "forward")
    };
    let with_frames = common.iter().flatten().count();
    let inside = common.iter().flatten().filter(|shared| shared.iter().any(is_forward)).count();
    with_frames > 0 && inside * 4 >= with_frames * 3
}

/// Whether, in three periods of four between `boundaries`, at least half the bytes allocated
/// are freed before the period ends.
fn periods_free_what_they_allocate(trace: &Trace, events: &crate::replay::DeviceEvents, boundaries: &[i64]) -> bool {
    let periods = boundaries.len().saturating_sub(1);
    let mut allocated = vec![0u64; periods];
    let mut freed = vec![0u64; periods];
    let mut open: HashMap<u64, (usize, u64)> = HashMap::default();
    let two_step =
        events.first().and_then(|i| trace.events.get(i as usize)).is_some_and(|e| trace.frees_in_two_steps(e.device));
    for e in events.iter().filter_map(|i| trace.events.get(i as usize)) {
        let period = boundaries.partition_point(|&b| b <= e.time_ns);
        let Some(period) = period.checked_sub(1).filter(|&p| p < periods) else { continue };
        match e.kind {
            EventKind::Alloc => {
                allocated[period] += e.size_bytes;
                open.insert(e.address, (period, e.size_bytes));
            }
            EventKind::FreeRequested | EventKind::FreeCompleted if e.ends_allocation(two_step) => {
                if let Some((from, size)) = open.remove(&e.address)
                    && from == period
                {
                    freed[period] += size;
                }
            }
            _ => {}
        }
    }
    let good = allocated.iter().zip(&freed).filter(|&(&a, &f)| a > 0 && f * 2 >= a).count();
    good * 4 >= periods * 3
}

#[cfg(test)]
mod tests;
