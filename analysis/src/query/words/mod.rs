//! The analysis in words, for people: the sentence on top of a comparison, each remedy's change,
//! cost and reasoning, fragmentation, and what a trace cannot show. The analyses return numbers
//! and ids; the documents, the CLI, the app and the report word them here, once, in the same words.

use vramscope_trace_format::{Category, DeviceId, Trace, Unrecorded};

use crate::attribution::Evidence;
use crate::caveats::Caveat;
use crate::diff::{Diff, Headline};
use crate::peak::LiveBlock;
use crate::query::units::{bytes, count, counted, duration_ns, offset_ns, seconds, signed_bytes};

mod advice;
mod estimate;
mod growth;
mod phases;
mod postmortem;
mod reasons;
mod run;

pub use self::advice::*;
pub use self::estimate::*;
pub use self::growth::*;
pub use self::phases::*;
pub use self::postmortem::*;
pub use self::reasons::*;
pub use self::run::*;

/// How to record a snapshot with history, for the notes that need it.
pub const HOW_TO_RECORD_HISTORY: &str = "call torch.cuda.memory._record_memory_history(max_entries=100000) \
     before the code to look at, then torch.cuda.memory._dump_snapshot(\"snapshot.pickle\")";

/// The sentence on top of a comparison: how B's peak differs, mostly in what, and where.
pub fn diff_summary(d: &Diff) -> String {
    headline(&d.headline)
}

fn headline(h: &Headline) -> String {
    if let Some(p) = &h.phase {
        return phase_headline(p, h);
    }
    if h.delta_bytes == 0 {
        return format!("Both peaks are {}.", bytes(h.peak_a_bytes));
    }
    let direction = if h.delta_bytes < 0 { "lower" } else { "higher" };
    let pct = h.percent.map_or_else(String::new, |p| format!(" ({p:+.0}%)"));
    let mut text = format!("B's peak is {} {direction}{pct}", bytes(h.delta_bytes.unsigned_abs()));
    if let Some((category, delta)) = h.mostly {
        text.push_str(&format!(", mostly {} ({})", plural(category), signed_bytes(delta)));
        if let Some(site) = &h.site {
            text.push_str(&format!(" at {site}"));
        }
    }
    text.push('.');
    text
}

/// A human name for a category: `optimizer state`.
pub fn category_label(category: Category) -> &'static str {
    match category {
        Category::Parameter => "parameter",
        Category::Gradient => "gradient",
        Category::OptimizerState => "optimizer state",
        Category::Activation => "activation",
        Category::Temporary => "temporary",
        Category::Input => "input",
        Category::AllocatorCache => "allocator cache",
        Category::NonFramework => "non-framework",
        Category::AutogradDetail => "autograd detail",
        Category::Unknown => "unknown",
    }
}

/// Bytes by category in the order the CLI has always listed them: by name.
pub fn by_name(categories: &std::collections::BTreeMap<Category, u64>) -> Vec<(Category, u64)> {
    let mut rows: Vec<(Category, u64)> = categories.iter().map(|(c, v)| (*c, *v)).collect();
    rows.sort_by_key(|(c, _)| c.name());
    rows
}

/// What a recorded process's share of a device was made of: `PyTorch 350 MiB (activation 200 MiB
/// (57%), ...), outside PyTorch 50 MiB (allocations 20 MiB, the CUDA context and the driver's 30
/// MiB)`.
pub fn process_parts(parts: &crate::whole::Parts) -> String {
    let mut text = if parts.pytorch_reserved_bytes == 0 {
        "nothing in PyTorch's allocator".to_owned()
    } else {
        format!("PyTorch {}", bytes(parts.pytorch_reserved_bytes))
    };
    let total: u64 = parts.pytorch_by_category.values().sum();
    let mut shares = by_name(&parts.pytorch_by_category);
    shares.sort_by_key(|c| std::cmp::Reverse(c.1));
    let shares: Vec<String> = shares
        .iter()
        .map(|&(c, b)| format!("{} {} ({:.0}%)", c.name(), bytes(b), 100.0 * b as f64 / total.max(1) as f64))
        .collect();
    if !shares.is_empty() {
        text.push_str(&format!(" ({})", shares.join(", ")));
    }
    let outside = parts.outside_allocations_bytes + parts.not_allocations_bytes;
    if outside > 0 {
        text.push_str(&format!(
            ", outside PyTorch {} (allocations {}, the CUDA context and the driver's {})",
            bytes(outside),
            bytes(parts.outside_allocations_bytes),
            bytes(parts.not_allocations_bytes)
        ));
    }
    text
}

