//! A run as a set of ranks: the traces of a distributed run (one file per rank, or one
//! recording holding several ranked processes) taken apart rank by rank, each analysed on its
//! own so that no number mixes the blocks of two processes, and the run summed up: which rank
//! peaks, by how much the ranks differ and in what, and which ran out of memory first.
//!
//! A rank's number comes, in this order, from what the file says: the rank a recorder or a
//! profiler trace's `distributedInfo` gave its process; else, for per-rank snapshots (one
//! device each, a different one per file), the device's index; else a `rank<N>` in the file's
//! name, stated as a guess; else the files' order, stated too.

use std::collections::BTreeMap;

use serde::Serialize;
use vramscope_trace_format::{AnnotationKind, Category, Clock, DeviceId, ProcessId, Trace};

use crate::diff::{self, RunPeak};

/// Where a rank's number came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RankFrom {
    /// The recorder or the profiler trace (`distributedInfo`) gave the process its rank.
    Recorded,
    /// The file is a per-rank snapshot: the index of its one device.
    Device,
    /// `rank<N>` in the file's name: a guess.
    FileName,
    /// The order the files were given in: a guess.
    Order,
}

/// One rank of a run: its trace, alone.
#[derive(Debug)]
pub struct Rank {
    /// Its number.
    pub rank: u32,
    /// Where the number came from.
    pub from: RankFrom,
    /// The file it was read from (and, for a recording of several ranks, which process).
    pub source: String,
    /// Its trace: one process.
    pub trace: Trace,
}

/// A run: its ranks, by rank.
#[derive(Debug, Default)]
pub struct Run {
    /// The ranks, sorted by number.
    pub ranks: Vec<Rank>,
    /// What was odd (files that repeat ranks, numbers guessed), for the front ends to say.
    pub notes: Vec<RunNote>,
}

/// Something about how the run was put together that its reader should know.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum RunNote {
    /// A rank held in two files: the later one was left out.
    DuplicateRank {
        /// The rank.
        rank: u32,
        /// The file kept.
        kept: String,
        /// The file left out.
        left_out: String,
    },
    /// Some ranks' numbers are guesses.
    Guessed {
        /// How.
        from: RankFrom,
        /// How many.
        ranks: usize,
    },
}

/// `rank3` (or `rank_3`, `rank-3`) in a file's name.
fn rank_in_name(name: &str) -> Option<u32> {
    let lower = name.to_ascii_lowercase();
    let mut rest = lower.as_str();
    while let Some(at) = rest.find("rank") {
        let after = rest[at + 4..].trim_start_matches(['_', '-', '.']);
        let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
        if let Ok(rank) = digits.parse() {
            return Some(rank);
        }
        rest = &rest[at + 4..];
    }
    None
}

/// A file's one device, when it has exactly one and it is a GPU.
fn single_gpu(trace: &Trace) -> Option<DeviceId> {
    match trace.devices().as_slice() {
        [only] if !only.is_host() => Some(*only),
        _ => None,
    }
}

/// A file's part that is one rank, before its number is settled: the rank it says, else what
/// may number it (its one GPU, its name), and what it holds (a trace, or its figures).
#[derive(Debug)]
pub struct Part<T> {
    rank: Option<u32>,
    /// From a recording of several ranks (its own files win over it).
    split: bool,
    single_gpu: Option<DeviceId>,
    /// Its process in the file it came from, when it is one of a recording's several.
    process: Option<u32>,
    source: String,
    /// What it holds.
    pub item: T,
}

/// Whether a trace is a recording of several ranks: several processes, some with a rank.
pub fn holds_ranks(trace: &Trace) -> bool {
    trace.metadata.processes.len() > 1 && trace.metadata.processes.iter().any(|p| p.rank.is_some())
}

