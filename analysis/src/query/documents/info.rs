//! `info`'s documents: one trace summed up (with what was alive at an instant and the largest
//! blocks, when asked), and a run of several ranks.

use schemars::JsonSchema;
use serde::Serialize;
use vramscope_trace_format::import::Wrapper;
use vramscope_trace_format::{DeviceId, SourceFormat, Trace};

use super::SCHEMA_VERSION;
use crate::query::instant::{self, At, NotInTrace, When};
use crate::query::words;
use crate::run::RunSummary;
use crate::summary::Summary;

/// What a trace holds: `info --json`.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct InfoDocument {
    /// The version of the documents' shape.
    pub schema_version: u32,
    /// The summary: the format, and each device's peaks, final state, categories, phases and
    /// growth.
    #[serde(flatten)]
    pub summary: Summary,
    /// What the trace cannot show, in words.
    pub notes: Vec<String>,
    /// What was alive at the instant asked for (`--at`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<At>,
    /// The largest blocks alive at the peak or at the instant (`--blocks`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub largest_blocks: Option<LargestBlocks>,
}

/// One of the largest blocks alive at an instant, and why it has its category.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct BlockOut {
    /// Its size.
    pub size_bytes: u64,
    /// Its category.
    pub category: &'static str,
    /// Why it has that category, in words.
    pub why: String,
    /// Where it was allocated.
    pub site: String,
    /// What PyTorch attached to the allocation (user metadata, compile context).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub context: Vec<String>,
}

/// The largest blocks of one device.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct DeviceBlocks {
    /// The device.
    pub device: DeviceId,
    /// Its largest blocks, the largest first.
    pub blocks: Vec<BlockOut>,
}

/// The largest blocks of each device at an instant.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct LargestBlocks {
    /// The instant, as asked for (`peak` for each device's peak).
    pub when: String,
    /// Per device.
    pub devices: Vec<DeviceBlocks>,
}

/// The `n` largest blocks of each device at `when` (named `text`; `None`: each device's peak).
pub fn largest_blocks(trace: &Trace, when: Option<&When>, text: &str, n: usize) -> Result<LargestBlocks, NotInTrace> {
    let devices = instant::largest_blocks(trace, when, n)?
        .into_iter()
        .map(|(device, blocks)| DeviceBlocks {
            device,
            blocks: blocks
                .iter()
                .map(|b| BlockOut {
                    size_bytes: b.block.size_bytes,
                    category: b.attribution.category.name(),
                    why: words::evidence(trace, b.attribution.evidence),
                    site: crate::instant::allocation_site(trace, b.block.stack, true),
                    context: words::context_lines(trace, &b.block),
                })
                .collect(),
        })
        .collect();
    Ok(LargestBlocks { when: text.to_owned(), devices })
}

/// `info`'s document of one trace: its summary, and what was alive at `at` (the instant's text
/// and what it means) and the `blocks` largest blocks there (at each device's peak without
/// `at`), and every phase with `all_phases`. An instant the trace does not hold is an error,
/// with its text.
pub fn info_document(
    trace: &Trace,
    format: SourceFormat,
    wrappers: &[Wrapper],
    at: Option<(&str, &When)>,
    blocks: usize,
    all_phases: bool,
) -> Result<InfoDocument, (String, NotInTrace)> {
    let mut doc = summary_document(trace, format, wrappers);
    for d in &mut doc.summary.devices {
        d.phases.listed = all_phases;
    }
    let text = at.map_or("peak", |a| a.0);
    let largest_blocks = (blocks > 0)
        .then(|| largest_blocks(trace, at.map(|a| a.1), text, blocks))
        .transpose()
        .map_err(|why| (text.to_owned(), why))?;
    let at = at.map(|(text, when)| instant::at(trace, when, text).map_err(|why| (text.to_owned(), why))).transpose()?;
    Ok(InfoDocument { at, largest_blocks, ..doc })
}

/// `info`'s document of one trace, its summary alone (what `top` shows of it, too).
pub fn summary_document(trace: &Trace, format: SourceFormat, wrappers: &[Wrapper]) -> InfoDocument {
    let summary = crate::query::summary(trace, format, wrappers);
    InfoDocument {
        schema_version: SCHEMA_VERSION,
        notes: words::caveats(trace, &summary.caveats),
        summary,
        at: None,
        largest_blocks: None,
    }
}

/// What each rank of a run holds: `info --json` on several ranks.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct RunDocument<'a> {
    /// The version of the documents' shape.
    pub schema_version: u32,
    /// The run summed up, a row per rank.
    pub run: &'a RunSummary,
    /// Allocator events of every rank.
    pub allocator_events: usize,
    /// What the run's files and ranks did not say, or what was left out, in words.
    pub notes: Vec<String>,
}