/// A category as the sentence names it: `activations`, `optimizer state`.
pub fn plural(category: Category) -> &'static str {
    match category {
        Category::Parameter => "parameters",
        Category::Gradient => "gradients",
        Category::OptimizerState => "optimizer state",
        Category::Activation => "activations",
        Category::Temporary => "temporaries",
        Category::Input => "inputs",
        Category::AllocatorCache => "allocator cache",
        Category::NonFramework => "non-framework memory",
        Category::AutogradDetail => "autograd detail",
        Category::Unknown => "unattributed memory",
    }
}

/// What a trace cannot show, one sentence or two for each caveat.
pub fn caveat(trace: &Trace, c: &Caveat) -> String {
    let names = |devices: &[DeviceId]| devices.iter().map(|&d| trace.metadata.device_label(d)).collect::<Vec<_>>();
    match c {
        Caveat::NoHistory => format!(
            "No allocation history was recorded: this snapshot holds only the allocator's state when it was taken, \
             so that state is its only instant and every peak below is that state. To see memory over time, \
             {HOW_TO_RECORD_HISTORY}."
        ),
        Caveat::NoHistoryOn(devices) => format!(
            "{} recorded no allocation history (only the allocator's final state): its peak is that state.",
            names(devices).join(", ")
        ),
        Caveat::UnseenBeforeStart(devices) => format!(
            "{}: memory allocated before the profiler started is not seen. The trace's memory events carry only \
             sizes (no addresses or running totals, as in PyTorch 1.8-1.9), so the curve is their running sum, \
             starting at the least memory that its frees imply was already there.",
            names(devices).join(", ")
        ),
        Caveat::Range(r) => {
            let mut text = format!(
                "Only {} of the file is open: {} events before it are folded into the {} blocks and segments \
                 alive when it starts (shown allocated at its start, with their stacks, each what it was allocated \
                 as), {} events after it are left out. Peaks are the range's; times are from the whole trace's \
                 first event.",
                r.range,
                count(r.events_before as usize),
                count(r.alive_at_start as usize),
                count(r.events_after as usize)
            );
            if r.final_state_dropped {
                text.push_str(
                    " The allocator's segments at the end of the whole trace, after the range, are left out: \
                     the fragmentation map shows the segments the trace's events build. What came after the range \
                     is not read either: a block whose category follows from it (a forward's block that backward \
                     needs, model state named by the gradients' sizes) may be named otherwise than in the whole.",
                );
            }
            text
        }
        Caveat::Unrecorded(gaps) => unrecorded(trace, gaps),
        Caveat::TotalsDiffer(devices) => totals_differ(trace, devices),
        Caveat::InProcess => "Recorded inside the program (vramscope.record()), from PyTorch's allocator alone: \
             memory that does not pass through it (NCCL's buffers, other libraries' own cudaMalloc) is not seen, \
             and what was alive before recording began shows as allocated before it. `vramscope record -- CMD` \
             sees both."
            .to_owned(),
    }
}

/// Where a profiler's events do not add up to its running totals: one sentence per device.
fn totals_differ(trace: &Trace, devices: &[(DeviceId, vramscope_trace_format::TotalsAgreement)]) -> String {
    let start = trace.origin_ns();
    let mut sentences = Vec::new();
    for (device, t) in devices {
        let label = trace.metadata.device_label(*device);
        let mut parts = Vec::new();
        if t.unreported_max_bytes > 0 {
            parts.push(format!(
                "up to {} that its running totals count but no memory event allocates (allocated on threads the \
                 profiler did not follow, most likely) is shown as unknown blocks \"not reported\"",
                bytes(t.unreported_max_bytes)
            ));
        }
        if t.unreported_frees > 0 {
            parts.push(format!(
                "{} freed where the totals drop with no event to say so",
                counted(t.unreported_frees as usize, "block is", "blocks are")
            ));
        }
        let mut sentence = format!("{label}: the profiler's memory events do not add up to its running totals");
        if !parts.is_empty() {
            sentence.push_str(&format!(
                "; {}, so allocated memory equals the totals after every event",
                parts.join(", and ")
            ));
        }
        if let Some(above) = t.above {
            sentence.push_str(&format!(
                "{} after {} from +{} to +{} the events keep up to {} more alive than the totals count (frees \
                 the profiler did not report, and no block of the size that went), and the curve follows the \
                 events there",
                if parts.is_empty() { ":" } else { ", except that" },
                counted(above.events as usize, "event", "events"),
                duration_ns(above.from_ns - start),
                duration_ns(above.to_ns - start),
                bytes(above.max_bytes)
            ));
        }
        sentence.push('.');
        sentences.push(sentence);
    }
    sentences.join(" ")
}

