//! Tags: what a live block is, from hooks inside the framework.

use super::category::Category;
use super::ids::{DeviceId, ProcessId, StringId};

/// From `time_ns` on (until the block at `address` is freed), the block is `category` named `name`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tag {
    /// When the tag was learnt.
    pub time_ns: i64,
    /// Device index.
    pub device: DeviceId,
    /// Which process.
    pub process: ProcessId,
    /// Address of the block (a storage's data pointer).
    pub address: u64,
    /// What it is.
    pub category: Category,
    /// E.g. `encoder.layers.3.attn.q_proj.weight`; empty when unnamed.
    pub name: StringId,
}
