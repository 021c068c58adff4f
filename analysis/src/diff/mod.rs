//! Comparing two runs: at their peaks, phase by phase (the high point of forward, backward and
//! the optimizer step, and of each iteration), by category and by allocation path, and what
//! changed most (the front ends word it).
//!
//! Allocations are matched across runs by their whole stack, frames compared by function, file
//! and line ([`sites`]); phases are found in each run alone ([`crate::phases`]) and paired by
//! kind and iteration ([`phases`]).

use std::collections::BTreeMap;

use serde::Serialize;
use vramscope_trace_format::{Category, DeviceId, Trace};

use super::attribution::{Attributor, Evidence};
use super::instant;
use super::peak;
use super::phases::{PhaseKind, Phases};
use super::summary::time_on_clock;

pub mod phases;
pub mod sites;

pub use self::phases::{PhaseChange, PhaseDelta, PhaseSide};
pub use self::sites::{SiteDelta, StackBytes};

/// What was alive at one instant, as the comparison groups it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Alive {
    /// Live bytes by allocation path.
    pub stacks: Vec<StackBytes>,
    /// Live bytes by tag name (a parameter's, an optimizer state's) or, without a tag, by the
    /// module whose forward allocated it; blocks with neither are not counted.
    pub names: BTreeMap<String, u64>,
}

/// One run at its allocated peak, and at the high point of each phase.
#[derive(Clone, Debug, Default, Serialize, schemars::JsonSchema, PartialEq)]
pub struct RunPeak {
    /// The file it was read from.
    pub file: String,
    /// The device compared (the one with the highest allocated peak).
    pub device: DeviceId,
    /// Its name (`cuda:0`, `hip:1`, `host`).
    pub label: String,
    /// Allocator events in the trace, of every device (0: it saw nothing to compare).
    pub allocator_events: usize,
    /// Peak of allocated bytes.
    pub peak_allocated_bytes: u64,
    /// When it was first reached on the trace's clock (µs in the JSON; none without a clock).
    #[serde(rename = "peak_allocated_time_us", serialize_with = "crate::micros::opt_ns_as_us")]
    pub peak_allocated_clock_ns: Option<i64>,
    /// The same on the trace's clock as it is (an event index without a clock).
    #[serde(skip)]
    pub peak_allocated_time_ns: i64,
    /// The event after which the peak was first reached (`None`: before the first).
    #[serde(skip)]
    pub peak_allocated_event: Option<usize>,
    /// Peak of reserved bytes.
    pub peak_reserved_bytes: u64,
    /// Bytes by category at the allocated peak.
    pub categories_at_peak: BTreeMap<Category, u64>,
    /// Live bytes and blocks by allocation site at the peak, largest first.
    #[serde(skip)]
    pub sites: Vec<instant::SiteBytes>,
    /// What was alive at the peak, by path and by name (not worked out for a run's ranks).
    #[serde(skip)]
    pub at_peak: Alive,
    /// Whether memory grows from one iteration to the next on the device (three or more).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub growth: Option<crate::growth::Growth>,
    /// Its phases and their high points (empty when it shows none, or for a run's ranks).
    #[serde(skip)]
    pub phases: Phases,
    /// The phase the peak is in.
    #[serde(skip)]
    pub peak_phase: Option<PhaseKind>,
    /// What was alive at the highest point of each phase kind.
    #[serde(skip)]
    pub at_phase: BTreeMap<PhaseKind, Alive>,
    /// The first of each named user range and its high point (compared when a run shows no
    /// phases).
    #[serde(skip)]
    pub ranges: Vec<crate::phases::RangeHigh>,
    /// Every frame (as compared) of the run's allocations on the device: whether a line is
    /// still in the run, for telling code that moved.
    #[serde(skip)]
    pub lines: std::sync::Arc<std::collections::BTreeSet<String>>,
}

/// The device of `trace` with the highest allocated peak, and that peak's analysis.
fn best_device(trace: &Trace, device: Option<DeviceId>) -> (DeviceId, peak::Peaks) {
    let mut best: Option<(DeviceId, peak::Peaks)> = None;
    for d in trace.devices().into_iter().filter(|d| device.is_none_or(|want| want == *d)) {
        let peaks = peak::peaks(trace, d);
        if best.as_ref().is_none_or(|(_, b)| peaks.allocated.bytes > b.allocated.bytes) {
            best = Some((d, peaks));
        }
    }
    best.unwrap_or((device.unwrap_or(DeviceId(0)), peak::Peaks::default()))
}

