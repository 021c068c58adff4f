//! The documents every face shows: one typed answer per question, with its words. The CLI's
//! JSON is `serde` of these, its text a rendering of them; the MCP server returns them as
//! structured content; `vramscope schema` prints their JSON Schema, derived from the types.
//!
//! | Document | Question | Printed by |
//! |---|---|---|
//! | [`InfoDocument`] | What does this trace hold (and what was alive at an instant)? | `info --json` |
//! | [`RunDocument`] | What does each rank of a run hold? | `info --json` on a run of ranks |
//! | [`OomDocument`] | Why did it run out of memory? | `info --oom --json` |
//! | [`DiffDocument`] | How do two runs differ, and do the gates hold? | `diff --json` |
//! | [`RanksDiffDocument`] | How do two runs of several ranks differ, rank by rank? | `diff --json` on runs |
//! | [`AdviceDocument`] | What would each remedy do to the peak? | `advise --json` |
//! | [`GrowthDocument`] | Does memory grow every iteration, on each device? | the `growth` tool |
//! | [`BreakdownDocument`] | What was alive at each device's peak? | the `peak_breakdown` tool |
//! | [`InstantDocument`] | What was alive at an instant? | the `memory_at` tool |
//! | [`ReportDocument`] | What does the report picture show? | `report --json` |
//! | [`EstimateDocument`] | How much GPU memory will this program need on that GPU, and does it fit? | `estimate --json` |
//!
//! Every document carries [`SCHEMA_VERSION`]; a change to a document's shape changes the golden
//! schema (`tests/tests/schema.rs`), so it is a reviewed change, and one that removes or renames
//! a field raises the version.

mod advice;
mod diff;
mod estimate;
mod info;
mod oom;
mod report;

pub use self::advice::{
    AdviceDocument, DeviceGrowth, GrowthDocument, GrowthFound, PlanStep, ProjectionOut, RankChosen, advice_document,
    advice_document_with,
};
pub use self::diff::{
    DiffDelta, DiffDocument, DiffPhases, DiffSide, GateOut, HighestPeak, MostGrown, RankRow, RanksDiffDocument,
    TOP_SITES, diff_document, ranks_diff_document,
};
pub use self::estimate::{
    EstimateDevice, EstimateDocument, Estimated, KERNEL_MEMORY_FILE, Place, RestsOn, Sweep, SweepPoint,
    estimate_document,
};
pub use self::info::{
    BlockOut, BreakdownDocument, DeviceAtPeak, DeviceBlocks, InfoDocument, InstantDocument, LargestBlocks, RunDocument,
    info_document, largest_blocks, summary_document,
};
pub use self::oom::{OomDocument, OomExplained, oom_document};
pub use self::report::{ReportDocument, ReportedRun};

/// The version of the documents' shape: raised when a field is removed, renamed or changes its
/// meaning (fields may be added within a version).
pub const SCHEMA_VERSION: u32 = 1;

/// Iterations a comparison shows side by side unless every one is asked for.
pub const ITERATIONS_SHOWN: u32 = 4;

/// The documents by the name `vramscope schema NAME` knows them by, each with what it answers.
pub const DOCUMENTS: [(&str, &str); 11] = [
    ("info", "what a trace holds: `info --json`"),
    ("run", "what each rank of a run holds: `info --json` on several ranks"),
    ("oom", "the out-of-memory errors explained: `info --oom --json`"),
    ("diff", "two runs compared: `diff --json`"),
    ("ranks-diff", "two runs of several ranks compared rank by rank: `diff --json`"),
    ("advise", "what each remedy would do to the peak: `advise --json`"),
    ("growth", "memory growing every iteration: the MCP tool `growth`"),
    ("breakdown", "what was alive at each device's peak: the MCP tool `peak_breakdown`"),
    ("instant", "what was alive at an instant: the MCP tool `memory_at`"),
    ("report", "what a report image shows, in numbers: `report --json`"),
    ("estimate", "a program's GPU memory on a GPU it did not run on: `estimate --json`"),
];

/// The JSON Schema of the document named `name` (one of [`DOCUMENTS`]).
pub fn schema(name: &str) -> Option<serde_json::Value> {
    // What the documents serialise to (a field left out when empty is not required), not what
    // would deserialise into them.
    let generator = || schemars::generate::SchemaSettings::draft2020_12().for_serialize().into_generator();
    let schema = match name {
        "info" => generator().into_root_schema_for::<InfoDocument>(),
        "run" => generator().into_root_schema_for::<RunDocument<'static>>(),
        "oom" => generator().into_root_schema_for::<OomDocument<'static>>(),
        "diff" => generator().into_root_schema_for::<DiffDocument<'static>>(),
        "ranks-diff" => generator().into_root_schema_for::<RanksDiffDocument<'static>>(),
        "advise" => generator().into_root_schema_for::<AdviceDocument<'static>>(),
        "growth" => generator().into_root_schema_for::<GrowthDocument<'static>>(),
        "breakdown" => generator().into_root_schema_for::<BreakdownDocument<'static>>(),
        "instant" => generator().into_root_schema_for::<InstantDocument<'static>>(),
        "report" => generator().into_root_schema_for::<ReportDocument<'static>>(),
        "estimate" => generator().into_root_schema_for::<EstimateDocument>(),
        _ => return None,
    };
    let mut value = schema.to_value();
    if let Some(object) = value.as_object_mut() {
        let id = format!("https://vramscope.dev/schema/v{SCHEMA_VERSION}/{name}.json");
        object.insert("$id".to_owned(), serde_json::Value::String(id));
    }
    Some(value)
}

/// Any document, as a command gives it to be printed or kept (the MCP server keeps it).
#[derive(Clone, Copy, Debug)]
pub enum Document<'d> {
    /// `info` of one trace.
    Info(&'d InfoDocument),
    /// `info` of a run of ranks.
    Run(&'d RunDocument<'d>),
    /// `info --oom`.
    Oom(&'d OomDocument<'d>),
    /// `diff` of two traces.
    Diff(&'d DiffDocument<'d>),
    /// `diff` of two runs of ranks.
    RanksDiff(&'d RanksDiffDocument<'d>),
    /// `advise`.
    Advice(&'d AdviceDocument<'d>),
    /// The growth of every device.
    Growth(&'d GrowthDocument<'d>),
    /// What a report image shows.
    Report(&'d ReportDocument<'d>),
    /// `estimate`.
    Estimate(&'d EstimateDocument),
}

impl Document<'_> {
    /// Its name in [`DOCUMENTS`] (and `vramscope schema NAME`).
    pub fn name(&self) -> &'static str {
        match self {
            Document::Info(_) => "info",
            Document::Run(_) => "run",
            Document::Oom(_) => "oom",
            Document::Diff(_) => "diff",
            Document::RanksDiff(_) => "ranks-diff",
            Document::Advice(_) => "advise",
            Document::Growth(_) => "growth",
            Document::Report(_) => "report",
            Document::Estimate(_) => "estimate",
        }
    }
}

impl serde::Serialize for Document<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Document::Info(d) => d.serialize(s),
            Document::Run(d) => d.serialize(s),
            Document::Oom(d) => d.serialize(s),
            Document::Diff(d) => d.serialize(s),
            Document::RanksDiff(d) => d.serialize(s),
            Document::Advice(d) => d.serialize(s),
            Document::Growth(d) => d.serialize(s),
            Document::Report(d) => d.serialize(s),
            Document::Estimate(d) => d.serialize(s),
        }
    }
}
