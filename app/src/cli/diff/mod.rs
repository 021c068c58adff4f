//! `vramscope diff A B`: two runs compared at their peaks and phase by phase, as text or JSON,
//! with gates that turn a memory regression into a failing exit status. One trace with another
//! here (its text in `text.rs`); runs of several ranks, rank by rank, in `ranks.rs`.

use std::io::Write;
use std::path::Path;

use anyhow::{Result, bail};
use serde::Serialize;
use vramscope_trace_format::{Category, DeviceId, TraceRange};

use crate::analysis::diff::{self, PhaseDelta, SiteDelta, percent};
use crate::analysis::phases::PhaseKind;

mod ranks;
mod text;

use self::ranks::ranks;
use self::text::{ITERATIONS_SHOWN, write_text};

pub use crate::analysis::query::gates::{Gate, GateResult, PhaseGate, parse_category_gate, parse_phase_gate};

#[derive(Serialize)]
struct Side<'a> {
    file: &'a str,
    device: DeviceId,
    peak_allocated_bytes: u64,
    #[serde(rename = "peak_allocated_time_us", serialize_with = "crate::analysis::micros::opt_ns_as_us")]
    peak_allocated_time_ns: Option<i64>,
    peak_reserved_bytes: u64,
    categories_at_peak: &'a std::collections::BTreeMap<Category, u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    growth: Option<&'a crate::analysis::growth::Growth>,
}

#[derive(Serialize)]
struct Delta {
    peak_allocated_bytes: i64,
    peak_reserved_bytes: i64,
    peak_allocated_percent: Option<f64>,
    categories_at_peak: std::collections::BTreeMap<Category, i64>,
}

#[derive(Serialize)]
struct Json<'a> {
    a: Side<'a>,
    b: Side<'a>,
    delta: Delta,
    summary: &'a str,
    /// The phase the summary leads with, when a phase changed much more than the peak.
    #[serde(skip_serializing_if = "Option::is_none")]
    summary_phase: Option<&'a diff::PhaseChange>,
    top_grown: &'a [SiteDelta],
    top_shrunk: &'a [SiteDelta],
    only_in_a: &'a [SiteDelta],
    only_in_b: &'a [SiteDelta],
    /// Live bytes at each peak by tag or module name, when both runs have names.
    #[serde(skip_serializing_if = "Option::is_none")]
    names: Option<&'a [diff::NameDelta]>,
    phases: Phases<'a>,
    gates: &'a [GateResult],
    /// The part of both read (`--range`), if only a part.
    #[serde(skip_serializing_if = "Option::is_none")]
    range: Option<String>,
}

/// The phases of both runs, paired.
#[derive(Serialize)]
struct Phases<'a> {
    /// How A's phases were found (`recorded`, `annotations`, `stacks`), null when it shows none.
    a_from: Option<crate::analysis::phases::PhasesFrom>,
    /// How B's were.
    b_from: Option<crate::analysis::phases::PhasesFrom>,
    /// The phase A's peak is in.
    a_peak_phase: Option<PhaseKind>,
    /// The phase B's peak is in.
    b_peak_phase: Option<PhaseKind>,
    /// Each kind's highest (`iteration` null), then each iteration (`phase` null) and its phases:
    /// the first [`ITERATIONS_SHOWN`], or with `--all-phases` all of them.
    rows: Vec<&'a PhaseDelta>,
    /// Iterations in the longer run (the last one's number).
    iterations: u32,
    /// When either run shows no phases: the named ranges both have, the high point inside the
    /// first of each.
    ranges: &'a [diff::RangeDelta],
}

fn side(run: &diff::RunPeak) -> Side<'_> {
    Side {
        file: &run.file,
        device: run.device,
        peak_allocated_bytes: run.peak_allocated_bytes,
        peak_allocated_time_ns: run.peak_allocated_clock_ns,
        peak_reserved_bytes: run.peak_reserved_bytes,
        categories_at_peak: &run.categories_at_peak,
        growth: run.growth.as_ref(),
    }
}

pub(super) const TOP: usize = 10;

pub(super) fn top(list: &[SiteDelta]) -> &[SiteDelta] {
    list.get(..TOP.min(list.len())).unwrap_or_default()
}

/// What `diff` is asked.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options<'a> {
    /// JSON instead of text.
    pub json: bool,
    /// The gates that must hold.
    pub gates: &'a [Gate],
    /// The device compared (else each run's that peaks highest).
    pub device: Option<DeviceId>,
    /// Every iteration's phases, not only the first few.
    pub all_phases: bool,
    /// The part of each trace read (`None`: the whole).
    pub range: Option<TraceRange>,
}

