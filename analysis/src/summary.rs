//! The per-device numbers `vramscope info` reports.

use std::collections::BTreeMap;

use serde::Serialize;
use vramscope_trace_format::import::Wrapper;
use vramscope_trace_format::{Category, Clock, DeviceId, SourceFormat, Trace};

use super::attribution::{Attributor, Evidence};
use super::peak::{self, Peak};
use super::segments;

/// What `info` says about one device.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema, PartialEq)]
pub struct DeviceSummary {
    /// Device index; -1 for host memory.
    pub device: DeviceId,
    /// Its name: `cuda:0`, `hip:1`, `host`.
    pub label: String,
    /// Product name, when the trace knows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The device's memory, when the trace knows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_memory_bytes: Option<u64>,
    /// Allocator events of the device.
    pub events: usize,
    /// Segments in the final state.
    pub segments: usize,
    /// The final state: reserved, allocated and requested bytes, internal waste, free bytes and
    /// the largest free range (in the JSON as keys of the device's own).
    #[serde(flatten)]
    pub final_state: segments::Fragmentation,
    /// The final state's active bytes: allocated, and freed by the program but waiting for their
    /// streams (`awaiting_free_bytes`); PyTorch's `active_bytes`.
    pub active_bytes: u64,
    /// Final state: segments of private pools (CUDA graphs, `MemPool`).
    pub private_pool_segments: usize,
    /// Final state: bytes reserved by private pools.
    pub private_pool_reserved_bytes: u64,
    /// Peak of allocated bytes.
    pub peak_allocated_bytes: u64,
    /// When the allocated peak was first reached (ns on the trace's clock, µs in the JSON; none
    /// without a clock).
    #[serde(rename = "peak_allocated_time_us", serialize_with = "crate::micros::opt_ns_as_us")]
    pub peak_allocated_time_ns: Option<i64>,
    /// Peak of active bytes (allocated, and freed but waiting for streams).
    pub peak_active_bytes: u64,
    /// When the active peak was first reached.
    #[serde(rename = "peak_active_time_us", serialize_with = "crate::micros::opt_ns_as_us")]
    pub peak_active_time_ns: Option<i64>,
    /// Peak of requested bytes.
    pub peak_requested_bytes: u64,
    /// Peak of reserved bytes.
    pub peak_reserved_bytes: u64,
    /// When the reserved peak was first reached.
    #[serde(rename = "peak_reserved_time_us", serialize_with = "crate::micros::opt_ns_as_us")]
    pub peak_reserved_time_ns: Option<i64>,
    /// Whether the trace records reserved memory at all (segments, or reserved totals): a
    /// profiler's CPU trace and a memory timeline do not, and their reserved peak is 0.
    pub reserved_recorded: bool,
    /// Bytes by category at the allocated peak (non-zero ones; they add up to the peak).
    pub categories_at_peak: BTreeMap<Category, u64>,
    /// Blocks alive at the allocated peak.
    pub live_blocks_at_peak: usize,
    /// Of the unknown bytes at the peak, those allocated before the recording began and alive
    /// to its end: model state, most likely (a snapshot whose history started after the model
    /// was built, with no gradients of the same sizes to name them by).
    #[serde(skip_serializing_if = "is_zero")]
    pub unknown_from_before_recording_bytes: u64,
    /// Failed allocations.
    pub oom_events: usize,
    /// The largest allocation that failed, when one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub largest_failed_request_bytes: Option<u64>,
    /// Whether memory grows from one iteration to the next (with at least three iterations).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub growth: Option<crate::growth::Growth>,
    /// Forward, backward and the optimizer step of each iteration and their high points, when
    /// the trace shows them (in the JSON, their `crate::phases::Outline`: the same size at
    /// any length of run).
    #[serde(skip_serializing_if = "crate::phases::Phases::is_empty", serialize_with = "outline")]
    #[schemars(with = "crate::phases::Outline<'static>")]
    pub phases: crate::phases::Phases,
}

