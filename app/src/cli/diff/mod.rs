//! `vramscope diff A B`: two runs compared at their peaks and phase by phase, as text or JSON,
//! with gates that turn a memory regression into a failing exit status. One trace with another
//! here (its text in `text.rs`); runs of several ranks, rank by rank, in `ranks.rs`.

use std::io::Write;
use std::path::Path;

use anyhow::{Result, bail};
use vramscope_trace_format::{DeviceId, TraceRange};

use crate::query::diff;

mod ranks;
mod text;

use self::ranks::ranks;
use self::text::write_text;

pub use crate::query::gates::{Gate, GateResult, PhaseGate, parse_category_gate, parse_phase_gate};

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
    answer(a, b, options, &mut super::To::new(options.json, out))
}

/// [`run`], its answer given `to` a writer or a keeper of the document. Returns whether every
/// gate held.
pub fn answer(a: &Path, b: &Path, options: &Options<'_>, to: &mut super::To<'_>) -> Result<bool> {
    let Options { gates, device, all_phases, range, .. } = *options;
    if a == b {
        bail!("{} is compared with itself: give two different traces", a.display());
    }
    let (side_a, side_b) = (RunSide::open(a, device, range)?, RunSide::open(b, device, range)?);
    if side_a.peaks.len() > 1 || side_b.peaks.len() > 1 {
        return ranks(a, b, &side_a, &side_b, options, to);
    }
    let compared = crate::query::compare::compare(side_a.single(a)?, side_b.single(b)?, gates)
        .map_err(|why| anyhow::anyhow!(crate::words::gate_unchecked(&why)))?;
    let doc = crate::query::documents::diff_document(&compared, all_phases, range);
    if let Some(out) = to.document(crate::query::documents::Document::Diff(&doc))? {
        write_text(&compared.diff, &compared.gates, all_phases, range, out)?;
    }
    Ok(compared.gates.iter().all(|r| r.passed))
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
