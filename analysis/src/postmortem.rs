//! An out-of-memory error explained: the request that failed, what the device and the allocator
//! had free, what was alive by category and site, when in the run it happened, and the smallest
//! change the advisor projects would have fitted.
//!
//! What would have fitted: the run needed, at the failure, what it held plus the request. The
//! advisor is asked for the smallest change that brings the peak under the memory there was
//! (the device's, else what the process held plus what the device had free) less the request.
//! That is a lower bound of what the run needed: after the failed allocation it would have
//! allocated more, which the trace cannot show.

use serde::Serialize;
use vramscope_trace_format::{AnnotationKind, Category, DeviceId, Trace};

use crate::instant::{self, SiteBytes};
use crate::phases::PhaseKind;

/// What the allocator held free when the request failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct HeldFree {
    /// Reserved, not allocated and not waiting for streams (inside blocks and between them).
    pub bytes: u64,
    /// Blocks the program freed that wait for the streams that used them: neither allocated
    /// nor free (nothing can use them until those streams are done).
    pub awaiting_bytes: u64,
    /// The largest free range in one segment, where the trace has the segments.
    pub largest_range_bytes: Option<u64>,
}

/// The smallest change projected to have fitted.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Fix {
    /// The remedy (or pair), as the advisor names it.
    pub id: String,
    /// Its projected peak, allocated.
    pub projected_peak_allocated_bytes: u64,
    /// Its projected peak, reserved.
    pub projected_peak_reserved_bytes: u64,
    /// The projection's uncertainty, as a fraction of the peak.
    pub uncertainty: f64,
}

/// One OOM explained.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct PostMortem {
    /// Index in `Trace::ooms`.
    pub index: usize,
    /// The device.
    pub device: DeviceId,
    /// When, on the trace's clock (µs in the JSON, like every time there).
    #[serde(rename = "time_us", serialize_with = "crate::micros::ns_as_us")]
    pub time_ns: i64,
    /// The bytes asked for.
    pub requested_bytes: u64,
    /// The stream it was asked on (0: the default or not recorded).
    pub stream: u64,
    /// Where it was asked from, innermost frame first (empty: not recorded).
    pub stack: Vec<String>,
    /// What the device had free, as the failure reported it.
    pub device_free_bytes: Option<u64>,
    /// The device's memory, where the trace says.
    pub device_total_bytes: Option<u64>,
    /// Allocated when it failed.
    pub allocated_bytes: u64,
    /// Reserved when it failed.
    pub reserved_bytes: u64,
    /// What the allocator held free but could not use.
    pub held_free: HeldFree,
    /// Whether a free range held was as large as the request: fragmentation, if the allocator
    /// still could not use it (a different stream or pool, or the request rounded up past it).
    pub fragmentation: bool,
    /// Live bytes by category, largest first.
    pub by_category: Vec<(Category, u64)>,
    /// Live bytes by allocation site, largest first (the first ten).
    pub by_site: Vec<SiteBytes>,
    /// The phase it happened in (`forward`, `backward`, `optimizer_step`), where recorded.
    pub phase: Option<PhaseKind>,
    /// The iteration it happened in (from 1), where iterations were recorded.
    pub iteration: Option<usize>,
    /// The memory the run could have: the device's, else what it held plus what was free.
    pub capacity_bytes: Option<u64>,
    /// The smallest change projected to fit under the capacity less the request, if any.
    pub fix: Option<Fix>,
    /// Whether the advisor found one that fits (false with `fix` None: none did; the question
    /// was not asked without a capacity).
    pub fix_searched: bool,
    /// Who held the device when it failed, as the driver accounted it (the recording's last
    /// sample of NVML at or before the failure), the most first: this process and every other,
    /// recorded or not. Empty where the recording did not sample the driver. What the others
    /// held is not the program's to have: the capacity a fix must fit under leaves it out.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<Holder>,
}

/// A process holding memory on the device when an allocation failed.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Holder {
    /// What to call it.
    pub name: String,
    /// Its pid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Whether it is the process that failed.
    pub this_process: bool,
    /// Whether the recording saw it.
    pub recorded: bool,
    /// What the driver accounted to it; where `sampled` is false, what the recording saw it
    /// hold (its context left out).
    pub bytes: u64,
    /// Whether `bytes` is the driver's account (false: the failing process had not been sampled
    /// holding memory yet).
    pub sampled: bool,
    /// Of that, recorded: what lies outside PyTorch's allocator (other allocations, its context).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outside_pytorch_bytes: Option<u64>,
}

