//! An out-of-memory error explained, in words: `info --oom` and the app's Out of memory view.

use vramscope_trace_format::Trace;

use crate::phases::PhaseKind;
use crate::postmortem::PostMortem;
use crate::query::units::{bytes, duration_ns};

/// The heading: where and when it failed.
pub fn postmortem_heading(trace: &Trace, pm: &PostMortem) -> String {
    let start = trace.origin_ns();
    let when = match (pm.phase.map(PhaseKind::name), pm.iteration) {
        (Some(phase), Some(i)) => format!(" (in {phase}, iteration {i})"),
        (Some(phase), None) => format!(" (in {phase})"),
        (None, Some(i)) => format!(" (in iteration {i})"),
        (None, None) => String::new(),
    };
    format!(
        "out of memory on {} at +{}{when}",
        trace.metadata.device_label(pm.device),
        duration_ns((pm.time_ns - start).max(0))
    )
}

/// Who held the device when it failed, the most first: `46.0 GiB by vllm (pid 812), not recorded`.
fn holder_lines(pm: &PostMortem) -> Vec<String> {
    let total: u64 = pm.holders.iter().map(|h| h.bytes).sum();
    let full = pm.device_total_bytes.map_or_else(String::new, |t| format!(" of {}", bytes(t)));
    let mut lines = vec![format!("{} held on the device{full} when it failed (the driver's account):", bytes(total))];
    for h in &pm.holders {
        let who = match (h.this_process, h.sampled) {
            (true, true) => format!("{} (this process)", h.name),
            (true, false) => format!("{} (this process: what the recording saw, its context not counted)", h.name),
            (false, _) => h.name.clone(),
        };
        let what = match (h.recorded, h.outside_pytorch_bytes) {
            (false, _) => ", not recorded".to_owned(),
            (true, Some(outside)) if outside > 0 => format!(", of which {} outside PyTorch", bytes(outside)),
            (true, _) => String::new(),
        };
        lines.push(format!("  {} by {who}{what}", bytes(h.bytes)));
    }
    let others: u64 = pm.holders.iter().filter(|h| !h.this_process).map(|h| h.bytes).sum();
    if others > 0 {
        lines.push(format!("what would have fitted leaves out the {} other processes held", bytes(others)));
    }
    lines
}

/// What failed, what was free, what was alive, and what would have fitted: a line each.
pub fn postmortem_lines(pm: &PostMortem) -> Vec<String> {
    postmortem_sections(pm).into_iter().flat_map(|(_, lines)| lines).collect()
}

