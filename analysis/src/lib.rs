//! Analysis of a trace: plain functions over the model of `vramscope-trace-format`. It knows no
//! screen (no egui here; the crate does not depend on it) and says nothing in words: what it
//! returns is data (bytes, times, ids, categories, structured reasons), which the app's CLI, GUI
//! and report word.
//!
//! - [`replay`]: allocated, requested and reserved bytes over time per device, counting memory
//!   that was allocated before a snapshot's trace window began.
//! - [`peak`]: the peak and what was alive at it.
//! - [`phases`]: forward, backward and the optimizer step per iteration, and the high point of each.
//! - [`segments`]: the allocator's segment state and its fragmentation.
//! - [`diff`]: two runs compared at their peaks.
//! - [`attribution`]: what each block is for, and the evidence.
//! - [`timeline`]: memory over time by category, with a level-of-detail index for drawing.
//! - [`instant`]: everything alive at one instant, and the segments it sits in.
//! - [`summary`]: the per-device numbers `vramscope info` prints.
//! - [`advisor`]: what each remedy would do to the peak.
//! - [`caveats`]: what a trace cannot show.
//! - [`invariants`]: what every trace must hold once read, checked on request.
//! - [`allocator`]: the caching allocator's settings a run used.
//! - [`allocsim`]: a model of the caching allocator to replay a trace through.
//! - [`run`]: a distributed run as its ranks, each analysed alone, and the run summed up.
//! - [`query`]: one function per question a face asks, over all of the above.

pub mod advisor;
pub mod allocator;
pub mod allocsim;
pub mod attribution;
pub mod caveats;
pub mod diff;
pub mod frames;
pub mod growth;
pub mod instant;
pub mod invariants;
pub mod micros;
pub mod peak;
pub mod phases;
pub mod postmortem;
pub mod query;
pub mod replay;
pub mod run;
pub mod segments;
pub mod summary;
pub mod timeline;

#[cfg(test)]
mod testing;
