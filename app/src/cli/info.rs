//! `vramscope info`: what a trace holds, in numbers.

use std::io::Write;
use std::path::Path;

use anyhow::Result;
use vramscope_trace_format::{Clock, SourceFormat};

use crate::analysis::summary::{self, DeviceSummary, Summary};
use crate::load::{self, LoadedTrace};
use crate::units::{bytes, count, duration_ns};

/// Runs `info` on `path`, printing JSON or a readable summary to `out`.
pub fn run(path: &Path, json: bool, out: &mut dyn Write) -> Result<()> {
    let loaded = load::load(path)?;
    let summary = summary::summary(&loaded.trace, loaded.format);
    if json {
        serde_json::to_writer_pretty(&mut *out, &summary)?;
        writeln!(out)?;
    } else {
        write_text(&loaded, &summary, out)?;
    }
    for warning in &loaded.warnings {
        eprintln!("warning: {}: {warning}", path.display());
    }
    Ok(())
}

fn format_name(format: SourceFormat) -> &'static str {
    match format {
        SourceFormat::Vtrace => "vramscope trace",
        SourceFormat::PytorchSnapshot => "PyTorch memory snapshot",
        SourceFormat::ChromeTrace => "PyTorch profiler Chrome trace",
        SourceFormat::MemoryTimeline => "PyTorch profiler memory timeline",
    }
}

fn device_name(device: i16) -> String {
    if device < 0 { "host (CPU)".to_owned() } else { format!("cuda:{device}") }
}

fn write_text(loaded: &LoadedTrace, summary: &Summary, out: &mut dyn Write) -> Result<()> {
    let trace = &loaded.trace;
    let start_ns = trace
        .events
        .first()
        .map(|e| e.time_ns)
        .or_else(|| trace.counters.iter().filter_map(|c| c.samples.first()).map(|s| s.time_ns).min())
        .unwrap_or(0);
    let span_ns = trace.events.last().map_or(0, |e| e.time_ns) - trace.events.first().map_or(0, |e| e.time_ns);
    writeln!(out, "{}", loaded.path.display())?;
    writeln!(
        out,
        "  {}, {} events ({} allocator events, {} annotations), {} stacks{}",
        format_name(trace.metadata.source_format),
        count(summary.events),
        count(summary.allocator_events),
        count(summary.annotations),
        count(summary.stacks),
        if trace.metadata.clock == Clock::EventIndex || span_ns <= 0 {
            String::new()
        } else {
            format!(", spanning {}", duration_ns(span_ns))
        }
    )?;
    if let Some(version) = summary.cuda_driver_version {
        writeln!(out, "  recorded with CUDA driver {}.{}", version / 1000, version % 1000 / 10)?;
    }
    for device in &summary.devices {
        write_device(trace.metadata.clock, start_ns, device, out)?;
    }
    Ok(())
}

fn at(clock: Clock, start_ns: i64, time_us: Option<i64>) -> String {
    match (clock, time_us) {
        (Clock::EventIndex, _) | (_, None) => String::new(),
        (_, Some(us)) => format!(" at +{}", duration_ns((us * 1000 - start_ns).max(0))),
    }
}

fn write_device(clock: Clock, start_ns: i64, d: &DeviceSummary, out: &mut dyn Write) -> Result<()> {
    let facts = match (&d.name, d.total_memory_bytes) {
        (Some(name), Some(total)) => format!(" ({name}, {})", bytes(total)),
        (Some(name), None) => format!(" ({name})"),
        (None, Some(total)) => format!(" ({})", bytes(total)),
        (None, None) => String::new(),
    };
    writeln!(out, "\n{}{facts} — {} allocator events", device_name(d.device), count(d.events))?;
    writeln!(
        out,
        "  peak allocated  {}{} ({} requested at its own peak)",
        bytes(d.peak_allocated_bytes),
        at(clock, start_ns, d.peak_allocated_time_us),
        bytes(d.peak_requested_bytes)
    )?;
    writeln!(
        out,
        "  peak reserved   {}{}",
        bytes(d.peak_reserved_bytes),
        at(clock, start_ns, d.peak_reserved_time_us)
    )?;
    if !d.categories_at_peak.is_empty() {
        let total: u64 = d.categories_at_peak.values().sum();
        let mut categories: Vec<_> = d.categories_at_peak.iter().collect();
        categories.sort_by(|a, b| b.1.cmp(a.1));
        let parts: Vec<String> = categories
            .iter()
            .map(|&(name, &value)| {
                format!("{name} {} ({:.0}%)", bytes(value), 100.0 * value as f64 / total.max(1) as f64)
            })
            .collect();
        writeln!(out, "  at the peak     {} live blocks: {}", count(d.live_blocks_at_peak), parts.join(", "))?;
    }
    writeln!(
        out,
        "  final state     {} segments, reserved {}, allocated {} (requested {})",
        count(d.segments),
        bytes(d.reserved_bytes),
        bytes(d.allocated_bytes),
        bytes(d.requested_bytes)
    )?;
    writeln!(
        out,
        "  free            internal {}, external {} (largest free range {})",
        bytes(d.free_internal_bytes),
        bytes(d.free_external_bytes),
        bytes(d.largest_free_bytes)
    )?;
    if d.oom_events > 0 {
        writeln!(out, "  out of memory   {} failed allocations", count(d.oom_events))?;
    }
    Ok(())
}
