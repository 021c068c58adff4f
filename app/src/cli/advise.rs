//! `vramscope advise`: what each remedy would do to the peak, from the trace's breakdown.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

use vramscope_trace_format::{DeviceId, TraceRange};

use crate::load::{self, LoadedTrace};
use crate::query::advisor::scaling::{self, Dimension, ScalingFit};
use crate::query::advisor::{Advice, Projection};
use crate::query::peak;
use crate::units::{bytes, count};
use crate::words;

/// Recordings of the same run at other batch sizes or sequence lengths: what is varied, the
/// size of the file advised on and of each other file, and the other files.
#[derive(Debug)]
pub struct Scaling {
    /// Batch or sequence.
    pub dimension: Dimension,
    /// The file's size, then each other file's.
    pub sizes: Vec<u64>,
    /// The other recordings.
    pub others: Vec<PathBuf>,
}

/// Reads a size: a number of bytes, or with a unit (`80GiB`, `512M`, `40GB`: the one reading
/// every face shares, [`vramscope_trace_format::size::parse_size`]).
pub fn parse_bytes(text: &str) -> std::result::Result<u64, String> {
    vramscope_trace_format::size::parse_size(text)
}

fn line(out: &mut dyn Write, p: &Projection, baseline: u64) -> std::io::Result<()> {
    let change = 100.0 * (p.projected_peak_allocated_bytes as f64 - baseline as f64) / baseline.max(1) as f64;
    writeln!(
        out,
        "  {:<44} {:>10} ({:+.0}%, ±{:.0}%, {}){}",
        words::remedies_named(&p.id),
        bytes(p.projected_peak_allocated_bytes),
        change,
        100.0 * p.uncertainty,
        words::method(p),
        if p.fits { "  fits" } else { "" }
    )
}

/// The reserved peak of `device` in the recording at `path` (the device advised on).
fn reserved_peak(path: &Path, device: DeviceId, range: Option<TraceRange>) -> Result<u64> {
    let loaded = load::load(path, range)?;
    if !loaded.trace.devices().contains(&device) {
        bail!(
            "{}: no {} in this recording; the recordings to fit over must be of the same run on the same device",
            path.display(),
            loaded.trace.metadata.device_label(device)
        );
    }
    let peaks = peak::peaks(&loaded.trace, device);
    Ok(peaks.reserved.bytes.max(peaks.allocated.bytes))
}

/// Fits the reserved peaks of the file advised on and the other recordings.
fn fit(path: &Path, advice: &Advice, s: &Scaling, range: Option<TraceRange>) -> Result<ScalingFit> {
    let Some(target) = advice.target_bytes else {
        bail!("{}: the trace does not say its device's memory: give --target-bytes to fit under", path.display());
    };
    if s.sizes.len() != s.others.len() + 1 {
        bail!(
            "{} sizes for {} recordings: give one per recording, the advised file's first ({} and each --with)",
            s.sizes.len(),
            s.others.len() + 1,
            path.display()
        );
    }
    let device = advice.baseline.device;
    // As for the other recordings: reserved at least what is allocated.
    let mut points = vec![(s.sizes[0], advice.baseline.peak_reserved_bytes.max(advice.baseline.peak_allocated_bytes))];
    for (other, &size) in s.others.iter().zip(&s.sizes[1..]) {
        points.push((size, reserved_peak(other, device, range)?));
    }
    scaling::fit(s.dimension, &points, target).map_err(|e| anyhow::anyhow!("{}: cannot fit: {e}", path.display()))
}

/// What `advise` is asked.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options<'a> {
    /// JSON instead of text.
    pub json: bool,
    /// Advise for this many GPUs (data parallel).
    pub gpus: Option<u32>,
    /// The memory to fit under (else the device's).
    pub target: Option<u64>,
    /// The device advised on (else the one that peaks highest).
    pub device: Option<DeviceId>,
    /// Also fit the peak over recordings at other sizes.
    pub scaling: Option<&'a Scaling>,
    /// The part of each trace read (`None`: the whole).
    pub range: Option<TraceRange>,
}

/// Runs `advise` on `path`; with `scaling`, also fits the peak over recordings at other sizes.
pub fn run(path: &Path, options: &Options<'_>, out: &mut dyn Write) -> Result<()> {
    answer(path, options, &mut super::To::new(options.json, out))
}

