//! Analysis of a trace: plain functions over the model of `vramscope-trace-format`. It knows no
//! screen (no egui here; the crate does not depend on it). The analyses return data (bytes,
//! times, ids, categories, structured reasons); only the query layer ([`query`]) says it in words
//! (`query::words`) and puts answers and words together in the documents every face shows
//! (`query::documents`).
//!
//! - `replay`: allocated, requested and reserved bytes over time per device, counting memory
//!   that was allocated before a snapshot's trace window began.
//! - `peak`: the peak and what was alive at it.
//! - `phases`: forward, backward and the optimizer step per iteration, and the high point of each.
//! - `segments`: the allocator's segment state and its fragmentation.
//! - `diff`: two runs compared at their peaks.
//! - `attribution`: what each block is for, and the evidence.
//! - `timeline`: memory over time by category, with a level-of-detail index for drawing.
//! - `instant`: everything alive at one instant, and the segments it sits in.
//! - `summary`: the per-device numbers `vramscope info` prints.
//! - `advisor`: what each remedy would do to the peak.
//! - `caveats`: what a trace cannot show.
//! - `invariants`: what every trace must hold once read, checked on request.
//! - `allocator`: the caching allocator's settings a run used.
//! - `allocsim`: a model of the caching allocator to replay a trace through.
//! - `run`: a distributed run as its ranks, each analysed alone, and the run summed up.
//! - `whole`: a GPU whole: every process on it as the driver accounted it, and what each was.
//! - [`query`]: one function per question a face asks, over all of the above; the documents that
//!   answer them, their JSON Schema, and their words.

pub(crate) mod advisor;
pub(crate) mod allocator;
pub(crate) mod allocsim;
pub(crate) mod attribution;
pub(crate) mod caveats;
pub(crate) mod diff;
pub(crate) mod frames;
pub(crate) mod growth;
pub(crate) mod instant;
pub(crate) mod invariants;
pub(crate) mod micros;
pub(crate) mod peak;
pub(crate) mod phases;
pub(crate) mod postmortem;
pub mod query;
pub(crate) mod replay;
pub(crate) mod run;
pub(crate) mod segments;
pub(crate) mod summary;
pub(crate) mod timeline;
pub(crate) mod whole;

#[cfg(test)]
mod testing;