/// The stretches in which a recording did not see a process's tensor allocations, one sentence
/// per process and cause: how many, how long in all, from when (seconds from the trace's first
/// event) and why.
fn unrecorded(trace: &Trace, gaps: &[Unrecorded]) -> String {
    // From the trace's first event, as every time is said.
    let start = if trace.events.is_empty() && trace.metadata.range.is_none() {
        gaps.iter().map(|g| g.begin_ns).min().unwrap_or(0)
    } else {
        trace.origin_ns()
    };
    let mut groups: Vec<(u32, &str, Vec<&Unrecorded>)> = Vec::new();
    for gap in gaps {
        match groups.iter_mut().find(|(p, why, _)| *p == gap.process && *why == gap.why) {
            Some((_, _, list)) => list.push(gap),
            None => groups.push((gap.process, &gap.why, vec![gap])),
        }
    }
    let mut sentences = Vec::new();
    for (process, why, list) in groups {
        let info = trace.metadata.processes.get(process as usize);
        let who = match (info.and_then(|p| p.pid), info.and_then(|p| p.rank)) {
            (Some(pid), Some(rank)) => format!("rank {rank} (process {pid})"),
            (Some(pid), None) => format!("process {pid}"),
            (None, Some(rank)) => format!("rank {rank}"),
            (None, None) => "the process".to_owned(),
        };
        let devices: Vec<String> = {
            let mut d: Vec<_> = list.iter().map(|g| g.device).collect();
            d.sort_unstable();
            d.dedup();
            d.into_iter().map(|d| if d.is_host() { "CPU".to_owned() } else { trace.metadata.device_label(d) }).collect()
        };
        if why == "flight_ring" {
            // What a ring no longer holds ends where it begins; before that only what was alive.
            let from = list.iter().map(|g| g.end_ns).max().unwrap_or(start);
            sentences.push(format!(
                "{}: the flight recorder's ring of {who} holds its driver calls from {} only (it keeps each \
                 process's last stretch in a file of fixed size; what came before was overwritten, and what was \
                 alive then is shown from when it was allocated).",
                devices.join(", "),
                offset_ns(from - start)
            ));
            continue;
        }
        let total: i64 = list.iter().map(|g| g.end_ns - g.begin_ns).sum();
        let first = list.iter().map(|g| g.begin_ns).min().unwrap_or(start);
        let when = if list.len() == 1 {
            format!("for {} from {} s", duration_ns(total), seconds(first - start))
        } else {
            format!(
                "in {} stretches, {} in all, the first at {} s",
                list.len(),
                duration_ns(total),
                seconds(first - start)
            )
        };
        let cause = match why {
            "own_profiler" => "the program ran its own PyTorch profiler, and only one can run at a time".to_owned(),
            "open_ranges" => format!(
                "PyTorch's profiler, their source, waited to be restarted until ranges begun before it stopped had \
                 ended ({}), since restarting it inside them corrupts the program's memory",
                list[0].detail
            ),
            "unsafe" => format!(
                "PyTorch's profiler, their source, could not be restarted safely while {} was open, so it stayed off \
                 to the end: memory allocated after that is missing",
                list[0].detail
            ),
            other => format!("the recorder said: {other}"),
        };
        sentences
            .push(format!("{} tensor allocations of {who} were not recorded {when}: {cause}.", devices.join(", ")));
    }
    sentences.join(" ")
}

/// What the pointer over a stretch not recorded says, in one line.
pub fn unrecorded_here(gap: &Unrecorded) -> String {
    let why = match gap.why.as_str() {
        "own_profiler" => "the program's own profiler ran".to_owned(),
        "open_ranges" => format!("waiting for {} to end before restarting the profiler", gap.detail),
        "unsafe" => format!("the profiler stayed off: {} was open", gap.detail),
        "flight_ring" => "overwritten by the flight recorder's ring".to_owned(),
        other => other.to_owned(),
    };
    format!("not recorded here ({}): {why}", duration_ns(gap.end_ns - gap.begin_ns))
}

