//! `report --json`'s document: what the picture shows, in numbers, for a face that shows the
//! picture beside them (the notebook).

use schemars::JsonSchema;
use serde::Serialize;

use super::{AdviceDocument, InfoDocument, RankChosen};

/// What a report draws: `report --json`.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ReportDocument<'a> {
    /// The version of the documents' shape.
    pub schema_version: u32,
    /// The image written.
    pub image: String,
    /// Each run drawn (the baseline first).
    pub runs: Vec<ReportedRun<'a>>,
}

/// One run of a report.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ReportedRun<'a> {
    /// Its name on the picture.
    pub name: String,
    /// Of a run of several ranks, the rank drawn (the one that peaks highest).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<&'a RankChosen>,
    /// What it holds, with its largest blocks at each device's peak.
    pub info: &'a InfoDocument,
    /// What each remedy would do to its peak (none when it holds nothing to advise on).
    pub advice: Option<AdviceDocument<'a>>,
}
