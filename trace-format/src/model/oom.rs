//! Out-of-memory events.

use super::ids::{DeviceId, ProcessId, StackId};

/// A failed allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Oom {
    /// When it failed.
    pub time_ns: i64,
    /// Device index.
    pub device: DeviceId,
    /// Which process.
    pub process: ProcessId,
    /// Stream of the request.
    pub stream: u64,
    /// Size of the allocation that failed.
    pub requested_bytes: u64,
    /// Free device memory the driver reported at the failure, when known.
    pub device_free_bytes: Option<u64>,
    /// Where the failing allocation came from.
    pub stack: StackId,
}
