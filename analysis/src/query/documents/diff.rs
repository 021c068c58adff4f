//! `diff`'s documents: two runs compared at their peaks and phase by phase, with the gates; two
//! runs of several ranks, rank by rank.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Serialize;
use vramscope_trace_format::{Category, DeviceId, TraceRange};

use super::{ITERATIONS_SHOWN, SCHEMA_VERSION};
use crate::diff::{self, Diff, PhaseDelta, SiteDelta, percent};
use crate::phases::{PhaseKind, PhasesFrom};
use crate::query::compare::{Compared, RanksCompared, peak_growth};
use crate::query::gates::GateResult;
use crate::query::words;

/// Sites (and names) a comparison lists in each of its lists.
pub const TOP_SITES: usize = 10;

fn top(list: &[SiteDelta]) -> &[SiteDelta] {
    list.get(..TOP_SITES.min(list.len())).unwrap_or_default()
}

/// One run of a comparison at its peak.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct DiffSide<'a> {
    /// The file (a rank of a recording as `file (rank N)`).
    pub file: &'a str,
    /// The device compared.
    pub device: DeviceId,
    /// Allocator events in the trace, of every device (0: it saw nothing to compare).
    pub allocator_events: usize,
    /// Its allocated peak.
    pub peak_allocated_bytes: u64,
    /// When, on the run's clock.
    #[serde(rename = "peak_allocated_time_us", serialize_with = "crate::micros::opt_ns_as_us")]
    pub peak_allocated_time_ns: Option<i64>,
    /// Its reserved peak.
    pub peak_reserved_bytes: u64,
    /// Bytes by category at the allocated peak.
    pub categories_at_peak: &'a BTreeMap<Category, u64>,
    /// Whether its memory grows every iteration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub growth: Option<&'a crate::growth::Growth>,
}

/// B less A.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct DiffDelta {
    /// Of the allocated peaks.
    pub peak_allocated_bytes: i64,
    /// Of the reserved peaks.
    pub peak_reserved_bytes: i64,
    /// Of the allocated peaks, in percent of A's (null when A's is 0).
    pub peak_allocated_percent: Option<f64>,
    /// By category at the peaks.
    pub categories_at_peak: BTreeMap<Category, i64>,
}

/// The phases of both runs, paired.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct DiffPhases<'a> {
    /// How A's phases were found (`recorded`, `annotations`, `stacks`), null when it shows none.
    pub a_from: Option<PhasesFrom>,
    /// How B's were.
    pub b_from: Option<PhasesFrom>,
    /// The phase A's peak is in.
    pub a_peak_phase: Option<PhaseKind>,
    /// The phase B's peak is in.
    pub b_peak_phase: Option<PhaseKind>,
    /// Each kind's highest (`iteration` null), then each iteration (`phase` null) and its phases:
    /// the first [`ITERATIONS_SHOWN`], or with `--all-phases` all of them.
    pub rows: Vec<&'a PhaseDelta>,
    /// Iterations in the longer run (the last one's number).
    pub iterations: u32,
    /// When either run shows no phases: the named ranges both have, the high point inside the
    /// first of each.
    pub ranges: &'a [diff::RangeDelta],
}

/// How a gate came out, with its words.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct GateOut<'a> {
    /// What was checked, the limit and the growth measured.
    #[serde(flatten)]
    pub result: &'a GateResult,
    /// Of a run of ranks, the rank where it came out worst.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worst_rank: Option<u32>,
    /// The gate in words, as the text says it (`gate peak_allocated_bytes: grew 12% (limit 5%) FAILED`).
    pub words: String,
}

impl<'a> GateOut<'a> {
    fn new(result: &'a GateResult, worst_rank: Option<u32>) -> Self {
        Self { result, worst_rank, words: words::gate_line(result, worst_rank) }
    }
}

/// Two runs compared: `diff --json`.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct DiffDocument<'a> {
    /// The version of the documents' shape.
    pub schema_version: u32,
    /// The baseline.
    pub a: DiffSide<'a>,
    /// The run compared with it.
    pub b: DiffSide<'a>,
    /// B less A.
    pub delta: DiffDelta,
    /// What changed, in one sentence.
    pub summary: String,
    /// The phase the summary leads with, when a phase changed much more than the peak.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary_phase: Option<&'a diff::PhaseChange>,
    /// The sites that grew most, at most [`TOP_SITES`].
    pub top_grown: &'a [SiteDelta],
    /// The sites that shrank most.
    pub top_shrunk: &'a [SiteDelta],
    /// Sites alive at A's peak only.
    pub only_in_a: &'a [SiteDelta],
    /// Sites alive at B's peak only.
    pub only_in_b: &'a [SiteDelta],
    /// Live bytes at each peak by tag or module name, when both runs have names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub names: Option<&'a [diff::NameDelta]>,
    /// The phases side by side.
    pub phases: DiffPhases<'a>,
    /// Each gate, in the order given.
    pub gates: Vec<GateOut<'a>>,
    /// Whether every gate held.
    pub gates_hold: bool,
    /// The part of both read (`--range`), if only a part.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub range: Option<String>,
}

fn side(run: &diff::RunPeak) -> DiffSide<'_> {
    DiffSide {
        file: &run.file,
        device: run.device,
        allocator_events: run.allocator_events,
        peak_allocated_bytes: run.peak_allocated_bytes,
        peak_allocated_time_ns: run.peak_allocated_clock_ns,
        peak_reserved_bytes: run.peak_reserved_bytes,
        categories_at_peak: &run.categories_at_peak,
        growth: run.growth.as_ref(),
    }
}

