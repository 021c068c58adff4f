//! `info`'s text: the trace, then each device.

use std::io::Write;

use anyhow::Result;
use vramscope_trace_format::{Clock, DeviceId, SourceFormat, Trace};

use crate::load::LoadedTrace;
use crate::query::summary::{DeviceSummary, Summary};
use crate::units::{bytes, count, counted, duration_ns};

/// Splits text into lines of at most `width` characters at spaces (a longer word stays whole).
pub(super) fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

fn format_name(format: SourceFormat) -> &'static str {
    match format {
        SourceFormat::Vtrace => "vramscope trace",
        SourceFormat::PytorchSnapshot => "PyTorch memory snapshot",
        SourceFormat::ChromeTrace => "PyTorch profiler Chrome trace",
        SourceFormat::MemoryTimeline => "PyTorch profiler memory timeline",
    }
}

pub(super) fn device_name(trace: &Trace, device: DeviceId) -> String {
    crate::words::device_name(device, &trace.metadata.device_label(device))
}

/// Bytes by category, the largest first, each with its share: `activation 4.01 GiB (58%)`.
pub(crate) fn category_shares(
    categories: &std::collections::BTreeMap<vramscope_trace_format::Category, u64>,
) -> Vec<String> {
    let total: u64 = categories.values().sum();
    let mut named = crate::words::by_name(categories);
    named.sort_by_key(|c| std::cmp::Reverse(c.1));
    named
        .iter()
        .map(|&(category, value)| {
            let share = 100.0 * value as f64 / total.max(1) as f64;
            format!("{} {} ({share:.0}%)", category.name(), bytes(value))
        })
        .collect()
}

pub(super) fn write_text(loaded: &LoadedTrace, summary: &Summary, out: &mut dyn Write) -> Result<()> {
    let trace = &loaded.trace;
    let start_ns = trace.origin_ns();
    let span_ns = trace.events.last().map_or(0, |e| e.time_ns) - trace.events.first().map_or(0, |e| e.time_ns);
    writeln!(out, "{}", loaded.path.display())?;
    let wrapped = if summary.wrapped_in.is_empty() {
        String::new()
    } else {
        // Innermost first: "in memory_viz HTML in gzip".
        let inside_out: Vec<&str> = summary.wrapped_in.iter().rev().copied().collect();
        format!(" (in {})", inside_out.join(" in "))
    };
    writeln!(
        out,
        "  {}{wrapped}, {} ({}, {}), {}{}",
        format_name(trace.metadata.source_format),
        counted(summary.events, "event", "events"),
        counted(summary.allocator_events, "allocator event", "allocator events"),
        counted(summary.annotations, "annotation", "annotations"),
        counted(summary.stacks, "stack", "stacks"),
        if trace.metadata.clock == Clock::EventIndex || span_ns <= 0 {
            String::new()
        } else {
            format!(", spanning {}", duration_ns(span_ns))
        }
    )?;
    if let Some(version) = summary.cuda_driver_version {
        writeln!(out, "  recorded with CUDA driver {}.{}", version / 1000, version % 1000 / 10)?;
    }
    if let Some(rank) = summary.rank {
        let world = trace.metadata.extra.get("world_size").and_then(serde_json::Value::as_u64);
        writeln!(out, "  rank {rank}{}", world.map(|w| format!(" of {w}")).unwrap_or_default())?;
    }
    for note in crate::words::caveats(&loaded.trace, &summary.caveats) {
        for (i, line) in wrap(&note, 92).iter().enumerate() {
            writeln!(out, "  {}{line}", if i == 0 { "note: " } else { "      " })?;
        }
    }
    if summary.devices.len() > 1
        && let Some(focus) = summary.focus_device
    {
        let why = if trace.ooms.is_empty() { "the highest peak" } else { "the first to run out of memory" };
        writeln!(out, "  look first at {}: {why}", device_name(trace, focus))?;
    }
    for device in &summary.devices {
        write_device(trace.metadata.clock, start_ns, device, out)?;
    }
    Ok(())
}

fn at(clock: Clock, start_ns: i64, time_ns: Option<i64>) -> String {
    match (clock, time_ns) {
        (Clock::EventIndex, _) | (_, None) => String::new(),
        // Said to the µs, as the JSON gives it.
        (_, Some(ns)) => format!(" at +{}", duration_ns((ns.div_euclid(1000) * 1000 - start_ns).max(0))),
    }
}