/// Each ranked process of a recording of several ranks as its own part (`None`: not such a
/// recording). The recording is only read: a caller may keep it.
pub fn split(name: &str, trace: &Trace) -> Option<Vec<Part<Trace>>> {
    if !holds_ranks(trace) {
        return None;
    }
    let ranked = trace.metadata.processes.iter().enumerate().filter_map(|(i, p)| p.rank.map(|r| (i, r)));
    let parts = ranked
        .map(|(i, rank)| {
            let item = trace.of_process(ProcessId(i as u32));
            let source = format!("{name} (rank {rank})");
            Part { rank: Some(rank), split: true, single_gpu: None, process: Some(i as u32), source, item }
        })
        .collect();
    Some(parts)
}

/// The parts of one file: each ranked process of a recording of several, else the file.
pub fn parts(name: &str, trace: Trace) -> Vec<Part<Trace>> {
    if let Some(parts) = split(name, &trace) {
        return parts;
    }
    let rank = match trace.metadata.processes.as_slice() {
        [only] => only.rank,
        _ => None,
    };
    let single_gpu = single_gpu(&trace);
    vec![Part { rank, split: false, single_gpu, process: None, source: name.to_owned(), item: trace }]
}

impl<T> Part<T> {
    /// The same part holding something else (a trace's figures instead of the trace).
    pub fn map<U>(self, f: impl FnOnce(T, &str) -> U) -> Part<U> {
        let item = f(self.item, &self.source);
        let Self { rank, split, single_gpu, process, source, .. } = self;
        Part { rank, split, single_gpu, process, source, item }
    }

    /// Its process in its file, when it is one of a recording's several.
    pub fn process(&self) -> Option<u32> {
        self.process
    }

    /// Its rank as far as it says on its own, before the run's files are numbered together:
    /// the recorded rank, else a `rank<N>` in its name, else its one GPU's index.
    pub fn rank_hint(&self) -> Option<u32> {
        self.rank
            .or_else(|| rank_in_name(&self.source))
            .or_else(|| self.single_gpu.and_then(|d| u32::try_from(d.0).ok()))
    }

    /// Where it came from (a file, and which rank of a recording).
    pub fn source(&self) -> &str {
        &self.source
    }
}

/// A numbered part: its rank, where the number came from, its source and what it holds.
pub type Numbered<T> = (u32, RankFrom, String, T);

/// Numbers the parts of a run's files (see the module's doc) and drops repeated ranks: the
/// parts by rank, and the notes.
pub fn number<T>(all: Vec<Part<T>>) -> (Vec<Numbered<T>>, Vec<RunNote>) {
    // Per-rank files first: where a recording of several ranks holds one too, the file wins.
    let (mut recorded, mut split, mut plain) = (Vec::new(), Vec::new(), Vec::new());
    for part in all {
        match (part.rank, part.split) {
            (Some(_), false) => recorded.push(part),
            (Some(_), true) => split.push(part),
            (None, _) => plain.push(part),
        }
    }
    let mut candidates: Vec<(Option<u32>, RankFrom, String, T)> =
        recorded.into_iter().chain(split).map(|p| (p.rank, RankFrom::Recorded, p.source, p.item)).collect();
    // Per-rank snapshots: each file on one GPU, a different one each.
    let mut distinct: Vec<i16> = plain.iter().filter_map(|p| p.single_gpu).map(|d| d.0).collect();
    distinct.sort_unstable();
    distinct.dedup();
    let by_device = plain.len() > 1 && plain.iter().all(|p| p.single_gpu.is_some()) && distinct.len() == plain.len();
    let by_name = !by_device && plain.iter().all(|p| rank_in_name(&p.source).is_some());
    let taken: Vec<u32> = candidates.iter().filter_map(|c| c.0).collect();
    let mut next = 0u32;
    for p in plain {
        let (rank, from) = if by_device {
            (p.single_gpu.and_then(|d| u32::try_from(d.0).ok()), RankFrom::Device)
        } else if by_name {
            (rank_in_name(&p.source), RankFrom::FileName)
        } else {
            while taken.contains(&next) {
                next += 1;
            }
            next += 1;
            (Some(next - 1), RankFrom::Order)
        };
        candidates.push((rank, from, p.source, p.item));
    }
    let mut out = Vec::new();
    let mut notes = Vec::new();
    let mut seen: BTreeMap<u32, String> = BTreeMap::new();
    for (rank, from, source, item) in candidates {
        let Some(rank) = rank else { continue };
        if let Some(kept) = seen.get(&rank) {
            notes.push(RunNote::DuplicateRank { rank, kept: kept.clone(), left_out: source });
            continue;
        }
        seen.insert(rank, source.clone());
        out.push((rank, from, source, item));
    }
    out.sort_by_key(|r| r.0);
    for from in [RankFrom::FileName, RankFrom::Order] {
        let ranks = out.iter().filter(|r| r.1 == from).count();
        if ranks > 0 && out.len() > 1 {
            notes.push(RunNote::Guessed { from, ranks });
        }
    }
    (out, notes)
}