/// One run at its peak only: the figures a run of many ranks needs of each.
pub fn run_peak(trace: &Trace, file: &str, device: Option<DeviceId>) -> RunPeak {
    let (device, peaks) = best_device(trace, device);
    let at_peak = instant::instant(trace, device, peaks.allocated.event, peaks.allocated.time_ns);
    RunPeak {
        file: file.to_owned(),
        device,
        label: trace.metadata.device_label(device),
        allocator_events: trace.events.len(),
        peak_allocated_bytes: peaks.allocated.bytes,
        peak_allocated_clock_ns: time_on_clock(trace, &peaks.allocated),
        peak_allocated_time_ns: peaks.allocated.time_ns,
        peak_allocated_event: peaks.allocated.event,
        peak_reserved_bytes: peaks.reserved.bytes,
        categories_at_peak: at_peak.by_category.iter().map(|(c, v)| (*c, *v)).collect(),
        sites: instant::by_site(trace, &at_peak.blocks),
        at_peak: Alive::default(),
        growth: crate::growth::growth(trace, device),
        phases: Phases::default(),
        peak_phase: None,
        at_phase: BTreeMap::new(),
        ranges: Vec::new(),
        lines: std::sync::Arc::default(),
    }
}

/// One run as two runs are compared: its peak, its phases, and what was alive at the peak and at
/// each phase kind's highest point, by path and by name.
pub fn compared_run(trace: &Trace, file: &str, device: Option<DeviceId>) -> RunPeak {
    let (mut run, prepared) = for_gates(trace, file, device);
    let device = run.device;
    let stacks =
        trace.events.iter().filter(|e| e.device == device && e.kind == vramscope_trace_format::EventKind::Alloc);
    run.lines = std::sync::Arc::new(sites::lines_of(trace, stacks.map(|e| e.stack)));
    let (events, initial, mut attributor) = prepared;
    let peak_event = run.peak_allocated_event;
    // The peak first, then each kind's highest, in the order of the trace.
    let mut targets: Vec<(Option<PhaseKind>, Option<usize>, i64)> =
        vec![(None, peak_event, run.peak_allocated_time_ns)];
    for kind in PhaseKind::ALL {
        if let Some(h) = run.phases.highest(kind) {
            targets.push((Some(kind), h.high_event, h.high_time_ns));
        }
    }
    targets.sort_by_key(|t| t.1);
    let at: Vec<Option<usize>> = targets.iter().map(|t| t.1).collect();
    peak::live_at_each_from(trace, &events, &initial, &at, |k, blocks| {
        let Some(&(kind, _, time_ns)) = targets.get(k) else { return };
        let mut names: BTreeMap<String, u64> = BTreeMap::new();
        for b in &blocks {
            let alloc_ns = b.alloc_event.and_then(|i| trace.events.get(i)).map_or(i64::MIN, |e| e.time_ns);
            let name = match attributor.block(b.address, alloc_ns, time_ns, b.stack).evidence {
                Evidence::Tag(name) | Evidence::Phase { module: Some(name), .. } => name,
                _ => continue,
            };
            *names.entry(trace.interner.resolve(name).to_owned()).or_insert(0) += b.size_bytes;
        }
        let alive = Alive { stacks: sites::by_stack(trace, blocks), names };
        match kind {
            None => run.at_peak = alive,
            Some(kind) => {
                run.at_phase.insert(kind, alive);
            }
        }
    });
    run
}

/// The device's events, initial state and attribution, worked out once.
type Prepared<'t> = (crate::replay::DeviceEvents, crate::replay::Initial, Attributor<'t>);

/// One run with what a gate checks (its peak, the categories at it, its phases and their high
/// points, its named ranges), without its allocation sites, its frames or what was alive at each
/// high point: the figures `diff` keeps of each rank of a run of many, whose full comparison it
/// works out again for the rank it shows.
pub fn compared_for_gates(trace: &Trace, file: &str, device: Option<DeviceId>) -> RunPeak {
    let mut run = for_gates(trace, file, device).0;
    run.sites = Vec::new();
    run
}