/// The document of two runs `compared`: every iteration's phases with `all_phases`, else the
/// first [`ITERATIONS_SHOWN`].
pub fn diff_document(compared: &Compared, all_phases: bool, range: Option<TraceRange>) -> DiffDocument<'_> {
    let d: &Diff = &compared.diff;
    DiffDocument {
        schema_version: SCHEMA_VERSION,
        a: side(&d.a),
        b: side(&d.b),
        delta: DiffDelta {
            peak_allocated_bytes: d.b.peak_allocated_bytes as i64 - d.a.peak_allocated_bytes as i64,
            peak_reserved_bytes: d.b.peak_reserved_bytes as i64 - d.a.peak_reserved_bytes as i64,
            peak_allocated_percent: percent(d.a.peak_allocated_bytes, d.b.peak_allocated_bytes),
            categories_at_peak: d.categories.iter().map(|c| (c.category, c.delta)).collect(),
        },
        summary: words::diff_summary(d),
        summary_phase: d.headline.phase.as_ref(),
        top_grown: top(&d.grown),
        top_shrunk: top(&d.shrunk),
        only_in_a: top(&d.only_in_a),
        only_in_b: top(&d.only_in_b),
        names: d.names.as_deref().map(|n| n.get(..TOP_SITES.min(n.len())).unwrap_or_default()),
        phases: DiffPhases {
            a_from: d.a.phases.from,
            b_from: d.b.phases.from,
            a_peak_phase: d.a.peak_phase,
            b_peak_phase: d.b.peak_phase,
            rows: d.phases.iter().filter(|r| all_phases || r.iteration.is_none_or(|i| i <= ITERATIONS_SHOWN)).collect(),
            iterations: d.phases.iter().filter_map(|r| r.iteration).max().unwrap_or(0),
            ranges: &d.ranges,
        },
        gates: compared.gates.iter().map(|g| GateOut::new(g, None)).collect(),
        gates_hold: compared.gates.iter().all(|g| g.passed),
        range: range.map(|r| r.to_string()),
    }
}

/// A rank's comparison.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct RankRow {
    /// The rank.
    pub rank: u32,
    /// A's allocated peak on it.
    pub a_peak_allocated_bytes: u64,
    /// B's.
    pub b_peak_allocated_bytes: u64,
    /// B's less A's.
    pub delta_bytes: i64,
    /// In percent of A's (null when A's is 0).
    pub percent: Option<f64>,
}

/// The highest rank peak of each run.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct HighestPeak {
    /// A's.
    pub a: u64,
    /// B's.
    pub b: u64,
    /// B's change, in percent of A's.
    pub percent: Option<f64>,
}

/// The rank whose peak grew most, in words.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct MostGrown {
    /// What changed on it, in one sentence.
    pub summary: String,
}

/// Two runs of several ranks compared: `diff --json` on runs.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct RanksDiffDocument<'a> {
    /// The version of the documents' shape.
    pub schema_version: u32,
    /// The baseline run, as given.
    pub a: String,
    /// The run compared with it.
    pub b: String,
    /// Each rank both runs have.
    pub ranks: Vec<RankRow>,
    /// Ranks only A has.
    pub only_in_a: &'a [u32],
    /// Ranks only B has.
    pub only_in_b: &'a [u32],
    /// The highest rank peak of each.
    pub highest_peak: HighestPeak,
    /// The rank whose peak grew most (the lowest among equals).
    pub most_grown_rank: u32,
    /// That rank's comparison in words.
    pub most_grown: MostGrown,
    /// Each gate at the rank where it came out worst.
    pub gates: Vec<GateOut<'a>>,
    /// Whether every gate held on every rank.
    pub gates_hold: bool,
    /// The part of both read (`--range`), if only a part.
    pub range: Option<String>,
}

/// The document of two runs of ranks (`a`, `b` as given) `compared`.
pub fn ranks_diff_document(
    a: String,
    b: String,
    compared: &RanksCompared,
    range: Option<TraceRange>,
) -> RanksDiffDocument<'_> {
    let (most_grown_rank, worst) = compared.most_grown();
    let (a_max, b_max) = compared.highest_peak;
    RanksDiffDocument {
        schema_version: SCHEMA_VERSION,
        a,
        b,
        ranks: compared
            .pairs
            .iter()
            .map(|(rank, d)| RankRow {
                rank: *rank,
                a_peak_allocated_bytes: d.a.peak_allocated_bytes,
                b_peak_allocated_bytes: d.b.peak_allocated_bytes,
                delta_bytes: peak_growth(d),
                percent: percent(d.a.peak_allocated_bytes, d.b.peak_allocated_bytes),
            })
            .collect(),
        only_in_a: &compared.only_in_a,
        only_in_b: &compared.only_in_b,
        highest_peak: HighestPeak { a: a_max, b: b_max, percent: percent(a_max, b_max) },
        most_grown_rank,
        most_grown: MostGrown { summary: words::diff_summary(worst) },
        gates: compared.gates.iter().map(|(g, rank)| GateOut::new(g, Some(*rank))).collect(),
        gates_hold: compared.gates.iter().all(|(g, _)| g.passed),
        range: range.map(|r| r.to_string()),
    }
}