/// What a command read when it read only a part of each file (`--range`).
pub fn range_note(range: vramscope_trace_format::TraceRange) -> String {
    format!(
        "only {range} of each file is read: what was alive when it starts is counted as allocated there, and \
         peaks and times are the part's"
    )
}

/// Every caveat of a trace, worded.
pub fn caveats(trace: &Trace, caveats: &[Caveat]) -> Vec<String> {
    caveats.iter().map(|c| caveat(trace, c)).collect()
}

/// Why a block is in its category.
pub fn evidence(trace: &Trace, evidence: Evidence) -> String {
    match evidence {
        Evidence::Tag(name) => format!("tagged by the recorder: {}", trace.interner.resolve(name)),
        Evidence::Frame { rule, frame } => match trace.interner.frame_of(frame) {
            Some(f) => format!(
                "{rule}: {} at {}:{}",
                trace.interner.resolve(f.function),
                trace.interner.resolve(f.file),
                f.line
            ),
            None => rule.to_owned(),
        },
        Evidence::Phase { rule, module: Some(module) } => {
            format!("{rule} (in the forward of {})", trace.interner.resolve(module))
        }
        Evidence::Phase { rule, module: None } => rule.to_owned(),
        Evidence::BeforeRecording { persistent: true } => {
            "allocated before the recording began and alive to its end (model state, most likely)".to_owned()
        }
        Evidence::BeforeRecording { persistent: false } => {
            "allocated before the recording began; no tag, and no stack-frame rule matched".to_owned()
        }
        Evidence::SizeMatches { of } => format!(
            "allocated before the recording and never freed, its size one of the {}' one for one, as a model's \
             parameters are",
            match of {
                Category::OptimizerState => "optimizer state tensors",
                _ => "gradients",
            }
        ),
        Evidence::StateSizeMatches { per_parameter } => format!(
            "allocated before the recording and never freed; the gradients' sizes are held {} times over among \
             such blocks, a parameter and {per_parameter} optimizer state {} of each (inferred from the sizes)",
            u32::from(per_parameter) + 1,
            if per_parameter == 1 { "tensor" } else { "tensors" }
        ),
        Evidence::Unreported => "counted in the profiler's running totals, but no event reported its allocation \
                                 (made on a thread the profiler did not follow, most likely)"
            .to_owned(),
        Evidence::Nothing => "no tag, and no stack-frame rule matched".to_owned(),
    }
}

/// The parts of a block's context worth showing, as `label: text` lines (`N/A`, PyTorch's
/// default compile context, is not).
pub fn context_lines(trace: &Trace, block: &LiveBlock) -> Vec<String> {
    let context = crate::instant::block_context(trace, block);
    let mut lines = Vec::new();
    let metadata = trace.interner.resolve(context.user_metadata);
    if !metadata.is_empty() {
        lines.push(format!("user metadata: {metadata}"));
    }
    let compile = trace.interner.resolve(context.compile_context);
    if !compile.is_empty() && compile != "N/A" {
        lines.push(format!("compile context: {compile}"));
    }
    lines
}

/// How the text faces (`info`, `advise`, `top`) name a device: its label (`cuda:0`, `hip:1`),
/// and host memory `host (CPU)`.
pub fn device_name(device: DeviceId, label: &str) -> String {
    if device.is_host() { "host (CPU)".to_owned() } else { label.to_owned() }
}

#[cfg(test)]
mod tests {
    use vramscope_trace_format::{Block, BlockState, DeviceInfo, Event, EventKind, Segment, SourceFormat};

    use super::*;
    use crate::caveats;
    use crate::diff::{self, RunPeak};
    use crate::instant::SiteBytes;

    fn run(peak: u64, categories: &[(Category, u64)], sites: &[(&str, u64)]) -> RunPeak {
        RunPeak {
            file: String::new(),
            device: DeviceId(0),
            label: "cuda:0".to_owned(),
            peak_allocated_bytes: peak,
            peak_allocated_clock_ns: None,
            peak_allocated_time_ns: 0,
            peak_reserved_bytes: peak,
            categories_at_peak: categories.iter().copied().collect(),
            sites: sites.iter().map(|(s, b)| SiteBytes { site: (*s).to_owned(), bytes: *b, blocks: 1 }).collect(),
            ..RunPeak::default()
        }
    }