/// Who held `device` at `time_ns` in `whole` (the trace with every process), `process` being the
/// one that failed there: from the driver's per-process samples.
pub fn holders(
    whole: &Trace,
    device: DeviceId,
    process: vramscope_trace_format::ProcessId,
    time_ns: i64,
) -> Vec<Holder> {
    use vramscope_trace_format::{CounterKind, PROCESS_SERIES};
    let mut out: Vec<Holder> = whole
        .counters
        .iter()
        .filter(|c| {
            c.device == device && c.kind == CounterKind::DeviceUsed && whole.interner.resolve(c.name) == PROCESS_SERIES
        })
        .filter_map(|series| {
            let i = series.samples.partition_point(|s| s.time_ns <= time_ns).checked_sub(1)?;
            let bytes = u64::try_from(series.samples[i].value).ok().filter(|&b| b > 0)?;
            let info = whole.metadata.processes.get(series.process.0 as usize);
            let recorded = info.is_some_and(|p| !p.not_recorded);
            let outside_pytorch_bytes = recorded.then(|| {
                let parts = crate::whole::parts_at(whole, device, series.process, time_ns, bytes);
                parts.outside_allocations_bytes + parts.not_allocations_bytes
            });
            Some(Holder {
                name: crate::whole::process_name(whole, series.process),
                pid: info.and_then(|p| p.pid),
                this_process: series.process == process,
                recorded,
                bytes,
                sampled: true,
                outside_pytorch_bytes,
            })
        })
        .collect();
    out.sort_by_key(|h| std::cmp::Reverse(h.bytes));
    out
}

/// The post-mortem of OOM `index` of `trace`; `None` when there is no such OOM.
pub fn postmortem(trace: &Trace, index: usize) -> Option<PostMortem> {
    let oom = trace.ooms.get(index)?;
    let holders = holders(trace, oom.device, oom.process, oom.time_ns);
    postmortem_sharing(trace, index, holders)
}