fn for_gates<'t>(trace: &'t Trace, file: &str, device: Option<DeviceId>) -> (RunPeak, Prepared<'t>) {
    let mut run = run_peak(trace, file, device);
    let device = run.device;
    let events = crate::replay::device_events(trace, device);
    let initial = crate::replay::initial_state(trace, device, &events);
    let mut attributor = Attributor::new(trace, device);
    attributor.prepare_persistent(&events, &initial);
    let prepared = crate::phases::Device { id: device, events: &events, initial: &initial };
    (run.phases, run.ranges) = crate::phases::phases_and_ranges(trace, prepared, &mut attributor, true);
    run.peak_phase = run.phases.phase_of_event(run.peak_allocated_event).and_then(|p| p.kind);
    (run, (events, initial, attributor))
}

/// A category in both runs.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema, PartialEq)]
pub struct CategoryDelta {
    /// The category's name.
    pub category: Category,
    /// Bytes in A.
    pub a: u64,
    /// Bytes in B.
    pub b: u64,
    /// B - A.
    pub delta: i64,
    /// 100 * (B - A) / A; null when A is 0.
    pub percent: Option<f64>,
}

/// Two runs compared.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema, PartialEq)]
pub struct Diff {
    /// The first run.
    pub a: RunPeak,
    /// The second run.
    pub b: RunPeak,
    /// Categories present in either, largest change first.
    pub categories: Vec<CategoryDelta>,
    /// Sites only in A, largest first.
    pub only_in_a: Vec<SiteDelta>,
    /// Sites only in B, largest first.
    pub only_in_b: Vec<SiteDelta>,
    /// Sites in both that grew, most first.
    pub grown: Vec<SiteDelta>,
    /// Sites in both that shrank, most first.
    pub shrunk: Vec<SiteDelta>,
    /// Live bytes at each peak by tag or module name, largest change first, when both runs
    /// have names.
    pub names: Option<Vec<NameDelta>>,
    /// The phases of both, paired (empty when either shows none).
    pub phases: Vec<PhaseDelta>,
    /// When either run shows no phases: the named ranges both have (their first occurrence),
    /// high point against high point.
    pub ranges: Vec<RangeDelta>,
    /// What changed most, for the sentence on top.
    pub headline: Headline,
}

/// A named range in both runs.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema, PartialEq)]
pub struct RangeDelta {
    /// Its name.
    pub name: String,
    /// The high point inside A's first.
    pub a: u64,
    /// Inside B's.
    pub b: u64,
    /// B - A.
    pub delta: i64,
    /// A's range (start, end) on its clock.
    #[serde(skip)]
    pub a_span: (i64, i64),
    /// B's.
    #[serde(skip)]
    pub b_span: (i64, i64),
}

/// A tag or module name in both runs.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema, PartialEq)]
pub struct NameDelta {
    /// The name (`layers.3.attn`, `tok_emb.weight`).
    pub name: String,
    /// Live bytes at A's peak.
    pub a: u64,
    /// Live bytes at B's peak.
    pub b: u64,
    /// B - A.
    pub delta: i64,
}

/// What the sentence on top of a comparison says, as data.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Headline {
    /// B's allocated peak minus A's.
    pub delta_bytes: i64,
    /// A's allocated peak.
    pub peak_a_bytes: u64,
    /// The change as a percentage of A's peak (none when A's is 0).
    pub percent: Option<f64>,
    /// The category that moved most the same way as the peak, and by how much.
    pub mostly: Option<(Category, i64)>,
    /// Then the allocation site that moved most the same way.
    pub site: Option<String>,
    /// A phase whose high point changed much more than the peak: said first.
    pub phase: Option<PhaseChange>,
}

pub(crate) fn signed(a: u64, b: u64) -> i64 {
    i64::try_from(b).unwrap_or(i64::MAX).saturating_sub(i64::try_from(a).unwrap_or(i64::MAX))
}

/// 100 * (b - a) / a, `None` when a is 0.
pub fn percent(a: u64, b: u64) -> Option<f64> {
    (a > 0).then(|| signed(a, b) as f64 * 100.0 / a as f64)
}

/// Categories in either of two breakdowns, largest change first.
pub fn category_deltas(a: &BTreeMap<Category, u64>, b: &BTreeMap<Category, u64>) -> Vec<CategoryDelta> {
    let names: std::collections::BTreeSet<Category> = a.keys().chain(b.keys()).copied().collect();
    let mut categories: Vec<CategoryDelta> = names
        .into_iter()
        .map(|category| {
            let va = a.get(&category).copied().unwrap_or(0);
            let vb = b.get(&category).copied().unwrap_or(0);
            CategoryDelta { category, a: va, b: vb, delta: signed(va, vb), percent: percent(va, vb) }
        })
        .collect();
    // Equal changes by name, as they have always been listed.
    categories.sort_by(|x, y| {
        y.delta.unsigned_abs().cmp(&x.delta.unsigned_abs()).then(x.category.name().cmp(y.category.name()))
    });
    categories
}

