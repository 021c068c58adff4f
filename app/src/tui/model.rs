//! What the terminal view shows of a trace, worked out on the following thread (the drawing
//! only lays it out): per device the memory now and at the peak, the timeline, the categories
//! and allocation sites alive now, the growth finding, the OOMs' post-mortems, and the phase.
//! The numbers are `info`'s: the same summary (`query::summary`), the same words.

use std::collections::BTreeMap;
use std::sync::Arc;

use vramscope_trace_format::{Category, DeviceId, ProcessId, Trace};

use crate::load::Origin;
use crate::query::instant::SiteBytes;
use crate::query::timeline::Timeline;

/// The allocation sites listed.
const SITES: usize = 8;
/// The post-mortem's lines shown for an OOM.
const OOM_LINES: usize = 3;

/// One state of the run, ready to draw.
pub struct Screen {
    /// The file (or, live, the trace the recording will become).
    pub path: std::path::PathBuf,
    /// The processes (ranks) of the run, by label; empty for one process.
    pub processes: Vec<String>,
    /// Their pids, to choose one by.
    pub pids: Vec<Option<u32>>,
    /// The process shown, by index into `processes`.
    pub process: usize,
    /// The trace's first event, on its clock (times are said from it).
    pub start_ns: i64,
    /// Its devices, host memory last.
    pub devices: Vec<DeviceScreen>,
    /// The device to show first (an index into `devices`): the one that ran out of memory
    /// first, else the one that peaks highest, as `info` and the app choose.
    pub focus: usize,
    /// What the trace cannot show, in words.
    pub notes: Vec<String>,
}

/// One device of the process shown.
pub struct DeviceScreen {
    /// `cuda:0`, or `host (CPU)`.
    pub label: String,
    /// Its memory, when the trace says.
    pub total_memory_bytes: Option<u64>,
    /// Allocated and reserved after the last event.
    pub allocated_now: u64,
    /// Reserved after the last event.
    pub reserved_now: u64,
    /// Whether the trace records reserved memory here.
    pub reserved_recorded: bool,
    /// The peak of allocated bytes, and when.
    pub peak_allocated: (u64, Option<i64>),
    /// The peak of reserved bytes.
    pub peak_reserved: u64,
    /// Allocated bytes by category now and at the peak.
    pub categories: Vec<(Category, u64, u64)>,
    /// The allocation sites with the most bytes alive now.
    pub sites_now: Vec<SiteBytes>,
    /// Blocks alive now.
    pub blocks_now: usize,
    /// What the growth finding says (its first line is the finding), and whether it alarms.
    pub growth: Option<(bool, Vec<String>)>,
    /// The OOMs: how many, and the first one's heading and first lines.
    pub ooms: (usize, Vec<String>),
    /// The phase of the last event, in words, with the iteration and how many there were.
    pub phase_now: Option<String>,
    /// The timeline: allocated and reserved over time.
    pub timeline: Arc<Timeline>,
    /// The whole GPU as the driver last accounted it, in words (empty where it was not sampled).
    pub whole_now: Option<String>,
}

/// Post-mortems already worked out, by process and number of OOMs (the advisor's part is slow:
/// it is not done again for every update of a live run).
#[derive(Default)]
pub struct Cache {
    ooms: BTreeMap<(usize, usize), BTreeMap<DeviceId, Vec<String>>>,
}