/// [`postmortem_lines`] by section, each with its heading (the app lays them out in a grid).
pub fn postmortem_sections(pm: &PostMortem) -> Vec<(&'static str, Vec<String>)> {
    let mut sections = Vec::new();
    let mut lines = Vec::new();
    let stream = if pm.stream == 0 { String::new() } else { format!(" on stream {:#x}", pm.stream) };
    lines.push(format!("tried to allocate {}{stream}", bytes(pm.requested_bytes)));
    match pm.stack.first() {
        Some(innermost) => {
            lines.push(format!("asked from {innermost}"));
            for frame in pm.stack.iter().skip(1).take(4) {
                lines.push(format!("  called from {frame}"));
            }
        }
        None => lines.push("where it was asked from is not recorded".to_owned()),
    }
    sections.push(("The request", std::mem::take(&mut lines)));
    let device = match (pm.device_free_bytes, pm.device_total_bytes) {
        (Some(free), Some(total)) => format!("the device had {} free of {}", bytes(free), bytes(total)),
        (Some(free), None) => format!("the device had {} free", bytes(free)),
        (None, Some(total)) => format!("the device has {} (what it had free is not recorded)", bytes(total)),
        (None, None) => "what the device had free is not recorded".to_owned(),
    };
    let held = match pm.held_free.largest_range_bytes {
        _ if pm.held_free.bytes == 0 => "the allocator held nothing free".to_owned(),
        Some(largest) if pm.fragmentation => format!(
            "the allocator held {} free, and a range of {} could have taken the request: fragmentation (another \
             stream's or pool's memory, or a block split too small); expandable_segments:True would let it grow \
             a segment instead",
            bytes(pm.held_free.bytes),
            bytes(largest)
        ),
        Some(largest) => format!(
            "the allocator held {} free but could not use it: its largest free range was {}",
            bytes(pm.held_free.bytes),
            bytes(largest)
        ),
        None => format!(
            "the allocator held {} free (how it lay in ranges is not known without segments)",
            bytes(pm.held_free.bytes)
        ),
    };
    lines.push(format!("{device}; {held}"));
    if pm.held_free.awaiting_bytes > 0 {
        lines.push(format!(
            "{} more was freed by the program but still waiting for the streams that used it (record_stream, \
             NCCL): not free until they are done",
            bytes(pm.held_free.awaiting_bytes)
        ));
    }
    sections.push(("Free", std::mem::take(&mut lines)));
    if !pm.holders.is_empty() {
        sections.push(("Who held the device", holder_lines(pm)));
    }
    let categories: Vec<String> = pm.by_category.iter().map(|(c, b)| format!("{} {}", c.name(), bytes(*b))).collect();
    lines.push(format!(
        "alive: {} allocated, {} reserved: {}",
        bytes(pm.allocated_bytes),
        bytes(pm.reserved_bytes),
        if categories.is_empty() { "nothing".to_owned() } else { categories.join(", ") }
    ));
    for site in pm.by_site.iter().take(5) {
        lines.push(format!(
            "  {} in {} block{} at {}",
            bytes(site.bytes),
            site.blocks,
            if site.blocks == 1 { "" } else { "s" },
            site.site
        ));
    }
    sections.push(("Alive", std::mem::take(&mut lines)));
    lines.push(match (&pm.fix, pm.capacity_bytes) {
        (Some(fix), Some(capacity)) => format!(
            "would have fitted: {} (projected peak {} allocated, {} reserved, ±{:.0}%), leaving room for the {} \
             asked for in {}; a lower bound: what the run would have allocated after the failure is not in the trace",
            super::remedies_named(&fix.id),
            bytes(fix.projected_peak_allocated_bytes),
            bytes(fix.projected_peak_reserved_bytes),
            100.0 * fix.uncertainty,
            bytes(pm.requested_bytes),
            bytes(capacity)
        ),
        (None, Some(capacity)) if pm.requested_bytes >= capacity => format!(
            "no change to the rest of the run would have fitted it: the request alone ({}) is more than the {} \
             there was; look at what asked for it (a shape, a batch or sequence size, a buffer sized by mistake)",
            bytes(pm.requested_bytes),
            bytes(capacity)
        ),
        (None, Some(capacity)) => format!(
            "no single change or pair the advisor projects brings the peak under {} (the {} there was less the \
             request): see `vramscope advise` for the plan",
            bytes(capacity.saturating_sub(pm.requested_bytes)),
            bytes(capacity)
        ),
        (_, None) => "what would have fitted cannot be said: neither the device's memory nor what it had free is \
                      recorded"
            .to_owned(),
    });
    sections.push(("What would have fitted", lines));
    sections
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use vramscope_trace_format::{DeviceId, NoProgress, Oom, ProcessId, StackId};

    use crate::{peak, postmortem};

    /// The built-in H200 recording, made to fail one allocation at its peak asking 2 GiB more
    /// than the device had left: the advisor's smallest change must bring the projected peak
    /// under the device's memory less the request, and the words say so.
    #[test]
    fn an_oom_that_a_change_would_have_avoided_names_it() {
        let sample =
            std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../samples/traces/h200-torch-plain.vtrace")).unwrap();
        let mut trace = vramscope_trace_format::import(&sample, &NoProgress).unwrap().trace;
        let device = DeviceId(0);
        let total = trace.metadata.devices.iter().find(|d| d.device == device).and_then(|d| d.total_memory_bytes);
        let total = total.expect("the sample knows its H200's memory");
        let peaks = peak::peaks(&trace, device);
        let requested = total - peaks.reserved.bytes + (2 << 30);
        trace.ooms.push(Oom {
            time_ns: peaks.allocated.time_ns,
            device,
            process: ProcessId(0),
            stream: 0,
            requested_bytes: requested,
            device_free_bytes: Some(total - peaks.reserved.bytes),
            stack: StackId(0),
        });
        let pm = postmortem::postmortem(&trace, trace.ooms.len() - 1).unwrap();
        assert_eq!(pm.capacity_bytes, Some(total));
        assert!(pm.phase.is_some(), "the sample records its phases");
        assert!(pm.iteration.is_some());
        let fix = pm.fix.clone().expect("a change that fits");
        assert!(fix.projected_peak_reserved_bytes <= total - requested, "{fix:?}");
        let lines = super::postmortem_lines(&pm);
        let last = lines.last().unwrap();
        assert!(
            last.starts_with(&format!("would have fitted: {} (projected", super::super::remedies_named(&fix.id))),
            "{last}"
        );
    }
}