impl Run {
    /// The run of the traces read from these files (name, trace), in the order given: a
    /// recording of several ranked processes gives each its own rank; every other file is one
    /// rank.
    pub fn of(files: Vec<(String, Trace)>) -> Self {
        let all: Vec<Part<Trace>> = files.into_iter().flat_map(|(name, trace)| parts(&name, trace)).collect();
        let (ranks, notes) = number(all);
        let ranks = ranks.into_iter().map(|(rank, from, source, trace)| Rank { rank, from, source, trace }).collect();
        Self { ranks, notes }
    }

    /// Whether it is a run of several ranks (else one trace, analysed as one).
    pub fn is_distributed(&self) -> bool {
        self.ranks.len() > 1
    }
}

/// Where in the step an instant is, by the recorded phases.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PhaseAt {
    /// Forward.
    Forward,
    /// Backward.
    Backward,
    /// The optimizer step.
    OptimizerStep,
}

fn phase_at(trace: &Trace, time_ns: i64) -> Option<PhaseAt> {
    trace.annotations.iter().filter(|a| a.start_ns <= time_ns && time_ns <= a.end_ns).find_map(|a| match a.kind {
        AnnotationKind::Forward => Some(PhaseAt::Forward),
        AnnotationKind::Backward => Some(PhaseAt::Backward),
        AnnotationKind::OptimizerStep => Some(PhaseAt::OptimizerStep),
        _ => None,
    })
}

/// One rank's numbers: its peak on its busiest device, when and in which phase, by category,
/// and its first OOM.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct RankSummary {
    /// The rank.
    pub rank: u32,
    /// Where the number came from.
    pub rank_from: RankFrom,
    /// Its node in a multi-node run (torchrun's `GROUP_RANK`), when recorded.
    pub node: Option<u32>,
    /// Its host's name, when recorded.
    pub host: Option<String>,
    /// Its file.
    pub source: String,
    /// Its peak (the device with the highest allocated peak).
    #[serde(flatten)]
    pub peak: RunPeak,
    /// The phase of the peak, when recorded.
    pub peak_phase: Option<PhaseAt>,
    /// When it first failed an allocation (ns on its trace's clock; µs in the JSON), if it did.
    #[serde(rename = "first_oom_us", serialize_with = "crate::micros::opt_ns_as_us")]
    pub first_oom_ns: Option<i64>,
    /// Its first event's time (ns on its clock).
    pub first_event_ns: Option<i64>,
    /// When its first iteration (else its first forward) began, by its recorded phases (ns on
    /// its clock): where ranks' timelines are aligned.
    pub first_iteration_ns: Option<i64>,
    /// Its events.
    pub events: usize,
}

/// A category in which the ranks differ most at their peaks.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Spread {
    /// The category.
    pub category: Category,
    /// The rank holding the most of it at its peak, and how much.
    pub max_rank: u32,
    /// Bytes.
    pub max_bytes: u64,
    /// The rank holding the least, and how much.
    pub min_rank: u32,
    /// Bytes.
    pub min_bytes: u64,
}

/// An allocation site whose live bytes at the peak differ most between the ranks.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct SiteSpread {
    /// The site: `function  file:line`.
    pub site: String,
    /// The rank holding the most there at its peak, and how much.
    pub max_rank: u32,
    /// Bytes.
    pub max_bytes: u64,
    /// The rank holding the least (nothing, when some rank has no block there), and how much.
    pub min_rank: u32,
    /// Bytes.
    pub min_bytes: u64,
}

