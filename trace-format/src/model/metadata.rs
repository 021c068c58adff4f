//! Facts about a trace as a whole: where it came from, its clock, devices and processes.

use serde::{Deserialize, Serialize};

use super::ids::DeviceId;

/// The kind of file a trace was read from or recorded as.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, schemars::JsonSchema, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum SourceFormat {
    /// A `.vtrace` recorded by `vramscope record`.
    #[default]
    Vtrace,
    /// A PyTorch memory snapshot (`torch.cuda.memory._dump_snapshot`).
    PytorchSnapshot,
    /// A PyTorch profiler Chrome trace (`export_chrome_trace`).
    ChromeTrace,
    /// A PyTorch profiler memory timeline (`export_memory_timeline`, `.json` or `raw.json.gz`).
    MemoryTimeline,
}

impl SourceFormat {
    /// The name used by `vramscope info`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Vtrace => "vtrace",
            Self::PytorchSnapshot => "pytorch-snapshot",
            Self::ChromeTrace => "chrome-trace",
            Self::MemoryTimeline => "memory-timeline",
        }
    }
}

/// What the trace's timestamps mean.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Clock {
    /// Nanoseconds since the Unix epoch.
    #[default]
    UnixNs,
    /// Nanoseconds of a monotonic clock with an arbitrary origin.
    MonotonicNs,
    /// No time was recorded: times are event indices.
    EventIndex,
}

/// A device seen in the trace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema, Deserialize, Default)]
pub struct DeviceInfo {
    /// Device index; -1 for host memory.
    pub device: DeviceId,
    /// Product name, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Total memory of the device, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_memory_bytes: Option<u64>,
    /// The device's UUID as NVML and `nvidia-smi -L` write it (`GPU-…`), when known: what ties
    /// the framework's device number to the driver's accounting of the whole device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// Bytes the source says were allocated when the trace started, when it says so (profiler
    /// traces report a running total that can start above zero).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_allocated_bytes: Option<u64>,
    /// The kind of device as PyTorch names it (`cuda`, `hip`, `xpu`, `mps`, ...); `None` is CUDA
    /// (or the host, for device -1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Whether memory allocated before the trace began is unknown: the source gives only changes,
    /// no running total, so the curve starts at the least that its frees imply was alive.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allocated_before_unknown: bool,
    /// Whether the device's frees come in two steps (`FreeRequested` when the program frees a
    /// block, `FreeCompleted` when its streams are done with it, as PyTorch's allocator records
    /// them) rather than one (`FreeCompleted` alone: profiler traces, a hook's `cudaFree`).
    /// `None` where the source did not say (files written before this was kept): it is worked out
    /// from the events when the trace is read ([`crate::Trace::settle_free_steps`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frees_in_two_steps: Option<bool>,
    /// Where the source reports running totals after each event (profiler traces) and its
    /// events alone do not add up to them: what was done to make the curve equal the totals,
    /// and where it could not be.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub totals: Option<TotalsAgreement>,
}

/// How a device's allocated curve was made to agree with the source's running totals
/// ([`DeviceInfo::totals`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema, Deserialize, Default)]
pub struct TotalsAgreement {
    /// The most memory at once that the totals count and no event allocates (shown as blocks
    /// flagged [`UNREPORTED`](crate::event_flags::UNREPORTED)).
    #[serde(default)]
    pub unreported_max_bytes: u64,
    /// Blocks whose free the totals show but no event reports (freed where the totals drop).
    #[serde(default)]
    pub unreported_frees: u64,
    /// Where the events keep more alive than the totals count and no block could be freed to
    /// close the difference: the curve is above the totals there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub above: Option<AboveTotals>,
}

/// A stretch where the allocated curve is above the source's running totals
/// ([`TotalsAgreement::above`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema, Deserialize, Default)]
pub struct AboveTotals {
    /// The first event above, on the trace's clock.
    pub from_ns: i64,
    /// The last event above.
    pub to_ns: i64,
    /// How many events are above.
    pub events: u64,
    /// By how much at most.
    pub max_bytes: u64,
}

impl Metadata {
    /// How many processes were recorded: the first this many of [`Metadata::processes`] (those
    /// only the driver's accounting saw, [`ProcessInfo::not_recorded`], come after them).
    pub fn recorded_processes(&self) -> usize {
        self.processes.iter().take_while(|p| !p.not_recorded).count()
    }

    /// How a device is named: `cuda:0`, `hip:1`, `xpu:0`; `host` for -1.
    pub fn device_label(&self, device: DeviceId) -> String {
        if device.is_host() {
            return "host".to_owned();
        }
        let kind = self.devices.iter().find(|d| d.device == device).and_then(|d| d.kind.as_deref()).unwrap_or("cuda");
        format!("{kind}:{device}")
    }
}

