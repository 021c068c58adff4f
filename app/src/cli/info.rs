//! `vramscope info`: what a trace holds, in numbers.

use std::io::Write;
use std::path::Path;

use anyhow::{Result, bail};
use vramscope_trace_format::{Clock, DeviceId, SourceFormat, Trace, TraceRange};

use crate::analysis::summary::{self, DeviceSummary, Summary};
use crate::load::{self, LoadedTrace};
use crate::units::{bytes, count, counted, duration_ns};

mod at;

pub use self::at::{When, parse_when, parse_when_arg};
use self::at::{at_instant, largest_blocks};

/// `info` on what the paths hold: one trace, or a run of several ranks (several files, a
/// directory of them, or one recording of several ranks): per-rank rows and the run's summary.
pub fn run_paths(paths: &[std::path::PathBuf], options: &Options<'_>, out: &mut dyn Write) -> Result<()> {
    let Options { json, at, blocks, all_phases, range } = *options;
    let summed = match paths {
        [one] if !one.is_dir() => {
            let loaded = load::load(one, range)?;
            if !crate::analysis::run::holds_ranks(&loaded.trace) {
                return run_loaded(&loaded, options, out);
            }
            let name = loaded.path.display().to_string();
            let run = crate::analysis::run::Run::of(vec![(name, loaded.trace)]);
            crate::runs::Summed {
                summary: crate::analysis::run::summarize(&run),
                notes: run.notes,
                skipped: Vec::new(),
                origins: Vec::new(),
            }
        }
        // Each file's figures taken as it is read, and the file dropped.
        _ => crate::runs::summaries(paths, range)?,
    };
    if at.is_some() || blocks > 0 || all_phases {
        bail!(
            "--at, --blocks and --all-phases look at one trace: give one rank's file (a recording writes \
             RUN.rankN.vtrace beside it)"
        );
    }
    run_of_ranks(paths, &summed, json, range, out)
}