/// The run summed up.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct RunSummary {
    /// Each rank.
    pub ranks: Vec<RankSummary>,
    /// The rank with the highest allocated peak.
    pub worst_rank: u32,
    /// The highest allocated peak over the lowest (1 when they are equal).
    pub imbalance: f64,
    /// The worst rank's peak over the median rank's (the lower middle), less one: how far it
    /// stands out.
    pub worst_over_median: f64,
    /// The categories by how much the ranks differ in them at their peaks, most first.
    pub spread: Vec<Spread>,
    /// The allocation sites by how much the ranks differ in them at their peaks, most first
    /// (the first few).
    pub site_spread: Vec<SiteSpread>,
    /// The rank that ran out of memory first (by its own clock), if any did.
    pub first_oom_rank: Option<u32>,
}

/// One rank's figures, from its trace alone (its number and where it came from are the
/// caller's to set).
pub fn figures(trace: &Trace, source: &str) -> RankSummary {
    let peak = diff::run_peak(trace, source, None);
    let at = peak.peak_allocated_time_ns;
    let clock = trace.metadata.clock != Clock::EventIndex;
    let first_oom = trace.ooms.iter().map(|o| o.time_ns).min();
    let process = trace.metadata.processes.first();
    RankSummary {
        rank: 0,
        rank_from: RankFrom::Order,
        node: process.and_then(|p| p.node),
        host: process.and_then(|p| p.host.clone()),
        source: source.to_owned(),
        // The phase as `info` and `diff` find it (recorded, named ranges, or stacks), else a
        // recorded span around the instant.
        peak_phase: peak
            .peak_phase
            .map(|kind| match kind {
                crate::phases::PhaseKind::Forward => PhaseAt::Forward,
                crate::phases::PhaseKind::Backward => PhaseAt::Backward,
                crate::phases::PhaseKind::OptimizerStep => PhaseAt::OptimizerStep,
            })
            .or_else(|| phase_at(trace, at)),
        first_oom_ns: first_oom.filter(|_| clock),
        first_event_ns: trace.events.first().map(|e| e.time_ns),
        first_iteration_ns: first_iteration_ns(trace),
        events: trace.events.len(),
        peak,
    }
}

/// When the first iteration began (else the first forward), by the recorded phases.
pub fn first_iteration_ns(trace: &Trace) -> Option<i64> {
    let first = |kind: AnnotationKind| trace.annotations.iter().filter(|a| a.kind == kind).map(|a| a.start_ns).min();
    first(AnnotationKind::Iteration).or_else(|| first(AnnotationKind::Forward))
}

/// How many sites [`RunSummary::site_spread`] lists.
const SITES_SPREAD: usize = 5;

/// The sites in which the ranks differ most at their peaks.
fn site_spread(ranks: &[RankSummary]) -> Vec<SiteSpread> {
    let mut by_site: BTreeMap<&str, Vec<(u32, u64)>> = BTreeMap::new();
    for r in ranks {
        for s in &r.peak.sites {
            by_site.entry(s.site.as_str()).or_default().push((r.rank, s.bytes));
        }
    }
    let mut spread: Vec<SiteSpread> = by_site
        .into_iter()
        .filter_map(|(site, held)| {
            let &(max_rank, max_bytes) = held.iter().max_by_key(|(rank, b)| (*b, std::cmp::Reverse(*rank)))?;
            // A rank with no block there holds nothing there.
            let (min_rank, min_bytes) = match ranks.iter().find(|r| !held.iter().any(|h| h.0 == r.rank)) {
                Some(r) => (r.rank, 0),
                None => held.iter().copied().min_by_key(|&(rank, b)| (b, rank))?,
            };
            Some(SiteSpread { site: site.to_owned(), max_rank, max_bytes, min_rank, min_bytes })
        })
        .filter(|s| s.max_bytes > s.min_bytes)
        .collect();
    spread.sort_by_key(|s| (std::cmp::Reverse(s.max_bytes - s.min_bytes), s.site.clone()));
    spread.truncate(SITES_SPREAD);
    spread
}