/// A process seen in the trace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema, Deserialize, Default)]
pub struct ProcessInfo {
    /// Operating-system process id, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Distributed rank, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// Command line, when known.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command_line: Vec<String>,
    /// The node (machine) of a multi-node run it ran on, by number (torchrun's `GROUP_RANK`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<u32>,
    /// Its rank within its node (`LOCAL_RANK`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_rank: Option<u32>,
    /// The host's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Recorded inside the program (Python's `vramscope.record()`), by PyTorch's allocator
    /// alone: memory outside it, and the allocation of what was alive before recording began,
    /// are not seen.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub in_process: bool,
    /// Not recorded: seen only in the driver's per-process accounting (NVML) of a device the
    /// recording sampled, with the bytes it held there over time (the `process` series of
    /// [`crate::CounterKind::DeviceUsed`]) and nothing else.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub not_recorded: bool,
    /// What to call it, when known: the Python script (and a first argument that is a plain
    /// word) of a process the PyTorch shim recorded; the executable's name (`/proc/PID/comm`) of
    /// one only the driver's accounting saw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Facts about the whole trace. Stored as JSON in a `.vtrace`, so it can grow without a new
/// format version.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema, Deserialize, Default)]
pub struct Metadata {
    /// The format the trace was first read from.
    #[serde(default)]
    pub source_format: SourceFormat,
    /// What the timestamps mean.
    #[serde(default)]
    pub clock: Clock,
    /// Version of the tool that wrote the trace.
    #[serde(default)]
    pub tool_version: String,
    /// Devices, sorted by index.
    #[serde(default)]
    pub devices: Vec<DeviceInfo>,
    /// Processes; [`crate::ProcessId`] indexes this list.
    #[serde(default)]
    pub processes: Vec<ProcessInfo>,
    /// The allocator's settings as the source reported them (PyTorch's `allocator_settings`).
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub allocator_settings: serde_json::Value,
    /// Other facts of the source worth keeping (e.g. the profiler's `deviceProperties`).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub extra: serde_json::Map<String, serde_json::Value>,
    /// The part of the source this trace was opened at, when it was opened in part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<RangeInfo>,
    /// Stretches in which a process's tensor allocations were not recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unrecorded: Vec<Unrecorded>,
}

/// A stretch in which a recorded process's tensor allocations were not seen: on the CPU,
/// PyTorch's profiler (the shim's source) was off, because the program's own profiler ran or
/// because it could not yet be restarted without risk to the program.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema, Deserialize)]
pub struct Unrecorded {
    /// The process: its index in [`Metadata::processes`] (a [`crate::ProcessId`]).
    pub process: u32,
    /// The device whose allocations were not seen (host memory: -1).
    pub device: DeviceId,
    /// From (the trace's clock).
    pub begin_ns: i64,
    /// To.
    pub end_ns: i64,
    /// Why, as the shim said it: `own_profiler`, `open_ranges` or `unsafe`.
    pub why: String,
    /// What was open, for `open_ranges` and `unsafe`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// How a trace opened in part ([`crate::range`]) relates to its source.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema, Deserialize)]
pub struct RangeInfo {
    /// The range asked for.
    pub range: super::range::TraceRange,
    /// Events of the source before the range, folded into what was alive at its start.
    pub events_before: u64,
    /// Events of the source after the range, left out.
    pub events_after: u64,
    /// Blocks and segments alive at the range's start, kept as allocations there.
    pub alive_at_start: u64,
    /// Whether the source's final state (a snapshot's segments) was left out because it
    /// describes a time after the range.
    pub final_state_dropped: bool,
    /// When the source's first event happened, on the trace's clock: the origin every time of
    /// the part is said from, as it is for the whole ([`crate::Trace::origin_ns`]). `None` in
    /// files written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin_ns: Option<i64>,
    /// When the blocks the part shows allocated at its start were allocated in the source,
    /// where the source shows it (a block alive since before the source has none): what a block
    /// is follows from when it was allocated, and a part never changes what a block is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alive_since: Vec<AliveSince>,
    /// The source's phase and module spans from before the part that those blocks were
    /// allocated in or lived through (cut from the part's own annotations), for the same reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spans_before: Vec<SpanBefore>,
}

/// When a block a part of a trace shows allocated at its start was allocated in its source
/// ([`RangeInfo::alive_since`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema, Deserialize)]
pub struct AliveSince {
    /// Its process.
    pub process: u32,
    /// Its device.
    pub device: i16,
    /// Its address.
    pub address: u64,
    /// When it was allocated, on the trace's clock.
    pub time_ns: i64,
}

/// A phase or module span of a trace's source from before the part opened
/// ([`RangeInfo::spans_before`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema, Deserialize)]
pub struct SpanBefore {
    /// `forward`, `backward`, `optimizer_step` or `module`.
    pub kind: String,
    /// Its process.
    pub process: u32,
    /// Its device; none: every device of its process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<i16>,
    /// Its start and end, on the trace's clock.
    pub start_ns: i64,
    /// Its end.
    pub end_ns: i64,
    /// A module's qualified name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process's place in a multi-node run is kept, and metadata written before it existed
    /// reads as not known.
    #[test]
    fn a_process_knows_its_node_and_older_metadata_reads_without() {
        let placed = ProcessInfo {
            pid: Some(7),
            rank: Some(3),
            node: Some(1),
            local_rank: Some(1),
            host: Some("node-b".to_owned()),
            ..ProcessInfo::default()
        };
        let json = serde_json::to_string(&placed).expect("JSON");
        assert_eq!(serde_json::from_str::<ProcessInfo>(&json).expect("read"), placed);
        let old: ProcessInfo = serde_json::from_str(r#"{"pid": 7, "rank": 3}"#).expect("read");
        assert_eq!((old.node, old.local_rank, old.host), (None, None, None));
    }
}
