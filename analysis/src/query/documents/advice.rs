//! `advise`'s document, and the growth of each device (the MCP tool `growth`).

use schemars::JsonSchema;
use serde::Serialize;
use vramscope_trace_format::{DeviceId, Trace, TraceRange};

use super::SCHEMA_VERSION;
use crate::advisor::scaling::ScalingFit;
use crate::advisor::{self, Advice, Baseline, Projection};
use crate::allocator::AllocatorSettings;
use crate::growth::Growth;
use crate::query::words;
pub use crate::run::RankChosen;

/// What each remedy would do to the peak: `advise --json`.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct AdviceDocument<'a> {
    /// The version of the documents' shape.
    pub schema_version: u32,
    /// The run as recorded: its device, peaks and what is at the peak.
    pub baseline: &'a Baseline,
    /// The memory to fit under (the device's, less what other processes held on it at the
    /// peak, unless given).
    pub target_bytes: Option<u64>,
    /// What other processes held on the device at the peak (the driver's account), left out of
    /// the target.
    #[serde(skip_serializing_if = "is_zero")]
    pub held_by_others_bytes: u64,
    /// Whether the run as recorded fits under it.
    pub baseline_fits: bool,
    /// Each remedy that would change the peak, with its projection and words.
    pub remedies: Vec<ProjectionOut<'a>>,
    /// The best pairs and triples.
    pub combinations: Vec<ProjectionOut<'a>>,
    /// Remedies that apply but would not change the peak (left out of `remedies`).
    pub without_effect: Vec<&'a str>,
    /// The remedies not projected, each with why.
    pub left_out: Vec<LeftOutRow>,
    /// The remedy (or combination) with the least cost that fits under the target.
    pub smallest_change_that_fits: Option<&'a str>,
    /// The fragmentation at the peak, in words, when it matters.
    pub fragmentation: Option<String>,
    /// The autocast dtype the run used, when it did.
    pub autocast: Option<&'a str>,
    /// The share of the parameters' bytes in 32 bits, when the recorder saw their dtypes.
    pub fp32_parameter_share: Option<f64>,
    /// The GPUs sharded over, when asked.
    pub gpus: Option<advisor::Gpus>,
    /// Whether the run trains (gradients, an optimizer step).
    pub training: bool,
    /// Whether its activations scale with a sequence length.
    pub sequence: bool,
    /// The caching allocator's settings the run used.
    pub allocator: &'a AllocatorSettings,
    /// The bytes at the peak by how their category is known.
    pub evidence_at_peak: advisor::EvidenceBytes,
    /// The share of the batch that would fit under the target.
    pub batch_scale_that_fits: Option<f64>,
    /// The order to try the remedies in, each step with those before it.
    pub plan: Vec<PlanStep>,
    /// Blocks of the model checkpointed already, by the run's own checkpointing.
    pub checkpointing_by_blocks: &'a [advisor::SomeBlocksCheckpointed],
    /// With recordings at other sizes: how the peak scales, and the largest size that fits.
    pub scaling: Option<&'a ScalingFit>,
    /// What the advice rests on or leaves out, in words.
    pub notes: Vec<String>,
    /// Memory that grows every iteration on the device advised on: no remedy holds while it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub growth: Option<GrowthFound<'a>>,
    /// Of a run of several ranks, the rank advised on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<&'a RankChosen>,
    /// The part of the trace read (`--range`), if only a part.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub range: Option<String>,
}

/// A remedy not projected, and why.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct LeftOutRow {
    /// The remedy's id.
    pub id: &'static str,
    /// The remedy as people name it.
    pub name: &'static str,
    /// Why it is not projected.
    pub why: advisor::LeftOut,
    /// Why, in words.
    pub words: &'static str,
}

/// A step of the plan: the remedy added, what to change, and what it and those before project.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct PlanStep {
    /// The remedy's id.
    pub id: &'static str,
    /// The remedy as people name it (`LoRA (low-rank adapters, the model frozen)`).
    pub name: &'static str,
    /// What to change, in words.
    pub change: String,
    /// The allocated peak projected with this step and those before it.
    pub projected_peak_allocated_bytes: u64,
    /// The reserved peak projected.
    pub projected_peak_reserved_bytes: u64,
    /// The projection's uncertainty, as a share of the peak.
    pub uncertainty: f64,
    /// Whether it fits under the target.
    pub fits: bool,
}

/// A remedy's projection, with its words.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ProjectionOut<'a> {
    /// The remedy's id (a combination's ids joined by `+`).
    pub id: &'a str,
    /// The remedy as people name it (`bf16 autocast`, `LoRA (low-rank adapters, the model
    /// frozen)`; a combination's names joined by `and`).
    pub name: String,
    /// What to change, in words.
    pub change: String,
    /// The allocated peak projected.
    pub projected_peak_allocated_bytes: u64,
    /// The reserved peak projected.
    pub projected_peak_reserved_bytes: u64,
    /// The baseline's allocated peak less the projected one.
    pub saving_bytes: i64,
    /// The projection's uncertainty, as a share of the peak.
    pub uncertainty: f64,
    /// `replay`, `replay_and_rule` or `rule`.
    pub method: advisor::Method,
    /// Where in the step the projected peak is, when the replay tells.
    pub projected_peak_phase: Option<advisor::Phase>,
    /// What it costs, in words.
    pub cost: String,
    /// Why it does what it does, in words.
    pub reason: String,
    /// Whether it fits under the target.
    pub fits: bool,
}