/// Each rank's numbers, and the run's.
pub fn summarize(run: &Run) -> Option<RunSummary> {
    let ranks = run
        .ranks
        .iter()
        .map(|r| RankSummary { rank: r.rank, rank_from: r.from, ..figures(&r.trace, &r.source) })
        .collect();
    sum_up(ranks)
}

/// The run summed up from its ranks' figures.
pub fn sum_up(ranks: Vec<RankSummary>) -> Option<RunSummary> {
    // The rank that peaks highest, the lowest of equals: the first of equals in rank order.
    let mut by_rank: Vec<&RankSummary> = ranks.iter().collect();
    by_rank.sort_by_key(|r| r.rank);
    let worst = crate::summary::highest_peak(by_rank.into_iter().map(|r| (r, r.peak.peak_allocated_bytes)))?;
    let lowest = ranks.iter().map(|r| r.peak.peak_allocated_bytes).min().unwrap_or(0);
    let mut sorted: Vec<u64> = ranks.iter().map(|r| r.peak.peak_allocated_bytes).collect();
    sorted.sort_unstable();
    // The lower middle: with two ranks, the other one.
    let median = sorted[(sorted.len() - 1) / 2].max(1);
    let mut categories: Vec<Category> = ranks.iter().flat_map(|r| r.peak.categories_at_peak.keys().copied()).collect();
    categories.sort_unstable_by_key(|c| c.name());
    categories.dedup();
    let mut spread: Vec<Spread> = categories
        .into_iter()
        .filter_map(|category| {
            let of = |r: &RankSummary| r.peak.categories_at_peak.get(&category).copied().unwrap_or(0);
            let max = ranks.iter().max_by_key(|r| (of(r), std::cmp::Reverse(r.rank)))?;
            let min = ranks.iter().min_by_key(|r| (of(r), r.rank))?;
            Some(Spread { category, max_rank: max.rank, max_bytes: of(max), min_rank: min.rank, min_bytes: of(min) })
        })
        .filter(|s| s.max_bytes > s.min_bytes)
        .collect();
    spread.sort_by_key(|s| std::cmp::Reverse(s.max_bytes - s.min_bytes));
    // Ranks' clocks are one machine's CLOCK_MONOTONIC when recorded together; files from
    // several machines may not share one, so this is by each rank's own clock.
    let first_oom_rank = ranks.iter().filter_map(|r| r.first_oom_ns.map(|t| (t, r.rank))).min().map(|(_, r)| r);
    let site_spread = if ranks.len() > 1 { site_spread(&ranks) } else { Vec::new() };
    Some(RunSummary {
        site_spread,
        worst_rank: worst.rank,
        imbalance: worst.peak.peak_allocated_bytes as f64 / lowest.max(1) as f64,
        worst_over_median: worst.peak.peak_allocated_bytes as f64 / median as f64 - 1.0,
        spread,
        first_oom_rank,
        ranks,
    })
}

/// The rank looked at when a file is a run of several: the one that peaks highest.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct RankChosen {
    /// The rank.
    pub rank: u32,
    /// Each rank's allocated peak: `[rank, bytes]`.
    pub peaks: Vec<(u32, u64)>,
}

#[cfg(test)]
mod tests {
    use vramscope_trace_format::{Event, EventKind, ProcessInfo};

    use super::*;

    fn one(bytes: u64, device: i16) -> Trace {
        let mut trace = Trace::default();
        trace.events.push(Event::new(EventKind::Alloc, 1, device, 0x1000, bytes));
        trace
    }