/// The screen of the process `process` of `whole` (the whole when it has one process).
pub fn build(whole: &Trace, origin: &Origin, process: usize, cache: &mut Cache) -> Screen {
    let recorded = whole.metadata.recorded_processes();
    let processes: Vec<String> = if recorded > 1 {
        whole
            .metadata
            .processes
            .iter()
            .take(recorded)
            .enumerate()
            .map(|(i, p)| crate::words::process_name(Some(p), i))
            .collect()
    } else {
        Vec::new()
    };
    let part;
    let trace = if processes.is_empty() {
        whole
    } else {
        part = whole.of_process(ProcessId(process as u32));
        &part
    };
    // The numbers are `info`'s document's.
    let doc = crate::query::documents::summary_document(trace, origin.format, &origin.wrappers);
    let summary = &doc.summary;
    let ooms = cache.ooms.entry((process, trace.ooms.len())).or_insert_with(|| post_mortems(trace)).clone();
    let last_event = trace.events.len().checked_sub(1);
    let end_ns = trace.events.last().map_or(0, |e| e.time_ns);
    let devices = summary
        .devices
        .iter()
        .map(|d| {
            let now = crate::query::instant::instant(trace, d.device, last_event, end_ns);
            let mut categories: Vec<(Category, u64, u64)> = Category::ALL
                .iter()
                .map(|&c| {
                    let now = now.by_category.get(&c).copied().unwrap_or(0);
                    (c, now, d.categories_at_peak.get(&c).copied().unwrap_or(0))
                })
                .filter(|&(_, now, peak)| now > 0 || peak > 0)
                .collect();
            categories.sort_by_key(|&(c, now, peak)| (std::cmp::Reverse(now.max(peak)), c));
            let mut sites_now = crate::query::instant::by_site(trace, &now.blocks);
            sites_now.truncate(SITES);
            let growth = d.growth.as_ref().map(|g| (g.alarms(), crate::words::growth_lines(g, &d.label)));
            let oom = ooms.get(&d.device).cloned().unwrap_or_default();
            DeviceScreen {
                label: crate::words::device_name(d.device, &d.label),
                total_memory_bytes: d.total_memory_bytes,
                allocated_now: d.final_state.allocated_bytes,
                reserved_now: d.final_state.reserved_bytes,
                reserved_recorded: d.reserved_recorded,
                peak_allocated: (d.peak_allocated_bytes, d.peak_allocated_time_ns),
                peak_reserved: d.peak_reserved_bytes,
                categories,
                sites_now,
                blocks_now: now.blocks.len(),
                growth,
                ooms: (d.oom_events, oom),
                phase_now: phase_now(&d.phases, last_event),
                timeline: Arc::new(Timeline::build(trace, d.device)),
                whole_now: whole_now(whole, d.device),
            }
        })
        .collect();
    let pids = if processes.is_empty() {
        Vec::new()
    } else {
        whole.metadata.processes.iter().take(recorded).map(|p| p.pid).collect()
    };
    let focus = summary.focus_device.and_then(|f| summary.devices.iter().position(|d| d.device == f)).unwrap_or(0);
    Screen {
        path: origin.path.clone(),
        processes,
        pids,
        process,
        start_ns: trace.origin_ns(),
        devices,
        focus,
        notes: doc.notes.clone(),
    }
}

/// The whole GPU now, from the driver's last account: `the whole GPU: 111 MiB of 191 MiB, trainer
/// 66.9 MiB, client (pid 812) 41.0 MiB not recorded`.
fn whole_now(whole: &Trace, device: DeviceId) -> Option<String> {
    let crate::query::whole::DeviceNow { used_bytes: used, capacity_bytes: capacity, processes } =
        crate::query::whole::now(whole, device)?;
    let of = capacity.map(|c| format!(" of {}", crate::units::bytes(c))).unwrap_or_default();
    let each: Vec<String> = processes
        .iter()
        .map(|(name, recorded, bytes)| {
            format!("{name} {}{}", crate::units::bytes(*bytes), if *recorded { "" } else { " (not recorded)" })
        })
        .collect();
    Some(format!("the whole GPU now: {}{of} used; {}", crate::units::bytes(used), each.join(", ")))
}

/// The first OOM of each device, its heading and first lines (as `info --oom` says them).
fn post_mortems(trace: &Trace) -> BTreeMap<DeviceId, Vec<String>> {
    crate::query::oom::explain_firsts(trace)
        .into_iter()
        .map(|e| {
            let t = e.part.as_ref().unwrap_or(trace);
            let mut lines = vec![crate::words::postmortem_heading(t, &e.postmortem)];
            lines.extend(crate::words::postmortem_lines(&e.postmortem).into_iter().take(OOM_LINES));
            (e.postmortem.device, lines)
        })
        .collect()
}

/// The phase the last event is in (else the last one before it), with its iteration (numbered
/// from 1, as `info` numbers them).
fn phase_now(phases: &crate::query::phases::Phases, last_event: Option<usize>) -> Option<String> {
    let last = last_event?;
    let of = |p: &crate::query::phases::PhaseHigh| match p.kind {
        Some(kind) => format!("{} of iteration {}", kind.name(), p.iteration),
        None => format!("iteration {}", p.iteration),
    };
    if let Some(p) = phases.phase_of_event(Some(last)) {
        return Some(of(p));
    }
    phases.phases.iter().rev().find(|p| p.last_event <= last).map(|p| format!("after {}", of(p)))
}