/// Sites split into those that grew, shrank, or are in one run only, each most changed first:
/// `[only in A, only in B, grown, shrunk]`.
pub fn split_sites(all: Vec<SiteDelta>) -> [Vec<SiteDelta>; 4] {
    let (mut only_in_a, mut only_in_b, mut grown, mut shrunk) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for d in all {
        match (d.a, d.b) {
            (_, 0) => only_in_a.push(d),
            (0, _) => only_in_b.push(d),
            (va, vb) if vb > va => grown.push(d),
            (va, vb) if vb < va => shrunk.push(d),
            _ => {}
        }
    }
    for list in [&mut only_in_a, &mut only_in_b, &mut grown, &mut shrunk] {
        list.sort_by(|x, y| y.delta.unsigned_abs().cmp(&x.delta.unsigned_abs()).then(x.site.cmp(&y.site)));
    }
    [only_in_a, only_in_b, grown, shrunk]
}

/// The stacks to compare of a run at its peak: by whole path when worked out, else one path per
/// innermost site (a run's ranks keep only their sites).
fn stacks_at_peak(run: &RunPeak) -> Vec<StackBytes> {
    if !run.at_peak.stacks.is_empty() || run.sites.is_empty() {
        return run.at_peak.stacks.clone();
    }
    run.sites
        .iter()
        .map(|s| StackBytes {
            frames: vec![s.site.clone()],
            relaxed: vec![s.site.clone()],
            bytes: s.bytes,
            blocks: s.blocks,
            site: s.site.clone(),
        })
        .collect()
}

/// Compares two runs.
pub fn diff(a: RunPeak, b: RunPeak) -> Diff {
    let categories = category_deltas(&a.categories_at_peak, &b.categories_at_peak);
    let [only_in_a, only_in_b, grown, shrunk] =
        split_sites(sites::match_sites(&stacks_at_peak(&a), &stacks_at_peak(&b), &a.lines, &b.lines));
    let names = (!a.at_peak.names.is_empty() && !b.at_peak.names.is_empty()).then(|| {
        let keys: std::collections::BTreeSet<&String> = a.at_peak.names.keys().chain(b.at_peak.names.keys()).collect();
        let mut list: Vec<NameDelta> = keys
            .into_iter()
            .map(|name| {
                let (va, vb) =
                    (a.at_peak.names.get(name).copied().unwrap_or(0), b.at_peak.names.get(name).copied().unwrap_or(0));
                NameDelta { name: name.clone(), a: va, b: vb, delta: signed(va, vb) }
            })
            .filter(|n| n.delta != 0)
            .collect();
        list.sort_by(|x, y| y.delta.unsigned_abs().cmp(&x.delta.unsigned_abs()).then(x.name.cmp(&y.name)));
        list
    });
    let phase_rows = phases::pair(&a, &b);
    let ranges = if phase_rows.is_empty() {
        a.ranges
            .iter()
            .filter_map(|x| {
                let y = b.ranges.iter().find(|y| y.name == x.name)?;
                Some(RangeDelta {
                    name: x.name.clone(),
                    a: x.high_bytes,
                    b: y.high_bytes,
                    delta: signed(x.high_bytes, y.high_bytes),
                    a_span: (x.start_ns, x.end_ns),
                    b_span: (y.start_ns, y.end_ns),
                })
            })
            .collect()
    } else {
        Vec::new()
    };
    let mut headline = headline(&a, &b, &categories, [&only_in_a, &only_in_b, &grown, &shrunk]);
    headline.phase = phases::biggest_change(&a, &b, &phase_rows, headline.delta_bytes);
    Diff { a, b, categories, only_in_a, only_in_b, grown, shrunk, names, phases: phase_rows, ranges, headline }
}

