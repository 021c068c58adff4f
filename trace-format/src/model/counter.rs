//! Sampled values over time: device-wide usage, and category totals of profiler timelines.

use super::category::Category;
use super::ids::{DeviceId, ProcessId, StringId};

/// The name of a [`CounterKind::DeviceUsed`] series of the whole device.
pub const DEVICE_SERIES: &str = "device";
/// The name of a [`CounterKind::DeviceUsed`] series of one process on the device.
pub const PROCESS_SERIES: &str = "process";

/// What a counter measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CounterKind {
    /// Device memory in use as the driver accounts it (NVML), outside the framework too: a
    /// series named [`DEVICE_SERIES`] is the whole device, every process on it (its `process`
    /// is not meaningful); one named [`PROCESS_SERIES`] is what the driver accounts to its
    /// `process` there (its context, its allocations, another allocator's pools).
    DeviceUsed,
    /// Bytes allocated by the framework, as the source reported them.
    Allocated,
    /// Bytes reserved by the framework's allocator, as the source reported them.
    Reserved,
    /// Live bytes of one category, as the source reported them (the profiler's memory timeline).
    Category(Category),
    /// Anything else, named by the series.
    Other,
}

impl CounterKind {
    /// The byte pair this kind is stored as in a `.vtrace` file.
    pub fn to_bytes(self) -> [u8; 2] {
        match self {
            Self::DeviceUsed => [0, 0],
            Self::Allocated => [1, 0],
            Self::Reserved => [2, 0],
            Self::Category(category) => [3, category as u8],
            Self::Other => [4, 0],
        }
    }

    /// The kind stored as `bytes` in a file, if it is one.
    pub fn from_bytes(bytes: [u8; 2]) -> Option<Self> {
        match bytes {
            [0, 0] => Some(Self::DeviceUsed),
            [1, 0] => Some(Self::Allocated),
            [2, 0] => Some(Self::Reserved),
            [3, c] => Category::from_u8(c).map(Self::Category),
            [4, 0] => Some(Self::Other),
            _ => None,
        }
    }
}

/// One sample of a counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CounterSample {
    /// When.
    pub time_ns: i64,
    /// The value (bytes for every kind defined so far).
    pub value: i64,
}

/// A time series of samples, in time order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CounterSeries {
    /// What it measures.
    pub kind: CounterKind,
    /// A display name.
    pub name: StringId,
    /// Device index; -1 for host.
    pub device: DeviceId,
    /// Which process.
    pub process: ProcessId,
    /// Samples in time order.
    pub samples: Vec<CounterSample>,
}
