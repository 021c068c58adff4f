//! `info --oom`'s document: the first out-of-memory error on each device, explained.

use schemars::JsonSchema;
use serde::Serialize;
use vramscope_trace_format::{Clock, Trace};

use super::SCHEMA_VERSION;
use crate::postmortem::PostMortem;
use crate::query::oom::Explained;
use crate::query::words;

/// The out-of-memory errors of a trace explained: `info --oom --json`.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct OomDocument<'a> {
    /// The version of the documents' shape.
    pub schema_version: u32,
    /// The trace, as given.
    pub file: String,
    /// What every time is said from: the trace's first event, on its clock (none without one).
    pub time_origin_us: Option<i64>,
    /// Out-of-memory errors in the trace, of every device.
    pub oom_count: usize,
    /// The first of each device (of each process), explained.
    pub ooms: Vec<OomExplained<'a>>,
}

/// One out-of-memory error explained, with its words.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct OomExplained<'a> {
    /// What failed, what was free and alive, and what would have fitted.
    #[serde(flatten)]
    pub postmortem: &'a PostMortem,
    /// Its heading in words: the device, the time, the request.
    pub heading: String,
    /// The post-mortem in words, a line each.
    pub words: Vec<String>,
    /// How many more OOMs the same device of the same process had after it.
    pub later: usize,
}

/// The document of `trace` (named `file`), its first OOMs `explained`.
pub fn oom_document<'a>(trace: &Trace, file: String, explained: &'a [Explained]) -> OomDocument<'a> {
    let ooms = explained
        .iter()
        .map(|e| {
            let t = e.part.as_ref().unwrap_or(trace);
            OomExplained {
                postmortem: &e.postmortem,
                heading: words::postmortem_heading(t, &e.postmortem),
                words: words::postmortem_lines(&e.postmortem),
                later: e.later,
            }
        })
        .collect();
    let time_origin_us = (trace.metadata.clock != Clock::EventIndex).then(|| trace.origin_ns().div_euclid(1000));
    OomDocument { schema_version: SCHEMA_VERSION, file, time_origin_us, oom_count: trace.ooms.len(), ooms }
}