fn outline<S: serde::Serializer>(phases: &crate::phases::Phases, s: S) -> Result<S::Ok, S::Error> {
    phases.outline().serialize(s)
}

/// What `info` says about a trace.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema, PartialEq)]
pub struct Summary {
    /// Format of the file (`pytorch-snapshot`, `vtrace`, `chrome-trace`, `memory-timeline`).
    pub format: &'static str,
    /// Format the trace was first read from (differs from `format` for converted traces).
    pub source_format: &'static str,
    /// Records of every kind: allocator events, annotations, OOMs, tags and counter samples.
    pub events: usize,
    /// Allocator events.
    pub allocator_events: usize,
    /// Annotations (ranges and markers).
    pub annotations: usize,
    /// Distinct call stacks.
    pub stacks: usize,
    /// What every time the faces print is said from (`+2.5 s`): the trace's first event (of its
    /// source, for a range of one), on the trace's clock (µs in the JSON, like every time there;
    /// none without a clock).
    #[serde(rename = "time_origin_us", serialize_with = "crate::micros::opt_ns_as_us")]
    pub time_origin_ns: Option<i64>,
    /// The CUDA driver's version (1000 x major + 10 x minor) where a recording asked it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cuda_driver_version: Option<i64>,
    /// What the file's content came wrapped in, outermost first (`gzip`, `memory_viz HTML`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub wrapped_in: Vec<&'static str>,
    /// The distributed rank the trace says it is, when it says so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// What the trace cannot show (no allocation history, memory from before a profiler started);
    /// `info` words them (in the JSON as `notes`).
    #[serde(skip)]
    pub caveats: Vec<super::caveats::Caveat>,
    /// Other facts the source recorded (a profiler trace's `distributedInfo` and top-level
    /// metadata, a snapshot's keys vramscope does not read, a recording's driver version).
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// The device to look at first: the first that ran out of memory, else the largest peak.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub focus_device: Option<DeviceId>,
    /// Per device.
    pub devices: Vec<DeviceSummary>,
    /// Each GPU whole, where the recording sampled the driver's accounting (NVML): every
    /// process that held memory on it, recorded or not, and what each held.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub whole_devices: Vec<super::whole::WholeDevice>,
}

/// When a peak was reached on the trace's clock, `None` for traces without one.
pub fn time_on_clock(trace: &Trace, peak: &Peak) -> Option<i64> {
    (trace.metadata.clock != Clock::EventIndex).then_some(peak.time_ns)
}

fn is_zero(bytes: &u64) -> bool {
    *bytes == 0
}

/// Summarises one device: the iterations and the phases are worked out on threads of their own,
/// beside the peak; the device's events and its state before them once, for all three.
pub fn device_summary(trace: &Trace, device: DeviceId) -> DeviceSummary {
    let events = crate::replay::device_events(trace, device);
    let initial = crate::replay::initial_state(trace, device, &events);
    let of = crate::phases::Device { id: device, events: &events, initial: &initial };
    std::thread::scope(|scope| {
        let growth = scope.spawn(|| crate::growth::growth_with(trace, device, &events));
        let phases = scope.spawn(move || crate::phases::phases_of(trace, of));
        let mut summary = device_summary_with(trace, of, None, crate::phases::Phases::default());
        // A thread that panicked is a bug: raise it here as if it had run on this one.
        summary.growth = growth.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
        summary.phases = phases.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
        summary
    })
}