impl<'a> RunDocument<'a> {
    /// The document of `run`, with `notes` said of it.
    pub fn new(run: &'a RunSummary, notes: Vec<String>) -> Self {
        let allocator_events = run.ranks.iter().map(|r| r.events).sum();
        Self { schema_version: SCHEMA_VERSION, run, allocator_events, notes }
    }
}

/// What was alive at each device's peak: the MCP tool `peak_breakdown`, the peak's part of
/// [`InfoDocument`].
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct BreakdownDocument<'a> {
    /// The version of the documents' shape.
    pub schema_version: u32,
    /// Format of the file.
    pub format: &'static str,
    /// What every time is said from (the trace's first event, µs on its clock).
    #[serde(rename = "time_origin_us", serialize_with = "crate::micros::opt_ns_as_us")]
    pub time_origin_ns: Option<i64>,
    /// Each device at its allocated peak.
    pub devices: Vec<DeviceAtPeak<'a>>,
    /// The largest blocks alive at each device's peak.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub largest_blocks: Option<&'a LargestBlocks>,
    /// What the trace cannot show, in words.
    pub notes: &'a [String],
}

/// A device at its allocated peak.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct DeviceAtPeak<'a> {
    /// The device.
    pub device: DeviceId,
    /// Its name in the trace (`cuda:0`).
    pub label: &'a str,
    /// The allocated peak.
    pub peak_allocated_bytes: u64,
    /// When (µs on the trace's clock).
    #[serde(rename = "peak_allocated_time_us", serialize_with = "crate::micros::opt_ns_as_us")]
    pub peak_allocated_time_ns: Option<i64>,
    /// The reserved peak.
    pub peak_reserved_bytes: u64,
    /// When.
    #[serde(rename = "peak_reserved_time_us", serialize_with = "crate::micros::opt_ns_as_us")]
    pub peak_reserved_time_ns: Option<i64>,
    /// Bytes by category at the allocated peak.
    pub categories_at_peak: &'a std::collections::BTreeMap<vramscope_trace_format::Category, u64>,
    /// Blocks alive at the allocated peak.
    pub live_blocks_at_peak: usize,
    /// Of the unknown bytes at the peak, those alive from before the recording to its end.
    #[serde(skip_serializing_if = "is_zero")]
    pub unknown_from_before_recording_bytes: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl<'a> From<&'a InfoDocument> for BreakdownDocument<'a> {
    fn from(info: &'a InfoDocument) -> Self {
        let devices = info
            .summary
            .devices
            .iter()
            .map(|d| DeviceAtPeak {
                device: d.device,
                label: &d.label,
                peak_allocated_bytes: d.peak_allocated_bytes,
                peak_allocated_time_ns: d.peak_allocated_time_ns,
                peak_reserved_bytes: d.peak_reserved_bytes,
                peak_reserved_time_ns: d.peak_reserved_time_ns,
                categories_at_peak: &d.categories_at_peak,
                live_blocks_at_peak: d.live_blocks_at_peak,
                unknown_from_before_recording_bytes: d.unknown_from_before_recording_bytes,
            })
            .collect();
        Self {
            schema_version: SCHEMA_VERSION,
            format: info.summary.format,
            time_origin_ns: info.summary.time_origin_ns,
            devices,
            largest_blocks: info.largest_blocks.as_ref(),
            notes: &info.notes,
        }
    }
}

/// What was alive at an instant: the MCP tool `memory_at`, the instant's part of [`InfoDocument`].
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct InstantDocument<'a> {
    /// The version of the documents' shape.
    pub schema_version: u32,
    /// Format of the file.
    pub format: &'static str,
    /// What every time is said from (the trace's first event, µs on its clock).
    #[serde(rename = "time_origin_us", serialize_with = "crate::micros::opt_ns_as_us")]
    pub time_origin_ns: Option<i64>,
    /// What was alive at the instant, per device.
    pub at: Option<&'a At>,
    /// The largest blocks alive then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub largest_blocks: Option<&'a LargestBlocks>,
    /// What the trace cannot show, in words.
    pub notes: &'a [String],
}

impl<'a> From<&'a InfoDocument> for InstantDocument<'a> {
    fn from(info: &'a InfoDocument) -> Self {
        Self {
            schema_version: SCHEMA_VERSION,
            format: info.summary.format,
            time_origin_ns: info.summary.time_origin_ns,
            at: info.at.as_ref(),
            largest_blocks: info.largest_blocks.as_ref(),
            notes: &info.notes,
        }
    }
}
