//! The questions every face asks of a trace, one function each, answered as typed data that
//! serialises to the JSON `info`, `diff` and `advise` print. The CLI, the app, the report, the
//! terminal view and the MCP server call these and nothing else for their answers; the app's
//! `words` turns them into sentences and labels, so every face says the same thing the same way.
//!
//! | Question | Function |
//! |---|---|
//! | What does this trace hold? | [`summary`] |
//! | What does each rank of a run hold, and which peaks highest? | [`crate::run::figures`], [`crate::run::summarize`] |
//! | What was alive at an instant (`+40ms`, `backward#2`)? | [`instant::at`], [`instant::largest_blocks`] |
//! | What was alive at the peak, and why is each block what it is? | [`instant::largest_blocks`] (no instant: the peak) |
//! | Why did it run out of memory? | [`oom::explain_firsts`], [`oom::on_device`] |
//! | How do two runs differ, and do the gates hold? | [`compare::compare`], [`compare::compare_ranks`] |
//! | Does memory grow every iteration? | [`growth`] |
//! | What would each remedy do to the peak? | [`advice`] |
//!
//! Files are read by the app (`app/src/runs.rs`: `open_for_summary` gives one trace or a run of
//! ranks summed up, `highest_rank` the one rank to look at), one trace per reader at a time.
//!
//! A new question is one function here and its words in `app/src/words`; a new face is one
//! module that calls these.

pub mod compare;
pub mod documents;
pub mod gates;
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