fn device_summary_with(
    trace: &Trace,
    of: crate::phases::Device<'_>,
    growth: Option<crate::growth::Growth>,
    phases: crate::phases::Phases,
) -> DeviceSummary {
    let device = of.id;
    let peaks = peak::peaks_from(trace, device, of.events, of.initial);
    let mut live = Vec::new();
    peak::live_at_each_from(trace, of.events, of.initial, &[peaks.allocated.event], |_, blocks| live = blocks);
    // One attributor for the categories and for what of the unknown came from before.
    let mut attributor = Attributor::new(trace, device);
    if live.iter().any(|b| b.alloc_event.is_none()) {
        attributor.prepare_persistent(of.events, of.initial);
    }
    let categories = peak::categories_at_with(trace, device, peaks.allocated.time_ns, &live, &mut attributor);
    let mut unknown_from_before_recording_bytes = 0;
    if categories.contains_key(&Category::Unknown) {
        for block in live.iter().filter(|b| b.alloc_event.is_none()) {
            let found = attributor.block(block.address, i64::MIN, peaks.allocated.time_ns, block.stack);
            if found.evidence == (Evidence::BeforeRecording { persistent: true }) {
                unknown_from_before_recording_bytes += block.size_bytes;
            }
        }
    }
    let final_state = segments::final_state(trace, device);
    let total = match &final_state {
        Some(state) => state.total,
        // Without a segment state, the end of the replay tells what it can.
        None => segments::Fragmentation {
            reserved_bytes: peaks.end.reserved_bytes,
            allocated_bytes: peaks.end.allocated_bytes,
            awaiting_free_bytes: peaks.end.active_bytes.saturating_sub(peaks.end.allocated_bytes),
            requested_bytes: peaks.end.requested_bytes,
            free_internal_bytes: peaks.end.allocated_bytes.saturating_sub(peaks.end.requested_bytes),
            free_external_bytes: peaks.end.reserved_bytes.saturating_sub(peaks.end.active_bytes),
            largest_free_bytes: 0,
        },
    };
    let facts = trace.metadata.devices.iter().find(|d| d.device == device);
    DeviceSummary {
        device,
        label: trace.metadata.device_label(device),
        name: facts.and_then(|d| d.name.clone()),
        total_memory_bytes: facts.and_then(|d| d.total_memory_bytes),
        events: of.events.len(),
        segments: final_state.as_ref().map_or(0, |s| s.segments),
        final_state: total,
        active_bytes: total.allocated_bytes.saturating_add(total.awaiting_free_bytes),
        private_pool_segments: final_state.as_ref().map_or(0, |s| s.private_pool_segments),
        private_pool_reserved_bytes: final_state.as_ref().map_or(0, |s| s.private_pool_reserved_bytes),
        peak_allocated_bytes: peaks.allocated.bytes,
        peak_allocated_time_ns: time_on_clock(trace, &peaks.allocated),
        peak_active_bytes: peaks.active.bytes,
        peak_active_time_ns: time_on_clock(trace, &peaks.active),
        peak_requested_bytes: peaks.requested.bytes,
        peak_reserved_bytes: peaks.reserved.bytes,
        peak_reserved_time_ns: time_on_clock(trace, &peaks.reserved),
        reserved_recorded: peak::reserved_recorded(trace, device, &peaks),
        categories_at_peak: categories.into_iter().collect(),
        live_blocks_at_peak: live.len(),
        unknown_from_before_recording_bytes,
        oom_events: trace.ooms.iter().filter(|o| o.device == device).count(),
        largest_failed_request_bytes: trace.ooms.iter().filter(|o| o.device == device).map(|o| o.requested_bytes).max(),
        growth,
        phases,
    }
}

/// The device a person should look at first: the one that ran out of memory first, else the one
/// with the highest allocated peak (the first of equals), else none (no devices).
pub fn focus_device(trace: &Trace, peaks: impl IntoIterator<Item = (DeviceId, u64)>) -> Option<DeviceId> {
    if let Some(first_oom) = trace.ooms.iter().min_by_key(|o| o.time_ns) {
        return Some(first_oom.device);
    }
    highest_peak(peaks)
}

/// The device (or rank, or process) with the highest peak, the first of equals in the order
/// given; none when there are none. The one rule every face uses to choose what to show first.
pub fn highest_peak<K>(peaks: impl IntoIterator<Item = (K, u64)>) -> Option<K> {
    let mut best: Option<(K, u64)> = None;
    for (key, peak) in peaks {
        if best.as_ref().is_none_or(|(_, b)| peak > *b) {
            best = Some((key, peak));
        }
    }
    best.map(|(k, _)| k)
}