/// [`run`], its answer given `to` a writer or a keeper of the document.
pub fn answer(path: &Path, options: &Options<'_>, to: &mut super::To<'_>) -> Result<()> {
    let Options { gpus, target, device, scaling, range, .. } = *options;
    let (LoadedTrace { trace, .. }, chosen) = crate::runs::highest_rank(path, range)?;
    super::check_device(path, &trace, device)?;
    let Some(advice) = crate::query::advice(&trace, device, gpus, target) else {
        bail!("{}: the trace holds no memory events to advise on", path.display());
    };
    let fitted = scaling.map(|s| fit(path, &advice, s, range)).transpose()?;
    // Memory that grows every iteration comes first: no remedy holds while it does.
    let growth = crate::query::growth(&trace, advice.baseline.device).filter(|g| g.alarms());
    let doc = crate::query::documents::advice_document(
        &trace,
        &advice,
        fitted.as_ref(),
        growth.as_ref(),
        chosen.as_ref(),
        range,
    );
    let Some(out) = to.document(crate::query::documents::Document::Advice(&doc))? else { return Ok(()) };
    if let Some(chosen) = &chosen {
        writeln!(out, "{}", words::rank_chosen("advising", chosen))?;
    }
    let b = &advice.baseline;
    writeln!(out, "{}", path.display())?;
    if let Some(range) = range {
        writeln!(out, "  {}", words::range_note(range))?;
    }
    let device = words::device_name(b.device, &trace.metadata.device_label(b.device));
    let phase = words::phase(b.peak_phase).map_or_else(String::new, |p| format!(", its peak in {p}"));
    let blocks = match b.repeated_blocks {
        0 => String::new(),
        n => format!("; {} repeated blocks (the model's layers)", count(n)),
    };
    let reserved = words::baseline_reserved(b);
    writeln!(out, "  baseline: peak {} allocated{reserved} on {device}{phase}{blocks}", bytes(b.peak_allocated_bytes))?;
    let categories: Vec<String> =
        words::by_name(&b.categories_at_peak).into_iter().map(|(c, v)| format!("{} {}", c.name(), bytes(v))).collect();
    writeln!(out, "  at the peak: {}", categories.join(", "))?;
    if let Some(target) = advice.target_bytes {
        writeln!(out, "  target: {} (reserved must fit)", bytes(target))?;
    }
    if let Some(autocast) = &advice.autocast {
        writeln!(out, "  already under autocast ({autocast}): mixed precision is not proposed")?;
    }
    for note in words::advice_notes(&advice, "--gpus N") {
        writeln!(out, "  {note}")?;
    }
    if let Some(growth) = &growth {
        let label = trace.metadata.device_label(growth.device);
        writeln!(out, "\nfirst, a leak: the projections below hold for one iteration, while")?;
        for line in words::growth_lines(growth, &label) {
            writeln!(out, "  {line}")?;
        }
    }
    writeln!(
        out,
        "\nremedies, {}lowest projected peak first (allocated; ± the uncertainty; how: replayed from the changed \
         event stream, or by rules):",
        if advice.fine_tuning.is_some() && advice.remedies.first().is_some_and(|p| p.id == "lora") {
            "LoRA first (a fine-tune), then "
        } else {
            ""
        }
    )?;
    for p in &advice.remedies {
        line(out, p, b.peak_allocated_bytes)?;
        writeln!(out, "      {}", words::reason(p, &advice))?;
        writeln!(out, "      cost: {}", words::cost(p, &advice))?;
    }
    for line in words::left_out_lines(&advice) {
        writeln!(out, "  {line}")?;
    }
    if let Some(line) = words::without_effect(&advice) {
        writeln!(out, "  {line}")?;
    }
    if !advice.checkpointing_by_blocks.is_empty() {
        writeln!(out, "\n{}:", words::SOME_BLOCKS_HEADING)?;
        for some in &advice.checkpointing_by_blocks {
            writeln!(out, "  {}", words::some_blocks_checkpointed(some, b.peak_allocated_bytes))?;
        }
    }
    if !advice.combinations.is_empty() {
        writeln!(out, "\nbest combinations (pairs lower than either alone, threes lower than their pair):")?;
        for p in advice.combinations.iter().take(5) {
            line(out, p, b.peak_allocated_bytes)?;
        }
    }
    if let Some(fragmentation) = &advice.fragmentation {
        writeln!(out, "\nfragmentation: {}", words::fragmentation(fragmentation))?;
    }
    match (&advice.smallest_change_that_fits, advice.target_bytes) {
        _ if advice.baseline_fits => writeln!(out, "\nthe baseline fits under the target already")?,
        (Some(_), _) => writeln!(out, "\n{}", words::smallest_change(&advice).unwrap_or_default())?,
        (None, Some(_)) => writeln!(out, "\nno single remedy or pair fits under the target")?,
        (None, None) => {}
    }
    if let Some(f) = &fitted {
        writeln!(out, "\n{}", words::scaling_fit(f))?;
    }
    if let (false, Some(target)) = (advice.plan.is_empty(), advice.target_bytes) {
        writeln!(out, "\n{}:", words::plan_heading(&advice, target))?;
        for (i, step) in advice.plan.iter().enumerate() {
            writeln!(
                out,
                "  {}. {:<44} {:>10} reserved (±{:.0}%){}",
                i + 1,
                words::remedy_name(step.remedy),
                bytes(step.projected_peak_reserved_bytes),
                100.0 * step.uncertainty,
                if step.fits { "  fits" } else { "" }
            )?;
            writeln!(out, "     {}", words::remedy_change(step.remedy, &advice))?;
        }
    }
    Ok(())
}
