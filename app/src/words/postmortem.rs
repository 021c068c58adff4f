//! An out-of-memory error explained, in words: `info --oom` and the app's Out of memory view.

use vramscope_trace_format::Trace;

use crate::analysis::postmortem::PostMortem;
use crate::units::{bytes, duration_ns};

/// The heading: where and when it failed.
pub fn postmortem_heading(trace: &Trace, pm: &PostMortem) -> String {
    let start = trace.events.first().map_or(pm.time_ns, |e| e.time_ns);
    let when = match (pm.phase, pm.iteration) {
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

/// What failed, what was free, what was alive, and what would have fitted: a line each.
pub fn postmortem_lines(pm: &PostMortem) -> Vec<String> {
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
    lines.push(match (&pm.fix, pm.capacity_bytes) {
        (Some(fix), Some(capacity)) => format!(
            "would have fitted: {} (projected peak {} allocated, {} reserved, ±{:.0}%), leaving room for the {} \
             asked for in {}; a lower bound: what the run would have allocated after the failure is not in the trace",
            fix.id,
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
    lines
}