/// Distinct non-empty call stacks that something in the trace was recorded with (an importer may
/// intern stacks it later replaces, as FX-augmented snapshots do).
pub fn referenced_stacks(trace: &Trace) -> usize {
    let mut seen = vec![false; trace.interner.stack_count()];
    let mut mark = |stack: vramscope_trace_format::StackId| {
        if let Some(slot) = seen.get_mut(stack.index()) {
            *slot = true;
        }
    };
    trace.events.iter().for_each(|e| mark(e.stack));
    trace.ooms.iter().for_each(|o| mark(o.stack));
    trace.annotations.iter().for_each(|a| mark(a.stack));
    for segment in &trace.segments {
        mark(segment.stack);
        segment.blocks.iter().for_each(|b| mark(b.stack));
    }
    seen.iter().skip(1).filter(|&&s| s).count()
}

/// Summarises a trace read from a file of `format` (wrapped in `wrappers`), every device.
pub fn summary(trace: &Trace, format: SourceFormat, wrappers: &[Wrapper]) -> Summary {
    let devices: Vec<DeviceSummary> = trace.devices().into_iter().map(|d| device_summary(trace, d)).collect();
    Summary {
        wrapped_in: wrappers.iter().map(|w| w.name()).collect(),
        rank: trace
            .metadata
            .processes
            .first()
            .and_then(|p| p.rank)
            .filter(|_| trace.metadata.recorded_processes() == 1),
        caveats: super::caveats::caveats(trace),
        metadata: trace.metadata.extra.clone(),
        focus_device: focus_device(trace, devices.iter().map(|d| (d.device, d.peak_allocated_bytes))),
        format: format.name(),
        source_format: trace.metadata.source_format.name(),
        events: trace.record_count(),
        allocator_events: trace.events.len(),
        time_origin_ns: (trace.metadata.clock != Clock::EventIndex).then(|| trace.origin_ns()),
        annotations: trace.annotations.len(),
        stacks: referenced_stacks(trace),
        cuda_driver_version: trace.metadata.extra.get("cuda_driver_version").and_then(serde_json::Value::as_i64),
        devices,
        whole_devices: super::whole::whole_devices(trace),
    }
}

#[cfg(test)]
mod tests {
    use vramscope_trace_format::{DeviceId, Oom, ProcessId, StackId, Trace};

    use super::{focus_device, highest_peak};

    /// The one rule for what to show first: the highest peak, the first of equals in the order
    /// given (devices by index, ranks by number), none of nothing.
    #[test]
    fn the_highest_peak_is_the_first_of_equals() {
        let d = DeviceId;
        assert_eq!(highest_peak([(d(0), 5), (d(1), 9), (d(2), 9), (d(3), 1)]), Some(d(1)));
        assert_eq!(highest_peak([(d(2), 9), (d(1), 9)]), Some(d(2)));
        assert_eq!(highest_peak([(d(0), 0), (d(1), 0)]), Some(d(0)));
        assert_eq!(highest_peak(Vec::<(DeviceId, u64)>::new()), None);
        // Ranks and processes go by the same rule.
        assert_eq!(highest_peak([(3u32, 7), (1, 8), (0, 8)]), Some(1));
    }

    /// The device that ran out of memory first comes before any peak, however low its own.
    #[test]
    fn the_first_oom_comes_before_the_highest_peak() {
        let mut trace = Trace::default();
        let peaks = [(DeviceId(0), 10), (DeviceId(1), 90), (DeviceId(2), 50)];
        assert_eq!(focus_device(&trace, peaks), Some(DeviceId(1)));
        let oom = |time_ns, device| Oom {
            time_ns,
            device: DeviceId(device),
            process: ProcessId(0),
            stream: 0,
            requested_bytes: 1,
            device_free_bytes: None,
            stack: StackId(0),
        };
        trace.ooms = vec![oom(300, 2), oom(100, 0), oom(200, 1)];
        assert_eq!(focus_device(&trace, peaks), Some(DeviceId(0)));
    }
}