/// [`postmortem`], with who held the device when it failed (`holders`, from the trace of every
/// process: `trace` may be the failing process's part alone).
pub fn postmortem_sharing(trace: &Trace, index: usize, mut holders: Vec<Holder>) -> Option<PostMortem> {
    let oom = *trace.ooms.get(index)?;
    let device = oom.device;
    // The state in force when it failed: after the last event of its device at or before then.
    let last = trace.events.iter().rposition(|e| e.device == device && e.time_ns <= oom.time_ns);
    let at = instant::instant(trace, device, last, oom.time_ns);
    let mut by_category: Vec<(Category, u64)> = at.by_category.iter().map(|(&c, &b)| (c, b)).collect();
    by_category.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut by_site = instant::by_site(trace, &at.blocks);
    by_site.truncate(10);
    let has_segments = !at.segments.is_empty();
    let held_free = HeldFree {
        bytes: at
            .total
            .reserved_bytes
            .saturating_sub(at.total.allocated_bytes)
            .saturating_sub(at.total.awaiting_free_bytes),
        awaiting_bytes: at.total.awaiting_free_bytes,
        largest_range_bytes: has_segments.then_some(at.total.largest_free_bytes),
    };
    // The program's own line first, the allocator's and the interpreter's frames folded away.
    let stack = instant::stack_lines(trace, oom.stack, true);
    let phase = trace
        .annotations
        .iter()
        .filter(|a| a.applies_to(device) && a.start_ns <= oom.time_ns && oom.time_ns <= a.end_ns)
        .filter_map(|a| {
            let kind = match a.kind {
                AnnotationKind::Forward => PhaseKind::Forward,
                AnnotationKind::Backward => PhaseKind::Backward,
                AnnotationKind::OptimizerStep => PhaseKind::OptimizerStep,
                _ => return None,
            };
            Some((a.start_ns, kind))
        })
        .max_by_key(|&(start_ns, _)| start_ns)
        .map(|(_, kind)| kind);
    let mut iterations: Vec<i64> = trace
        .annotations
        .iter()
        .filter(|a| a.applies_to(device) && a.kind == AnnotationKind::Iteration)
        .map(|a| a.start_ns)
        .collect();
    iterations.sort_unstable();
    iterations.dedup();
    let iteration = (!iterations.is_empty()).then(|| iterations.partition_point(|&s| s <= oom.time_ns).max(1));
    let device_total_bytes =
        trace.metadata.devices.iter().find(|d| d.device == device).and_then(|d| d.total_memory_bytes);
    // A process that failed before the driver was next asked is not in its last account: what
    // the recording saw it hold stands for it (its context, which no call shows, left out).
    if !holders.is_empty() && !holders.iter().any(|h| h.this_process) {
        holders.push(Holder {
            name: crate::whole::process_name(trace, oom.process),
            pid: trace.metadata.processes.get(oom.process.0 as usize).and_then(|p| p.pid),
            this_process: true,
            recorded: true,
            bytes: at.total.reserved_bytes.max(at.total.allocated_bytes),
            sampled: false,
            outside_pytorch_bytes: None,
        });
        holders.sort_by_key(|h| std::cmp::Reverse(h.bytes));
    }
    // What other processes held is not this one's to have.
    let others: u64 = holders.iter().filter(|h| !h.this_process).map(|h| h.bytes).sum();
    let capacity_bytes = device_total_bytes
        .map(|t| t.saturating_sub(others))
        .or_else(|| oom.device_free_bytes.map(|f| f + at.total.reserved_bytes));
    let target = capacity_bytes.map(|c| c.saturating_sub(oom.requested_bytes));
    let mut fix = None;
    if let Some(target) = target
        && let Some(advice) = crate::advisor::advise(trace, Some(device), None, Some(target))
    {
        let chosen = advice.smallest_change_that_fits.as_deref();
        fix = advice.remedies.iter().chain(&advice.combinations).find(|p| Some(p.id.as_str()) == chosen).map(|p| Fix {
            id: p.id.clone(),
            projected_peak_allocated_bytes: p.projected_peak_allocated_bytes,
            projected_peak_reserved_bytes: p.projected_peak_reserved_bytes,
            uncertainty: p.uncertainty,
        });
    }
    Some(PostMortem {
        index,
        device,
        time_ns: oom.time_ns,
        requested_bytes: oom.requested_bytes,
        stream: oom.stream,
        stack,
        device_free_bytes: oom.device_free_bytes,
        device_total_bytes,
        allocated_bytes: at.total.allocated_bytes,
        reserved_bytes: at.total.reserved_bytes,
        fragmentation: held_free.largest_range_bytes.is_some_and(|l| l >= oom.requested_bytes),
        held_free,
        by_category,
        by_site,
        phase,
        iteration,
        capacity_bytes,
        fix,
        fix_searched: target.is_some(),
        holders,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use vramscope_trace_format::{Annotation, Event, EventKind, Oom, ProcessId, StackId, StringId};

    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn an_oom_says_what_was_asked_held_free_and_alive_then() {
        let mut t = Trace::default();
        t.events.push(Event::new(EventKind::SegmentAlloc, 0, 0, 0x1000_0000, 100 * MIB));
        t.events.push(Event::new(EventKind::Alloc, 1, 0, 0x1000_0000, 60 * MIB));
        t.events.push(Event::new(EventKind::Alloc, 2, 0, 0x1000_0000 + 80 * MIB, 10 * MIB));
        t.ooms.push(Oom {
            time_ns: 5,
            device: DeviceId(0),
            process: ProcessId(0),
            stream: 7,
            requested_bytes: 50 * MIB,
            device_free_bytes: Some(20 * MIB),
            stack: StackId(0),
        });
        t.annotations.push(Annotation {
            kind: AnnotationKind::Backward,
            device: None,
            process: ProcessId(0),
            start_ns: 3,
            end_ns: 9,
            name: StringId(0),
            stack: StackId(0),
        });
        let pm = postmortem(&t, 0).expect("an OOM");
        assert_eq!(pm.requested_bytes, 50 * MIB);
        assert_eq!(pm.stream, 7);
        assert_eq!((pm.allocated_bytes, pm.reserved_bytes), (70 * MIB, 100 * MIB));
        // Free in the segment: 60..80 MiB and 90..100 MiB.
        assert_eq!(pm.held_free, HeldFree { bytes: 30 * MIB, awaiting_bytes: 0, largest_range_bytes: Some(20 * MIB) });
        assert!(!pm.fragmentation, "no free range held could take 50 MiB");
        assert_eq!(pm.phase, Some(PhaseKind::Backward));
        assert_eq!(pm.iteration, None);
        // No device size: what it held and what was free.
        assert_eq!(pm.capacity_bytes, Some(120 * MIB));
        assert!(postmortem(&t, 1).is_none());
    }
}
