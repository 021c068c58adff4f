//! The questions every face asks of a trace, one function each, answered as typed data; the
//! documents that put the answers and their words together ([`documents`]: what `info`, `diff`
//! and `advise` print as JSON, and the MCP server answers with); and the words themselves
//! ([`words`], [`units`]). The CLI, the app, the report, the terminal view and the MCP server
//! reach the analysis through this module and nothing else: the analysis crate's other modules
//! are its own, and the types and functions a face draws with are re-exported at the end of this
//! file, each listed.
//!
//! | Question | Function | Document |
//! |---|---|---|
//! | What does this trace hold? | [`summary()`] | [`documents::info_document`] |
//! | What does each rank of a run hold, and which peaks highest? | [`run::figures`], [`run::summarize`] | [`documents::RunDocument`] |
//! | What was alive at an instant (`+40ms`, `backward#2`)? | [`instant::at`], [`instant::largest_blocks`] | [`documents::InstantDocument`] |
//! | What was alive at the peak, and why is each block what it is? | [`instant::largest_blocks`] (no instant: the peak) | [`documents::BreakdownDocument`] |
//! | Why did it run out of memory? | [`oom::explain_firsts`], [`oom::on_device`] | [`documents::oom_document`] |
//! | How do two runs differ, and do the gates hold? | [`compare::compare`], [`compare::compare_ranks`] | [`documents::diff_document`], [`documents::ranks_diff_document`] |
//! | Does memory grow every iteration? | [`growth()`] | [`documents::GrowthDocument`] |
//! | What would each remedy do to the peak? | [`advice`] | [`documents::advice_document`] |
//! | How much will a program need on a GPU it did not run on? | [`gpus::gpu`] (the GPU), then its recording | [`documents::estimate_document`] |
//!
//! Files are read by the app (`app/src/runs.rs`: `open_for_summary` gives one trace or a run of
//! ranks summed up, `highest_rank` the one rank to look at), one trace per reader at a time.
//!
//! A new question is one function here, its words in [`words`] and its document in
//! [`documents`]; a new face is one module that calls these.

pub mod compare;
pub mod documents;
pub mod gates;
pub mod gpus;
pub mod instant;
pub mod oom;
pub mod units;
pub mod words;

use vramscope_trace_format::import::Wrapper;
use vramscope_trace_format::{DeviceId, SourceFormat, Trace};

/// What `info` says of a trace: its format, and each device's peaks, final state, categories
/// at the peak, phases and growth.
pub fn summary(trace: &Trace, format: SourceFormat, wrappers: &[Wrapper]) -> crate::summary::Summary {
    crate::summary::summary(trace, format, wrappers)
}

/// Whether memory on `device` grows from one iteration to the next, and where.
pub fn growth(trace: &Trace, device: DeviceId) -> Option<crate::growth::Growth> {
    crate::growth::growth(trace, device)
}

/// What each remedy would do to the peak of `device` (else the device that peaks highest), for
/// `gpus` GPUs, under `target` bytes (else the device's memory).
pub fn advice(
    trace: &Trace,
    device: Option<DeviceId>,
    gpus: Option<u32>,
    target: Option<u64>,
) -> Option<crate::advisor::Advice> {
    crate::advisor::advise(trace, device, gpus, target)
}

// What the faces draw and call beyond the documents: the analyses' types and the few functions
// a view computes with (a timeline, the blocks alive at an instant), each listed here. The
// analysis modules are the crate's own, so a face reaches nothing that is not.

/// The advisor's types.
pub mod advisor {
    pub use crate::advisor::scaling;
    pub use crate::advisor::{Advice, Projection, Remedy, advise};
}

/// The caching allocator's model and settings.
pub mod allocsim {
    pub use crate::allocsim::{Settings, simulate};
}

/// What each block is for.
pub mod attribution {
    pub use crate::attribution::{Attribution, Attributor, Evidence};
}

/// What a trace cannot show.
pub mod caveats {
    pub use crate::caveats::{Caveat, caveats_given};
}

/// Two runs compared.
pub mod diff {
    pub use crate::diff::{
        Diff, NameDelta, PhaseDelta, PhaseSide, RunPeak, SiteDelta, compared_for_gates, compared_run, diff, percent,
        run_peak,
    };
}

/// Memory growing every iteration.
pub mod growth {
    pub use crate::growth::Growth;
}

/// What every trace must hold once read.
pub mod invariants {
    pub use crate::invariants::violations;
}

/// Times in ns written as µs.
pub mod micros {
    pub use crate::micros::{ns_as_us, opt_ns_as_us};
}

/// The peaks.
pub mod peak {
    pub use crate::peak::{Peaks, categories_at, live_at, peaks};
}

/// Phases and iterations.
pub mod phases {
    pub use crate::phases::{PhaseHigh, PhaseKind, Phases, PhasesFrom};
}

/// OOMs explained.
pub mod postmortem {
    pub use crate::postmortem::{Holder, PostMortem, holders, postmortem, postmortem_sharing};
}

/// Memory over time, replayed.
pub mod replay {
    pub use crate::replay::{Point, device_events, initial_state, replay, timeline};
}

/// Runs of several ranks.
pub mod run {
    pub use crate::run::{
        Numbered, Part, Rank, RankFrom, RankSummary, Run, RunNote, RunSummary, figures, holds_ranks, number, parts,
        split, sum_up, summarize,
    };
}

/// The allocator's segments and fragmentation.
pub mod segments {
    pub use crate::segments::{Fragmentation, final_state};
}

/// What `info` says of a trace.
pub mod summary {
    pub use crate::summary::{DeviceSummary, Summary, device_summary, focus_device, highest_peak};
}

/// A GPU whole: every process on it, as the driver accounted it.
pub mod whole {
    pub use crate::whole::{
        DeviceNow, Parts, ProcessOnDevice, Turn, WholeDevice, now, parts_at, process_name, whole_devices,
    };
}

/// Memory over time by category, for drawing.
pub mod timeline {
    pub use crate::timeline::{CATEGORIES, Categories, Column, Point, Timeline};
}