/// Memory growing every iteration, with its words.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct GrowthFound<'a> {
    /// What was found.
    #[serde(flatten)]
    pub growth: &'a Growth,
    /// It in words, a line each.
    pub words: Vec<String>,
}

impl<'a> GrowthFound<'a> {
    /// `growth` of a device labelled `label`, with its words.
    pub fn new(growth: &'a Growth, label: &str) -> Self {
        Self { growth, words: words::growth_lines(growth, label) }
    }
}

fn projections<'a>(list: &'a [Projection], advice: &Advice) -> Vec<ProjectionOut<'a>> {
    list.iter()
        .map(|p| ProjectionOut {
            id: &p.id,
            name: words::remedies_named(&p.id),
            change: words::change(p, advice),
            projected_peak_allocated_bytes: p.projected_peak_allocated_bytes,
            projected_peak_reserved_bytes: p.projected_peak_reserved_bytes,
            saving_bytes: p.saving_bytes,
            uncertainty: p.uncertainty,
            method: p.method,
            projected_peak_phase: p.projected_peak_phase,
            cost: words::cost(p, advice),
            reason: words::reason(p, advice),
            fits: p.fits,
        })
        .collect()
}

/// The document of `advice` on `trace`, with the fit over other recordings (`scaling`), the
/// memory growing on the device advised on (`growth`, when it alarms), the rank chosen of a run
/// and the range read.
pub fn advice_document<'a>(
    trace: &Trace,
    advice: &'a Advice,
    scaling: Option<&'a ScalingFit>,
    growth: Option<&'a Growth>,
    rank: Option<&'a RankChosen>,
    range: Option<TraceRange>,
) -> AdviceDocument<'a> {
    let growth = growth.map(|g| GrowthFound::new(g, &trace.metadata.device_label(g.device)));
    advice_document_with(advice, scaling, growth, rank, range)
}

/// [`advice_document`] with the growth found (and worded) already.
pub fn advice_document_with<'a>(
    advice: &'a Advice,
    scaling: Option<&'a ScalingFit>,
    growth: Option<GrowthFound<'a>>,
    rank: Option<&'a RankChosen>,
    range: Option<TraceRange>,
) -> AdviceDocument<'a> {
    AdviceDocument {
        schema_version: SCHEMA_VERSION,
        baseline: &advice.baseline,
        target_bytes: advice.target_bytes,
        held_by_others_bytes: advice.held_by_others_bytes,
        baseline_fits: advice.baseline_fits,
        remedies: projections(&advice.remedies, advice),
        combinations: projections(&advice.combinations, advice),
        without_effect: advice.without_effect.iter().map(|p| p.id.as_str()).collect(),
        left_out: advice
            .left_out
            .iter()
            .map(|&(remedy, why)| LeftOutRow {
                id: remedy.id(),
                name: words::remedy_name(remedy),
                why,
                words: words::left_out_why(why),
            })
            .collect(),
        smallest_change_that_fits: advice.smallest_change_that_fits.as_deref(),
        fragmentation: advice.fragmentation.as_ref().map(words::fragmentation),
        autocast: advice.autocast.as_deref(),
        fp32_parameter_share: advice.fp32_parameter_share,
        gpus: advice.gpus,
        training: advice.training,
        sequence: advice.sequence,
        allocator: &advice.allocator,
        evidence_at_peak: advice.evidence,
        batch_scale_that_fits: advice.batch_scale_that_fits,
        plan: advice
            .plan
            .iter()
            .map(|s| PlanStep {
                id: s.remedy.id(),
                name: words::remedy_name(s.remedy),
                change: words::remedy_change(s.remedy, advice),
                projected_peak_allocated_bytes: s.projected_peak_allocated_bytes,
                projected_peak_reserved_bytes: s.projected_peak_reserved_bytes,
                uncertainty: s.uncertainty,
                fits: s.fits,
            })
            .collect(),
        checkpointing_by_blocks: &advice.checkpointing_by_blocks,
        scaling,
        notes: words::advice_notes(advice, "--gpus N"),
        growth,
        rank,
        range: range.map(|r| r.to_string()),
    }
}

/// Whether memory grows every iteration, on each device: the MCP tool `growth`.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct GrowthDocument<'a> {
    /// The version of the documents' shape.
    pub schema_version: u32,
    /// The trace, as given.
    pub file: String,
    /// Per device.
    pub devices: Vec<DeviceGrowth>,
    /// Of a run of several ranks, the rank looked at.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<&'a RankChosen>,
}

/// One device's growth.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct DeviceGrowth {
    /// The device.
    pub device: DeviceId,
    /// Its name in the trace (`cuda:0`).
    pub label: String,
    /// Whether the growth is worth an alarm (a leak or a cache that does not settle).
    pub alarms: bool,
    /// What was found; null with too few iterations (or no repeating pattern) to tell.
    pub growth: Option<Growth>,
    /// It in words, a line each.
    pub words: Vec<String>,
}

impl<'a> GrowthDocument<'a> {
    /// The growth of every device of `trace` (named `file`).
    pub fn new(trace: &Trace, file: String, rank: Option<&'a RankChosen>) -> Self {
        let devices = trace
            .devices()
            .into_iter()
            .map(|device| {
                let label = trace.metadata.device_label(device);
                let growth = crate::query::growth(trace, device);
                let words = growth
                    .as_ref()
                    .map_or_else(|| vec![words::GROWTH_UNTOLD.to_owned()], |g| words::growth_lines(g, &label));
                DeviceGrowth { device, alarms: growth.as_ref().is_some_and(Growth::alarms), label, growth, words }
            })
            .collect();
        Self { schema_version: SCHEMA_VERSION, file, devices, rank }
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