    #[test]
    fn ranks_come_from_the_files_and_are_said_when_guessed() {
        assert_eq!(rank_in_name("snapshot_rank12.pickle"), Some(12));
        assert_eq!(rank_in_name("run.rank_3.vtrace"), Some(3));
        assert_eq!(rank_in_name("ranking.pickle"), None);
        // Per-rank snapshots: one GPU each, a different one.
        let run = Run::of(vec![("a.pickle".into(), one(10, 1)), ("b.pickle".into(), one(30, 0))]);
        let ranks: Vec<(u32, RankFrom)> = run.ranks.iter().map(|r| (r.rank, r.from)).collect();
        assert_eq!(ranks, vec![(0, RankFrom::Device), (1, RankFrom::Device)]);
        assert!(run.notes.is_empty());
        // Both on the same device, no rank in the names: by order, and said.
        let run = Run::of(vec![("a.pickle".into(), one(10, 0)), ("b.pickle".into(), one(30, 0))]);
        assert_eq!(run.ranks.iter().map(|r| r.rank).collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!(run.notes, vec![RunNote::Guessed { from: RankFrom::Order, ranks: 2 }]);
        // A recording of two ranked processes: each its own rank, its blocks alone.
        let mut merged = one(10, -1);
        let mut other = Event::new(EventKind::Alloc, 2, -1, 0x1000, 30);
        other.process = ProcessId(1);
        merged.events.push(other);
        merged.metadata.processes = vec![
            ProcessInfo { rank: Some(0), ..ProcessInfo::default() },
            ProcessInfo { rank: Some(1), ..ProcessInfo::default() },
        ];
        let run = Run::of(vec![("run.vtrace".into(), merged)]);
        let summary = summarize(&run).expect("ranks");
        let peaks: Vec<u64> = summary.ranks.iter().map(|r| r.peak.peak_allocated_bytes).collect();
        assert_eq!(peaks, vec![10, 30]);
        assert_eq!(summary.worst_rank, 1);
        assert!((summary.imbalance - 3.0).abs() < 1e-9);
        // The same rank twice: the second is left out, and said.
        let mut a = one(10, 0);
        a.metadata.processes = vec![ProcessInfo { rank: Some(0), ..ProcessInfo::default() }];
        let mut b = one(20, 0);
        b.metadata.processes = vec![ProcessInfo { rank: Some(0), ..ProcessInfo::default() }];
        let run = Run::of(vec![("a".into(), a), ("b".into(), b)]);
        assert_eq!(run.ranks.len(), 1);
        assert!(matches!(&run.notes[..], [RunNote::DuplicateRank { rank: 0, .. }]));
    }

    /// A rank of `(function, bytes)` blocks, each allocated at its own site, on GPU 0.
    fn rank_of(rank: u32, blocks: &[(&str, u64)]) -> Trace {
        let mut trace = Trace::default();
        for (i, &(function, bytes)) in blocks.iter().enumerate() {
            let file = trace.interner.string("train.py");
            let function = trace.interner.string(function);
            let frame = trace.interner.frame(vramscope_trace_format::Frame { function, file, line: 7 });
            let mut e = Event::new(EventKind::Alloc, i as i64 + 1, 0, 0x1000 * (i as u64 + 1), bytes);
            e.stack = trace.interner.stack(&[frame]);
            trace.events.push(e);
        }
        trace.metadata.processes = vec![ProcessInfo { rank: Some(rank), ..ProcessInfo::default() }];
        trace
    }

    #[test]
    fn the_sites_the_ranks_differ_in_are_found_a_missing_one_as_nothing() {
        let a = rank_of(0, &[("linear", 100), ("embed", 50)]);
        let b = rank_of(1, &[("linear", 100), ("embed", 20), ("cache", 300)]);
        let run = Run::of(vec![("a".into(), a), ("b".into(), b)]);
        let summary = summarize(&run).expect("ranks");
        let sites: Vec<(&str, u32, u64, u32, u64)> = summary
            .site_spread
            .iter()
            .map(|s| (s.site.split_whitespace().next().unwrap_or(""), s.max_rank, s.max_bytes, s.min_rank, s.min_bytes))
            .collect();
        // Equal at `linear`: not listed. `cache` only on rank 1: rank 0 holds nothing there.
        assert_eq!(sites, vec![("cache", 1, 300, 0, 0), ("embed", 0, 50, 1, 20)]);
        assert_eq!(summary.worst_rank, 1);
    }
}