fn run_of_ranks(
    paths: &[std::path::PathBuf],
    summed: &crate::runs::Summed,
    json: bool,
    range: Option<TraceRange>,
    out: &mut dyn Write,
) -> Result<()> {
    let Some(summary) = &summed.summary else {
        bail!(
            "no ranks with memory events in {}",
            paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        );
    };
    let mut notes = crate::words::run_notes(&summed.notes, &summed.skipped);
    if let Some(range) = range {
        notes.insert(0, crate::words::range_note(range));
    }
    if json {
        let events: usize = summary.ranks.iter().map(|r| r.events).sum();
        let value = serde_json::json!({
            "run": summary,
            "allocator_events": events,
            "notes": notes,
        });
        serde_json::to_writer_pretty(&mut *out, &value)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(out, "{}", crate::words::run_headline(summary))?;
    let nodes = summary.ranks.iter().any(|r| r.node.is_some());
    writeln!(
        out,
        "\n  {:>5}  {:>14}  {:>14}  {:<14}  {:>12}  file",
        "rank", "peak allocated", "peak reserved", "phase", "when"
    )?;
    for r in &summary.ranks {
        // From the rank's own first event: ranks on several machines do not share a clock.
        let start = r.first_event_ns.unwrap_or(0);
        let at = r
            .peak
            .peak_allocated_time_us
            .map_or_else(|| "-".to_owned(), |us| format!("+{}", duration_ns((us * 1000 - start).max(0))));
        writeln!(
            out,
            "  {:>5}  {:>14}  {:>14}  {:<14}  {:>12}  {}{}",
            r.rank,
            bytes(r.peak.peak_allocated_bytes),
            bytes(r.peak.peak_reserved_bytes),
            r.peak_phase.map_or("-", crate::words::run_phase),
            at,
            if nodes {
                let host = r.host.as_deref().map_or_else(String::new, |h| format!(" on {h}"));
                format!("node {}{host}: {}", r.node.map_or_else(|| "?".to_owned(), |n| n.to_string()), r.source)
            } else {
                r.source.clone()
            },
            if r.rank == summary.worst_rank { "  <- highest" } else { "" }
        )?;
    }
    let sites = crate::words::site_spread(summary);
    if !sites.is_empty() {
        writeln!(out, "\n  where the ranks differ most at their peaks:")?;
        for line in sites {
            writeln!(out, "    {line}")?;
        }
    }
    for note in notes {
        writeln!(out, "  {note}")?;
    }
    Ok(())
}

/// `info --oom`: the first out-of-memory error on each device of one trace, explained.
pub fn run_oom(paths: &[std::path::PathBuf], json: bool, range: Option<TraceRange>, out: &mut dyn Write) -> Result<()> {
    let [path] = paths else { bail!("--oom explains one trace: give one file (one rank's, for a run)") };
    let loaded = load::load(path, range)?;
    let trace = &loaded.trace;
    // The first OOM of each device (of each process: no view mixes two processes' blocks).
    let explained = crate::analysis::query::oom::explain_firsts(trace);
    if json {
        let ooms: Vec<serde_json::Value> = explained
            .iter()
            .map(|crate::analysis::query::oom::Explained { postmortem: pm, part, .. }| {
                let t = part.as_ref().unwrap_or(trace);
                let mut value = serde_json::to_value(pm).unwrap_or_default();
                if let Some(object) = value.as_object_mut() {
                    object.insert("heading".to_owned(), crate::words::postmortem_heading(t, pm).into());
                    object.insert(
                        "words".to_owned(),
                        serde_json::to_value(crate::words::postmortem_lines(pm)).unwrap_or_default(),
                    );
                }
                value
            })
            .collect();
        let value =
            serde_json::json!({ "file": path.display().to_string(), "oom_count": trace.ooms.len(), "ooms": ooms });
        serde_json::to_writer_pretty(&mut *out, &value)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(out, "{}", path.display())?;
    if trace.ooms.is_empty() {
        writeln!(out, "  no out-of-memory error in this trace")?;
        return Ok(());
    }
    for crate::analysis::query::oom::Explained { postmortem: pm, part, later, .. } in &explained {
        let t = part.as_ref().unwrap_or(trace);
        writeln!(out, "\n{}", crate::words::postmortem_heading(t, pm))?;
        for line in crate::words::postmortem_lines(pm) {
            for (j, part) in wrap(&line, 96).iter().enumerate() {
                writeln!(out, "  {}{part}", if j == 0 { "" } else { "  " })?;
            }
        }
        if *later > 0 {
            writeln!(out, "  and {later} more on this device after it")?;
        }
    }
    Ok(())
}

/// `info` on one file: its summary and, with `at`, what was alive at that instant (its text as
/// given, and parsed).
pub fn run(path: &Path, options: &Options<'_>, out: &mut dyn Write) -> Result<()> {
    run_paths(&[path.to_path_buf()], options, out)
}

/// What `info` is asked for beyond the summary.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options<'a> {
    /// One JSON object instead of text.
    pub json: bool,
    /// Also what was alive at this instant (its text, and what it means).
    pub at: Option<(&'a str, &'a When)>,
    /// Also the N largest blocks alive at the peak (or at `at`).
    pub blocks: usize,
    /// Also every iteration's phases and their high points, not only the outline.
    pub all_phases: bool,
    /// The part of each trace read (`None`: the whole).
    pub range: Option<TraceRange>,
}

/// `info` on one loaded trace.
fn run_loaded(loaded: &LoadedTrace, options: &Options<'_>, out: &mut dyn Write) -> Result<()> {
    let Options { json, at, blocks, all_phases, .. } = *options;
    let summary = summary::summary(&loaded.trace, loaded.format, &loaded.wrappers);
    let largest = (blocks > 0)
        .then(|| largest_blocks(&loaded.trace, at.map(|a| a.1), at.map_or("peak", |a| a.0), blocks))
        .transpose()?;
    let at = at.map(|(text, when)| at_instant(&loaded.trace, when, text)).transpose()?;
    if json {
        let mut value = serde_json::to_value(&summary)?;
        if let Some(object) = value.as_object_mut() {
            let notes = crate::words::caveats(&loaded.trace, &summary.caveats);
            object.insert("notes".to_owned(), serde_json::to_value(notes)?);
        }
        if let (Some(at), Some(object)) = (&at, value.as_object_mut()) {
            object.insert("at".to_owned(), serde_json::to_value(at)?);
        }
        if let (Some(largest), Some(object)) = (&largest, value.as_object_mut()) {
            let devices: Vec<serde_json::Value> = largest
                .devices
                .iter()
                .map(|(device, blocks)| serde_json::json!({ "device": device, "blocks": blocks }))
                .collect();
            object.insert("largest_blocks".to_owned(), serde_json::json!({ "when": largest.when, "devices": devices }));
        }
        if all_phases {
            let devices = value.get_mut("devices").and_then(serde_json::Value::as_array_mut);
            for (json, d) in devices.into_iter().flatten().zip(&summary.devices) {
                if let Some(phases) = json.get_mut("phases").and_then(serde_json::Value::as_object_mut) {
                    phases.insert("phases".to_owned(), serde_json::to_value(&d.phases.phases)?);
                    phases.insert("iterations".to_owned(), serde_json::to_value(&d.phases.iterations)?);
                }
            }
        }
        serde_json::to_writer_pretty(&mut *out, &value)?;
        writeln!(out)?;
    } else {
        write_text(loaded, &summary, out)?;
        if let Some(at) = &at {
            let start = loaded.trace.events.first().map_or(0, |e| e.time_ns);
            // Said to the µs, as the JSON gives it.
            let time_ns = at.time_ns.div_euclid(1000) * 1000;
            writeln!(out, "\nat {} (+{})", at.when, duration_ns((time_ns - start).max(0)))?;
            for d in &at.devices {
                let mut categories = crate::words::by_name(&d.categories);
                categories.sort_by_key(|c| std::cmp::Reverse(c.1));
                let parts: Vec<String> =
                    categories.iter().map(|(c, v)| format!("{} {}", c.name(), bytes(*v))).collect();
                writeln!(
                    out,
                    "  {}: {} allocated in {}: {}",
                    device_name(&loaded.trace, d.device),
                    bytes(d.allocated_bytes),
                    counted(d.live_blocks, "live block", "live blocks"),
                    parts.join(", ")
                )?;
            }
        }
        if all_phases {
            for d in summary.devices.iter().filter(|d| !d.phases.is_empty()) {
                let name = if d.device < DeviceId(0) { "host (CPU)" } else { d.label.as_str() };
                writeln!(out, "\nphases of {name}, the high point of each")?;
                for line in crate::words::phase_table(&d.phases) {
                    writeln!(out, "  {line}")?;
                }
            }
        }
        if let Some(largest) = &largest {
            writeln!(out, "\nlargest blocks at {}", largest.when)?;
            for (device, blocks) in &largest.devices {
                writeln!(out, "  {}:", device_name(&loaded.trace, *device))?;
                for b in blocks {
                    writeln!(out, "    {:>10}  {:<15} {}  [{}]", bytes(b.size_bytes), b.category, b.site, b.why)?;
                    for line in &b.context {
                        writeln!(out, "    {:>10}  {line}", "")?;
                    }
                }
            }
        }
    }
    for warning in &loaded.warnings {
        eprintln!("warning: {}: {warning}", loaded.path.display());
    }
    Ok(())
}

/// Splits text into lines of at most `width` characters at spaces (a longer word stays whole).
fn wrap(text: &str, width: usize) -> Vec<String> {
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

fn device_name(trace: &Trace, device: DeviceId) -> String {
    if device < DeviceId(0) { "host (CPU)".to_owned() } else { trace.metadata.device_label(device) }
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
    let name = if d.device < DeviceId(0) { "host (CPU)" } else { d.label.as_str() };
    writeln!(out, "\n{name}{facts} — {} allocator events", count(d.events))?;
    writeln!(
        out,
        "  peak allocated  {}{} ({} requested at its own peak)",
        bytes(d.peak_allocated_bytes),
        at(clock, start_ns, d.peak_allocated_time_us),
        bytes(d.peak_requested_bytes)
    )?;
    if d.reserved_recorded {
        writeln!(
            out,
            "  peak reserved   {}{}",
            bytes(d.peak_reserved_bytes),
            at(clock, start_ns, d.peak_reserved_time_us)
        )?;
    } else {
        writeln!(
            out,
            "  peak reserved   not recorded (the trace has no segments or reserved totals; advise and the Parquet \
             export take the allocated peak for it)"
        )?;
    }
    if !d.categories_at_peak.is_empty() {
        let total: u64 = d.categories_at_peak.values().sum();
        let mut categories = crate::words::by_name(&d.categories_at_peak);
        categories.sort_by_key(|c| std::cmp::Reverse(c.1));
        let parts: Vec<String> = categories
            .iter()
            .map(|&(category, value)| {
                let share = 100.0 * value as f64 / total.max(1) as f64;
                format!("{} {} ({share:.0}%)", category.name(), bytes(value))
            })
            .collect();
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
    let pending = if d.final_state.pending_free_bytes > 0 {
        format!(", {} of it freed and waiting for its streams", bytes(d.final_state.pending_free_bytes))
    } else {
        String::new()
    };
    let reserved =
        if d.reserved_recorded { format!("reserved {}, ", bytes(d.final_state.reserved_bytes)) } else { String::new() };
    writeln!(
        out,
        "  final state     {segments}, {reserved}allocated {} (requested {}{pending})",
        bytes(d.final_state.allocated_bytes),
        bytes(d.final_state.requested_bytes)
    )?;
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