/// Compares the traces at `a` and `b`. Returns whether every gate held.
pub fn run(a: &Path, b: &Path, options: &Options<'_>, out: &mut dyn Write) -> Result<bool> {
    let Options { json, gates, device, all_phases, range } = *options;
    if a == b {
        bail!("{} is compared with itself: give two different traces", a.display());
    }
    let (side_a, side_b) = (RunSide::open(a, device, range)?, RunSide::open(b, device, range)?);
    if side_a.peaks.len() > 1 || side_b.peaks.len() > 1 {
        return ranks(a, b, &side_a, &side_b, options, out);
    }
    let compared = crate::analysis::query::compare::compare(side_a.single(a)?, side_b.single(b)?, gates)
        .map_err(|why| anyhow::anyhow!(crate::words::gate_unchecked(&why)))?;
    let (d, results) = (compared.diff, compared.gates);
    if json {
        let delta = Delta {
            peak_allocated_bytes: d.b.peak_allocated_bytes as i64 - d.a.peak_allocated_bytes as i64,
            peak_reserved_bytes: d.b.peak_reserved_bytes as i64 - d.a.peak_reserved_bytes as i64,
            peak_allocated_percent: percent(d.a.peak_allocated_bytes, d.b.peak_allocated_bytes),
            categories_at_peak: d.categories.iter().map(|c| (c.category, c.delta)).collect(),
        };
        let summary = crate::words::diff_summary(&d);
        let doc = Json {
            a: side(&d.a),
            b: side(&d.b),
            delta,
            summary: &summary,
            summary_phase: d.headline.phase.as_ref(),
            top_grown: top(&d.grown),
            top_shrunk: top(&d.shrunk),
            only_in_a: top(&d.only_in_a),
            only_in_b: top(&d.only_in_b),
            names: d.names.as_deref().map(|n| n.get(..TOP.min(n.len())).unwrap_or_default()),
            phases: Phases {
                a_from: d.a.phases.from,
                b_from: d.b.phases.from,
                a_peak_phase: d.a.peak_phase,
                b_peak_phase: d.b.peak_phase,
                rows: d
                    .phases
                    .iter()
                    .filter(|r| all_phases || r.iteration.is_none_or(|i| i <= ITERATIONS_SHOWN))
                    .collect(),
                iterations: d.phases.iter().filter_map(|r| r.iteration).max().unwrap_or(0),
                ranges: &d.ranges,
            },
            gates: &results,
            range: range.map(|r| r.to_string()),
        };
        serde_json::to_writer_pretty(&mut *out, &doc)?;
        writeln!(out)?;
    } else {
        write_text(&d, &results, all_phases, range, out)?;
    }
    Ok(results.iter().all(|r| r.passed))
}

/// Where a rank of a side of a comparison is, the name it is compared under, and whether it
/// holds the device asked for.
struct RankPlace {
    origin: crate::runs::Origin,
    source: String,
    fits: Result<()>,
}

/// One side of a comparison: a trace, or a run of several ranks (a directory of rank files, or a
/// recording of several ranks). Each rank's figures are taken as its file is read and the trace
/// is dropped, so a run of many ranks holds one trace per reader at a time; of a directory's
/// ranks only what the gates check is kept (`slim`), and the rank shown in full is read again.
struct RunSide {
    /// Each rank's figures, by rank.
    peaks: Vec<(u32, diff::RunPeak)>,
    /// Where each is, in the same order.
    places: Vec<RankPlace>,
    slim: bool,
    device: Option<DeviceId>,
}

impl RunSide {
    fn open(path: &Path, device: Option<DeviceId>, range: Option<TraceRange>) -> Result<Self> {
        let slim = path.is_dir();
        let (numbered, notes, skipped) =
            crate::runs::each_rank(&[path.to_path_buf()], range, |file, trace, source| {
                let fits = super::check_device(file, trace, device);
                // A file's name as given, a rank of a recording as `file (rank N)`.
                let peak = if slim {
                    diff::compared_for_gates(trace, source, device)
                } else {
                    diff::compared_run(trace, source, device)
                };
                (source.to_owned(), fits, peak)
            })?;
        for note in crate::words::run_notes(&notes, &skipped) {
            eprintln!("warning: {note}");
        }
        let (peaks, places) = numbered
            .into_iter()
            .map(|(rank, _, _, (origin, (source, fits, peak)))| ((rank, peak), RankPlace { origin, source, fits }))
            .unzip();
        Ok(Self { peaks, places, slim, device })
    }

    /// The one trace of a side, its full comparison figures; an error if it lacks the device
    /// asked for.
    fn single(mut self, path: &Path) -> Result<diff::RunPeak> {
        let (Some(place), Some((_, peak))) = (self.places.pop(), self.peaks.pop()) else {
            bail!("{}: no trace", path.display())
        };
        place.fits?;
        if self.slim { self.again(&place.origin, &place.source) } else { Ok(peak) }
    }

    /// The full comparison figures of `rank`: as taken, or (a slim side) its trace read again.
    fn full(&self, rank: u32) -> Result<diff::RunPeak> {
        let Some(i) = self.peaks.iter().position(|p| p.0 == rank) else { bail!("no rank {rank}") };
        let (Some((_, peak)), Some(place)) = (self.peaks.get(i), self.places.get(i)) else { bail!("no rank {rank}") };
        if self.slim { self.again(&place.origin, &place.source) } else { Ok(peak.clone()) }
    }

    /// A rank's full comparison figures, its trace read again.
    fn again(&self, origin: &crate::runs::Origin, source: &str) -> Result<diff::RunPeak> {
        let trace = crate::runs::read_rank(origin)?;
        Ok(diff::compared_run(&trace, source, self.device))
    }
}
