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
    let mut summary = crate::query::summary(trace, format, wrappers);
    for d in &mut summary.devices {
        d.phases.listed = all_phases;
    }
    let text = at.map_or("peak", |a| a.0);
    let largest_blocks = (blocks > 0)
        .then(|| largest_blocks(trace, at.map(|a| a.1), text, blocks))
        .transpose()
        .map_err(|why| (text.to_owned(), why))?;
    let at = at.map(|(text, when)| instant::at(trace, when, text).map_err(|why| (text.to_owned(), why))).transpose()?;
    Ok(InfoDocument {
        schema_version: SCHEMA_VERSION,
        notes: words::caveats(trace, &summary.caveats),
        summary,
        at,
        largest_blocks,
    })
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
