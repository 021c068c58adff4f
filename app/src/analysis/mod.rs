//! Analysis of a trace: plain functions over the model, with no GUI types.
//!
//! - [`replay`]: allocated, requested and reserved bytes over time per device, counting memory
//!   that was allocated before a snapshot's trace window began.
//! - [`peak`]: the peak and what was alive at it.
//! - [`segments`]: the allocator's segment state and its fragmentation.
//! - [`summary`]: the per-device numbers `vramscope info` prints.

pub mod peak;
pub mod replay;
pub mod segments;
pub mod summary;