fn write_device(clock: Clock, start_ns: i64, d: &DeviceSummary, out: &mut dyn Write) -> Result<()> {
    let facts = match (&d.name, d.total_memory_bytes) {
        (Some(name), Some(total)) => format!(" ({name}, {})", bytes(total)),
        (Some(name), None) => format!(" ({name})"),
        (None, Some(total)) => format!(" ({})", bytes(total)),
        (None, None) => String::new(),
    };
    let name = crate::words::device_name(d.device, &d.label);
    writeln!(out, "\n{name}{facts} — {} allocator events", count(d.events))?;
    writeln!(
        out,
        "  peak allocated  {}{} ({} requested at its own peak)",
        bytes(d.peak_allocated_bytes),
        at(clock, start_ns, d.peak_allocated_time_ns),
        bytes(d.peak_requested_bytes)
    )?;
    if d.reserved_recorded {
        writeln!(
            out,
            "  peak reserved   {}{}",
            bytes(d.peak_reserved_bytes),
            at(clock, start_ns, d.peak_reserved_time_ns)
        )?;
    } else {
        writeln!(
            out,
            "  peak reserved   not recorded (the trace has no segments or reserved totals; advise and the Parquet \
             export take the allocated peak for it)"
        )?;
    }
    if !d.categories_at_peak.is_empty() {
        let parts = category_shares(&d.categories_at_peak);
        let blocks = if d.live_blocks_at_peak == 0 {
            "by category (the trace has categories, not blocks)".to_owned()
        } else {
            counted(d.live_blocks_at_peak, "live block", "live blocks")
        };
        writeln!(out, "  at the peak     {blocks}: {}", parts.join(", "))?;
        if d.unknown_from_before_recording_bytes > 0 {
            writeln!(
                out,
                "                  of the unknown, {} was allocated before the recording began and alive to its end \
                 (model state, most likely)",
                bytes(d.unknown_from_before_recording_bytes)
            )?;
        }
    }
    // Without the allocator's segments, the end of the replay says what it can: how the free
    // bytes lie in ranges is not known.
    let segments =
        if d.segments > 0 { counted(d.segments, "segment", "segments") } else { "no segment state".to_owned() };
    let reserved =
        if d.reserved_recorded { format!("reserved {}, ", bytes(d.final_state.reserved_bytes)) } else { String::new() };
    writeln!(
        out,
        "  final state     {segments}, {reserved}allocated {} (requested {})",
        bytes(d.final_state.allocated_bytes),
        bytes(d.final_state.requested_bytes)
    )?;
    // Blocks the program freed that wait for their streams (`record_stream`, NCCL) are active,
    // not allocated: said apart, as PyTorch's `active_bytes` is from `memory_allocated()`.
    if d.final_state.awaiting_free_bytes > 0 || d.peak_active_bytes > d.peak_allocated_bytes {
        writeln!(
            out,
            "  awaiting free   {} at the end: freed by the program, waiting for their streams (not allocated)",
            bytes(d.final_state.awaiting_free_bytes)
        )?;
        writeln!(
            out,
            "  active          {} at the end, peak {}{} (allocated and awaiting free)",
            bytes(d.active_bytes),
            bytes(d.peak_active_bytes),
            at(clock, start_ns, d.peak_active_time_ns)
        )?;
    }
    if d.reserved_recorded {
        let largest = if d.segments > 0 { bytes(d.final_state.largest_free_bytes) } else { "not known".to_owned() };
        writeln!(
            out,
            "  free            internal {}, external {} (largest free range {largest})",
            bytes(d.final_state.free_internal_bytes),
            bytes(d.final_state.free_external_bytes),
        )?;
    } else {
        writeln!(
            out,
            "  free            internal {} (allocated less requested); external not known without reserved memory",
            bytes(d.final_state.free_internal_bytes),
        )?;
    }
    if d.private_pool_segments > 0 {
        writeln!(
            out,
            "  private pools   {} of the segments, {} reserved (CUDA graphs or MemPool: only their own pool \
             allocates from them)",
            count(d.private_pool_segments),
            bytes(d.private_pool_reserved_bytes)
        )?;
    }
    if let Some(line) = crate::words::phases_line(&d.phases) {
        for (j, part) in wrap(&line, 86).iter().enumerate() {
            let head = if j == 0 { "phases" } else { "" };
            let indent = if j == 0 { "" } else { "  " };
            writeln!(out, "  {head:<15} {indent}{part}")?;
        }
    }
    if let Some(growth) = &d.growth {
        for (i, line) in crate::words::growth_lines(growth, &d.label).iter().enumerate() {
            for (j, part) in wrap(line, 86).iter().enumerate() {
                let head = if i == 0 && j == 0 { "iterations" } else { "" };
                let indent = if j == 0 { "" } else { "  " };
                writeln!(out, "  {head:<15} {indent}{part}")?;
            }
        }
    }
    if d.oom_events > 0 {
        let largest =
            d.largest_failed_request_bytes.map(|b| format!(" (largest request {})", bytes(b))).unwrap_or_default();
        let plural = if d.oom_events == 1 { "" } else { "s" };
        writeln!(out, "  out of memory   {} failed allocation{plural}{largest}", count(d.oom_events))?;
    }
    Ok(())
}