    #[test]
    fn the_diff_sentence_names_the_change_its_category_and_site() {
        let gib = 1u64 << 30;
        let a = run(
            20 * gib,
            &[(Category::Activation, 12 * gib), (Category::Parameter, 8 * gib)],
            &[("forward  m.py:1", 10 * gib), ("attn  m.py:9", 2 * gib), ("init  m.py:3", 8 * gib)],
        );
        let b = run(
            16 * gib,
            &[(Category::Activation, 8 * gib), (Category::Parameter, 8 * gib)],
            &[("forward  m.py:1", 6 * gib), ("init  m.py:3", 8 * gib), ("cast  m.py:5", 2 * gib)],
        );
        let d = diff::diff(a.clone(), b);
        assert_eq!(
            diff_summary(&d),
            "B's peak is 4.00 GiB lower (-20%), mostly activations (-4.00 GiB) at forward  m.py:1."
        );
        assert_eq!(diff_summary(&diff::diff(a.clone(), a)), "Both peaks are 20.0 GiB.");
    }

    fn segment(device: DeviceId) -> Segment {
        Segment::new(device, 0x1000, 2 << 20, vec![Block::new(0x1000, 2 << 20, 100, BlockState::ActiveAllocated)])
    }

    #[test]
    fn a_snapshot_without_history_says_so_and_how_to_record_one() {
        let mut trace = Trace::default();
        trace.metadata.source_format = SourceFormat::PytorchSnapshot;
        trace.segments = vec![segment(DeviceId(0)), segment(DeviceId(1))];
        let notes = caveats(&trace, &caveats::caveats(&trace));
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("_record_memory_history"), "{notes:?}");
        // One device with history, one without: only that one is named.
        trace.events.push(Event::new(EventKind::Alloc, 5, 1, 0x9000, 512));
        let notes = caveats(&trace, &caveats::caveats(&trace));
        assert_eq!(
            notes,
            ["cuda:0 recorded no allocation history (only the allocator's final state): its peak is that state."]
        );
    }

    #[test]
    fn a_running_sum_says_what_it_cannot_see() {
        let mut trace = Trace::default();
        trace.metadata.source_format = SourceFormat::ChromeTrace;
        trace.metadata.devices = vec![DeviceInfo {
            device: DeviceId(2),
            kind: Some("hip".to_owned()),
            allocated_before_unknown: true,
            ..DeviceInfo::default()
        }];
        let notes = caveats(&trace, &caveats::caveats(&trace));
        assert_eq!(notes.len(), 1);
        assert!(notes[0].starts_with("hip:2: memory allocated before the profiler started is not seen"), "{notes:?}");
    }

    /// Stretches a recording did not see: one sentence per process and cause, with how many, how
    /// long in all and from when (seconds from the first event), worked out by hand here.
    #[test]
    fn unrecorded_stretches_are_counted_timed_and_explained_per_process() {
        let mut trace = Trace::default();
        trace.events.push(Event::new(EventKind::Alloc, 1_000_000_000, -1, 0x9000, 512));
        trace.metadata.processes = vec![
            vramscope_trace_format::ProcessInfo { pid: Some(42), rank: Some(1), ..Default::default() },
            vramscope_trace_format::ProcessInfo { pid: Some(43), ..Default::default() },
        ];
        let gap = |process, begin_ns, end_ns, why: &str, detail: &str| Unrecorded {
            process,
            device: DeviceId::HOST,
            begin_ns,
            end_ns,
            why: why.to_owned(),
            detail: detail.to_owned(),
        };
        trace.metadata.unrecorded = vec![
            gap(0, 3_000_000_000, 3_020_000_000, "own_profiler", ""),
            gap(0, 2_000_000_000, 2_010_000_000, "own_profiler", ""),
            gap(1, 1_500_000_000, 1_750_000_000, "unsafe", "raw range"),
        ];
        let notes = caveats(&trace, &caveats::caveats(&trace));
        assert_eq!(
            notes,
            ["CPU tensor allocations of rank 1 (process 42) were not recorded in 2 stretches, 30.000 ms in all, \
                 the first at 1.000 s: the program ran its own PyTorch profiler, and only one can run at a time. \
                 CPU tensor allocations of process 43 were not recorded for 250.000 ms from 0.500 s: PyTorch's \
                 profiler, their source, could not be restarted safely while raw range was open, so it stayed off \
                 to the end: memory allocated after that is missing."]
        );
    }
}