fn headline(a: &RunPeak, b: &RunPeak, categories: &[CategoryDelta], sites: [&Vec<SiteDelta>; 4]) -> Headline {
    let delta = signed(a.peak_allocated_bytes, b.peak_allocated_bytes);
    let same_way = |d: i64| (d < 0) == (delta < 0) && d != 0;
    let mostly = if delta == 0 { None } else { categories.iter().find(|c| same_way(c.delta)) };
    let site = mostly.and_then(|_| {
        sites
            .iter()
            .flat_map(|list| list.iter())
            .filter(|s| same_way(s.delta) && s.site != sites::NO_STACK)
            .max_by_key(|s| s.delta.unsigned_abs())
    });
    Headline {
        delta_bytes: delta,
        peak_a_bytes: a.peak_allocated_bytes,
        percent: percent(a.peak_allocated_bytes, b.peak_allocated_bytes),
        mostly: mostly.map(|c| (c.category, c.delta)),
        site: site.map(|s| s.site.clone()),
        phase: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(peak: u64, categories: &[(Category, u64)], sites: &[(&str, u64)]) -> RunPeak {
        RunPeak {
            file: String::new(),
            device: DeviceId(0),
            label: "cuda:0".to_owned(),
            peak_allocated_bytes: peak,
            peak_allocated_clock_ns: None,
            peak_allocated_time_ns: 0,
            peak_reserved_bytes: peak,
            categories_at_peak: categories.iter().copied().collect(),
            sites: sites
                .iter()
                .map(|(s, b)| instant::SiteBytes { site: (*s).to_owned(), bytes: *b, blocks: 1 })
                .collect(),
            ..RunPeak::default()
        }
    }

    #[test]
    fn hand_computed_diff() {
        let gib = 1u64 << 30;
        let a = run(
            20 * gib,
            &[(Category::Activation, 12 * gib), (Category::Parameter, 8 * gib)],
            &[("forward  m.py:1", 10 * gib), ("attn  m.py:9", 2 * gib), ("init  m.py:3", 8 * gib)],
        );
        let b = run(
            16 * gib,
            &[(Category::Activation, 8 * gib), (Category::Parameter, 8 * gib)],
            &[("forward  m.py:1", 6 * gib), ("init  m.py:3", 8 * gib), ("cast  m.py:5", 2 * gib)],
        );
        let d = diff(a, b);
        assert_eq!(d.categories[0].category, Category::Activation);
        assert_eq!(d.categories[0].delta, -4 * gib as i64);
        assert_eq!(d.categories[0].percent, Some(-100.0 / 3.0));
        assert_eq!(d.categories[1].delta, 0);
        assert_eq!(d.only_in_a.iter().map(|s| s.site.as_str()).collect::<Vec<_>>(), ["attn  m.py:9"]);
        assert_eq!(d.only_in_b.iter().map(|s| s.site.as_str()).collect::<Vec<_>>(), ["cast  m.py:5"]);
        assert_eq!(d.shrunk[0].delta, -4 * gib as i64);
        assert!(d.grown.is_empty());
        assert_eq!(d.headline.delta_bytes, -4 * gib as i64);
        assert_eq!(d.headline.percent, Some(-20.0));
        assert_eq!(d.headline.mostly, Some((Category::Activation, -4 * gib as i64)));
        assert_eq!(d.headline.site.as_deref(), Some("forward  m.py:1"));
    }

    /// A run of one range "warmup" that allocates `bytes` inside it and frees it after.
    fn ranged(bytes: u64) -> Trace {
        use vramscope_trace_format::{Annotation, AnnotationKind, Event, EventKind, ProcessId, StackId};
        let mut trace = Trace::default();
        let name = trace.interner.string("warmup");
        trace.annotations.push(Annotation {
            kind: AnnotationKind::UserRange,
            device: None,
            process: ProcessId(0),
            start_ns: 100,
            end_ns: 200,
            name,
            stack: StackId(0),
        });
        for (t, kind) in [(150, EventKind::Alloc), (250, EventKind::FreeCompleted)] {
            let mut e = Event::new(kind, t, DeviceId(0), 0x1000, bytes);
            e.set_requested_bytes(bytes);
            trace.events.push(e);
        }
        trace
    }

    #[test]
    fn runs_without_phases_are_compared_by_the_ranges_both_have() {
        let d = diff(compared_run(&ranged(100), "a", None), compared_run(&ranged(300), "b", None));
        assert!(d.phases.is_empty());
        assert_eq!(d.ranges.len(), 1);
        assert_eq!(
            (d.ranges[0].name.as_str(), d.ranges[0].a, d.ranges[0].b, d.ranges[0].delta),
            ("warmup", 100, 300, 200)
        );
        assert_eq!((d.ranges[0].a_span, d.ranges[0].b_span), ((100, 200), (100, 200)));
    }
}
