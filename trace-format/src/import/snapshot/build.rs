//! Assembling the trace from the sink's records: times, devices, sizes settled against the
//! final segment state, OOMs, markers and `external_annotations` spans.

use std::collections::HashMap;

use rustc_hash::FxHashMap;

use super::entries::{Action, Entries, Entry, RangeFolded};
use super::halves;
use super::listed::Listed;
use super::settle::{Pairing, settle_sizes};
use crate::error::Result;
use crate::model::annotation::{Annotation, AnnotationKind};
use crate::model::event::{Event, EventKind, event_flags};
use crate::model::ids::{DeviceId, ProcessId, StackId, StringId};
use crate::model::interner::Interner;
use crate::model::metadata::{Clock, DeviceInfo, Metadata, ProcessInfo, RangeInfo, SourceFormat};
use crate::model::segment::{Block, BlockState, Segment};
use crate::model::trace::Trace;

/// Longest text the annotations of one allocation are joined into.
const MAX_ANNOTATION_BYTES: usize = 1024;

/// Pairs `external_annotations` START and END records into spans (unmatched ends start at the
/// trace's start, unmatched starts end at its end).
fn external_spans(
    external: &[super::External],
    interner: &mut Interner,
    trace_start_ns: i64,
    trace_end_ns: i64,
    warnings: &mut Vec<String>,
) -> Vec<Annotation> {
    let mut spans = Vec::new();
    let mut open: HashMap<(StringId, i64), Vec<i64>> = HashMap::new();
    let mut skipped = 0usize;
    let (start, end) = (interner.find_string("START"), interner.find_string("END"));
    for record in external {
        let device = record.device.unwrap_or(0);
        let (Some(stage), Some(name), Some(time_us)) = (record.stage, record.name, record.time_us) else {
            skipped += 1;
            continue;
        };
        let time_ns = time_us.saturating_mul(1000);
        let key = (name, device);
        let span = |start_ns: i64, end_ns: i64| Annotation {
            kind: AnnotationKind::UserRange,
            device: i16::try_from(device).ok().map(DeviceId),
            process: ProcessId(0),
            start_ns,
            end_ns: end_ns.max(start_ns),
            name,
            stack: StackId(0),
        };
        if Some(stage) == start {
            open.entry(key).or_default().push(time_ns);
        } else if Some(stage) == end {
            match open.get_mut(&key).and_then(Vec::pop) {
                Some(start_ns) => spans.push(span(start_ns, time_ns)),
                None => spans.push(span(trace_start_ns.min(time_ns), time_ns)),
            }
        } else {
            skipped += 1;
        }
    }
    let mut unclosed: Vec<_> = open
        .into_iter()
        .flat_map(|((name, device), starts)| starts.into_iter().map(move |s| (s, name, device)))
        .collect();
    unclosed.sort_by(|a, b| (a.0, interner.resolve(a.1), a.2).cmp(&(b.0, interner.resolve(b.1), b.2)));
    for (start_ns, name, device) in unclosed {
        spans.push(Annotation {
            kind: AnnotationKind::UserRange,
            device: i16::try_from(device).ok().map(DeviceId),
            process: ProcessId(0),
            start_ns,
            end_ns: trace_end_ns.max(start_ns),
            name,
            stack: StackId(0),
        });
    }
    if skipped > 0 {
        warnings.push(format!("{skipped} external annotation records without stage, name or time were skipped"));
    }
    spans
}

/// A snapshot read for a range of its trace: what the entries outside it left behind, and the
/// first and last entry each device's list named (which places the entries folded away).
pub(super) struct RangeBuild {
    pub(super) folded: RangeFolded,
    pub(super) spans: Vec<(i16, u32, u32)>,
}

/// What a range leaves each device: the entries standing for what was alive at its start, and
/// the blocks of the final state whose size is known (all of them unless the range ends before
/// the trace).
struct RangeStart {
    per_device: FxHashMap<i16, Vec<Entry>>,
    /// When the final state goes: its blocks whose size still holds at the range's end (the
    /// trace never touched them, or not after the range), by address, with their device.
    exact: FxHashMap<u64, (i16, Block)>,
    start_us: Option<i64>,
    end_ns: Option<i64>,
    /// Whether the trace has times (the entries kept may have none).
    timed: bool,
    info: RangeInfo,
}

impl RangeStart {
    /// Adds the devices that have only what was alive at the range's start to `per_device`.
    fn add_devices(&self, per_device: &mut Vec<(i16, Listed)>) {
        for &device in self.per_device.keys() {
            if !per_device.iter().any(|(d, _)| *d == device) {
                per_device.push((device, Listed::default()));
            }
        }
        per_device.sort_by_key(|(d, _)| if *d < 0 { i16::MAX } else { *d });
    }
}

/// Works out what was alive at a range's start, per device, and leaves the final state out when
/// the range ends before the trace (it describes a later time).
fn range_start(range: RangeBuild, segments: &mut Vec<Segment>, entries: &Entries) -> RangeStart {
    let RangeBuild { folded: RangeFolded { range, classifier, folded }, spans } = range;
    let cut = folded.after > 0;
    let mut per_device: FxHashMap<i16, Vec<Entry>> = FxHashMap::default();
    // When each block alive at the start was allocated, where the trace shows it.
    let mut alive_since = Vec::new();
    for alive in &folded.alive {
        let order = alive.order;
        let Some(&(device, _, _)) =
            spans.iter().find(|&&(_, first, last)| (u64::from(first)..=u64::from(last)).contains(&order))
        else {
            continue;
        };
        let mut entry = entries.expand(alive);
        entry.action = match entry.action {
            Action::Event(
                EventKind::SegmentAlloc | EventKind::SegmentFree | EventKind::SegmentMap | EventKind::SegmentUnmap,
            ) => Action::Event(EventKind::SegmentAlloc),
            _ => Action::Event(EventKind::Alloc),
        };
        if alive.from_free {
            entry.stack = StackId(0);
            entry.context = crate::model::ids::ContextId(0);
        } else if let (Action::Event(EventKind::Alloc), Some(us)) = (entry.action, entry.time_us) {
            alive_since.push(crate::model::metadata::AliveSince {
                process: 0,
                device,
                address: entry.addr,
                time_ns: us.saturating_mul(1000),
            });
        }
        let waiting = alive.requested && entry.action == Action::Event(EventKind::Alloc);
        per_device.entry(device).or_default().push(entry);
        // Freed by the program before the start and waiting for its streams there.
        if waiting {
            per_device
                .entry(device)
                .or_default()
                .push(Entry { action: Action::Event(EventKind::FreeRequested), ..entry });
        }
    }
    let mut exact = FxHashMap::default();
    if cut {
        for segment in segments.iter() {
            let device = segment.device.0;
            for block in segment.blocks.iter().filter(|b| b.state != BlockState::Inactive) {
                let key = (0, 0, block.address);
                if folded.blocks_at_end.contains(&key) {
                    if !folded.touched_after.contains(&key) {
                        exact.insert(block.address, (device, *block));
                    }
                } else {
                    exact.insert(block.address, (device, *block));
                    let alloc = Entry {
                        action: Action::Event(EventKind::Alloc),
                        addr: block.address,
                        size: block.requested_bytes,
                        stream: segment.stream,
                        time_us: None,
                        stack: block.stack,
                        context: crate::model::ids::ContextId(0),
                        device_free: None,
                        name: StringId(0),
                    };
                    per_device.entry(device).or_default().push(alloc);
                    // Freed by the program, waiting for its streams all along.
                    if block.state == BlockState::ActivePendingFree {
                        let request = Entry { action: Action::Event(EventKind::FreeRequested), ..alloc };
                        per_device.entry(device).or_default().push(request);
                    }
                }
            }
            if let Some((address, size)) =
                crate::range::uncovered(&folded.segments_at_end, (0, 0), segment.address, segment.size_bytes)
            {
                per_device.entry(device).or_default().push(Entry {
                    action: Action::Event(EventKind::SegmentAlloc),
                    addr: address,
                    size,
                    stream: segment.stream,
                    time_us: None,
                    stack: StackId(0),
                    context: crate::model::ids::ContextId(0),
                    device_free: None,
                    name: StringId(0),
                });
            }
        }
        segments.clear();
    }
    let start_ns = classifier.start_ns();
    let info = RangeInfo {
        range,
        events_before: folded.before,
        events_after: folded.after,
        alive_at_start: per_device
            .values()
            .flatten()
            .filter(|e| e.action != Action::Event(EventKind::FreeRequested))
            .count() as u64,
        final_state_dropped: cut,
        origin_ns: classifier.origin_ns(),
        alive_since,
        spans_before: Vec::new(),
    };
    RangeStart {
        per_device,
        exact,
        // Entry times are microseconds; the range's start may fall inside one.
        start_us: start_ns.map(|ns| ns.div_euclid(1000)),
        end_ns: classifier.end_ns(cut),
        timed: classifier.timed(),
        info,
    }
}

/// A snapshot's metadata: its devices (at least one), each named once.
fn metadata(
    mut devices: Vec<DeviceId>,
    has_time: bool,
    allocator_settings: serde_json::Value,
    extra: serde_json::Map<String, serde_json::Value>,
    range: Option<RangeInfo>,
) -> Metadata {
    if devices.is_empty() {
        devices.push(DeviceId(0));
    }
    devices.sort_unstable();
    devices.dedup();
    Metadata {
        source_format: SourceFormat::PytorchSnapshot,
        clock: if has_time { Clock::UnixNs } else { Clock::EventIndex },
        tool_version: String::new(),
        devices: devices.into_iter().map(|device| DeviceInfo { device, ..DeviceInfo::default() }).collect(),
        processes: vec![ProcessInfo::default()],
        allocator_settings,
        extra,
        range,
        unrecorded: Vec::new(),
    }
}

/// Clips spans to a range's `start_ns..=end_ns`; those outside it go.
fn clip_spans(spans: &mut Vec<Annotation>, start_ns: i64, end_ns: i64) {
    spans.retain_mut(|a| {
        if a.end_ns < start_ns || a.start_ns > end_ns {
            return false;
        }
        a.start_ns = a.start_ns.max(start_ns);
        a.end_ns = a.end_ns.min(end_ns).max(a.start_ns);
        true
    });
}

/// The annotation a `snapshot` or `annotate` entry makes; `_annotate_tensor`'s text also
/// becomes part of the metadata of the allocation `open` at its address, which its details then
/// show.
fn marker(
    interner: &mut Interner,
    entry: &Entry,
    time_ns: i64,
    device: DeviceId,
    snapshot_name: StringId,
    open: Option<&mut Event>,
) -> Annotation {
    let context = interner.context_of(entry.context);
    let name = if entry.action == Action::Snapshot {
        snapshot_name
    } else if entry.name != StringId(0) {
        entry.name
    } else {
        context.user_metadata
    };
    if entry.action == Action::Annotate
        && name != StringId(0)
        && let Some(alloc) = open
    {
        let mut target = interner.context_of(alloc.context);
        let (old, new) = (interner.resolve(target.user_metadata), interner.resolve(name));
        // The same annotation made again (every step, say) adds nothing; the text stops growing
        // at a length a person still reads.
        let known = old.split("; ").any(|part| part == new);
        if target.user_metadata == StringId(0) {
            target.user_metadata = name;
        } else if !known && old.len() + new.len() < MAX_ANNOTATION_BYTES {
            let joined = format!("{old}; {new}");
            target.user_metadata = interner.string(&joined);
        }
        alloc.context = interner.context(target);
    }
    Annotation {
        kind: if entry.action == Action::Snapshot { AnnotationKind::Snapshot } else { AnnotationKind::Marker },
        device: Some(device),
        process: ProcessId(0),
        start_ns: time_ns,
        end_ns: time_ns,
        name,
        stack: entry.stack,
    }
}

/// A device's blocks in the final state (by address), with those a range found the trace never
/// touched, and when what was alive at a range's start is allocated: at its start, or at the
/// device's first entry (`first_time_us`) when that comes earlier.
fn device_start(
    segments: &[Segment],
    device: DeviceId,
    range: Option<&RangeStart>,
    first_time_us: impl FnOnce() -> Option<i64>,
) -> (FxHashMap<u64, Block>, Option<i64>) {
    // Segments are sorted by device: this device's are one range, found without a scan.
    let first = segments.partition_point(|s| s.device < device);
    let end = segments.partition_point(|s| s.device <= device);
    let mut final_blocks: FxHashMap<u64, Block> = segments
        .get(first..end)
        .unwrap_or_default()
        .iter()
        .flat_map(|s| s.blocks.iter())
        .filter(|b| b.state != BlockState::Inactive)
        .map(|b| (b.address, *b))
        .collect();
    if let Some(range) = range {
        final_blocks.extend(range.exact.values().filter(|(d, _)| *d == device.0).map(|(_, b)| (b.address, *b)));
    }
    // What was alive at a range's start is allocated at its start (or at the device's first
    // entry, when that comes earlier).
    let first_time_us = first_time_us();
    let start_us = match (range.and_then(|r| r.start_us), first_time_us) {
        (Some(start), Some(first)) => Some(start.min(first)),
        (start, first) => start.or(first),
    };
    (final_blocks, start_us)
}

/// Whether the entries listed have times: known from the counts when every entry stored is
/// listed (the usual case), else looked at.
fn listed_have_times(entries: &Entries, per_device: &[(i16, Listed)]) -> bool {
    let listed: usize = per_device.iter().map(|(_, e)| e.len()).sum();
    if entries.timed() == 0 {
        false
    } else if listed == entries.stored() {
        true
    } else {
        per_device.iter().flat_map(|(_, e)| e.iter()).filter_map(|i| entries.get(i)).any(|e| e.time_us.is_some())
    }
}

/// A warning for each action the trace entries named that is not known, with how many did.
fn warn_of_unknown_actions(unknown_actions: HashMap<String, usize>, warnings: &mut Vec<String>) {
    let mut unknown: Vec<_> = unknown_actions.into_iter().collect();
    unknown.sort();
    for (action, count) in unknown {
        warnings.push(format!("{count} trace entries with the unknown action {action:?} were skipped"));
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn build_trace(
    two_threads_from: Option<usize>,
    mut interner: Interner,
    segments: Vec<Segment>,
    mut all_entries: Entries,
    per_device: Vec<(i16, Listed)>,
    external: &[super::External],
    allocator_settings: serde_json::Value,
    extra: serde_json::Map<String, serde_json::Value>,
    range: Option<RangeBuild>,
    warnings: &mut Vec<String>,
) -> Result<Trace> {
    let mut segments = segments;
    let mut range = range.map(|r| range_start(r, &mut segments, &all_entries));
    let has_time = listed_have_times(&all_entries, &per_device) || range.as_ref().is_some_and(|r| r.timed);
    // Allocations open at each address matter only to `annotate` entries.
    let annotated = all_entries.annotations() > 0;
    // Entries are nearly always read in the order they were pushed: then each chunk is freed
    // once read, and the entries and the events are never whole in memory together.
    let in_order = Listed::all_sorted(per_device.iter().map(|(_, e)| e));
    let mut events = Vec::with_capacity(per_device.iter().map(|(_, e)| e.len()).sum());
    // Whether the events, in the order they are pushed (device after device), are in time order:
    // known as they go, without a pass over them all at the end.
    let mut in_time_order = true;
    let mut last_pushed_ns = i64::MIN;
    let mut ooms = Vec::new();
    let mut annotations = Vec::new();
    let mut unknown_actions: HashMap<String, usize> = HashMap::new();
    let snapshot_name = interner.string("snapshot");
    let mut devices: Vec<DeviceId> = segments.iter().map(|s| s.device).collect();
    // Devices whose trace has `free_requested` entries: their frees come in two steps (PyTorch
    // records both); found at a device's first free, nearly always within its first entries.
    let mut two_step: Vec<DeviceId> = Vec::new();
    let requests = |events: &[Event]| events.iter().any(|e| e.kind == EventKind::FreeRequested);
    let mut per_device = per_device;
    if let Some(range) = &range {
        range.add_devices(&mut per_device);
    }
    let busy_devices = per_device.iter().filter(|(_, e)| !e.is_empty()).count();
    for &(device, ref entries) in &per_device {
        let at_start = range.as_mut().and_then(|r| r.per_device.remove(&device)).unwrap_or_default();
        if entries.is_empty() && at_start.is_empty() {
            continue;
        }
        let device = DeviceId(device);
        devices.push(device);
        let (final_blocks, start_us) = device_start(&segments, device, range.as_ref(), || {
            entries.first().and_then(|i| all_entries.get(i)).and_then(|e| e.time_us)
        });
        let synthetic = at_start.len();
        // A long trace of one device: built on two threads.
        if range.is_none()
            && !annotated
            && in_order
            && busy_devices == 1
            && two_threads_from.is_some_and(|from| entries.len() >= from)
            && let Some(built) = halves::build(&mut all_entries, entries, device, has_time, &final_blocks)
        {
            for half in built.halves {
                ooms.extend(half.ooms);
                let markers = half.markers.iter();
                annotations.extend(markers.map(|(e, ns)| marker(&mut interner, e, *ns, device, snapshot_name, None)));
                halves::unknown_names(half.unknown, |name| interner.resolve(name).to_owned(), &mut unknown_actions);
            }
            if requests(&built.events) {
                two_step.push(device);
            }
            in_time_order &= built.in_time_order && built.events.first().is_none_or(|e| e.time_ns >= last_pushed_ns);
            last_pushed_ns = built.events.last().map_or(last_pushed_ns, |e| e.time_ns);
            if events.is_empty() {
                events = built.events;
            } else {
                events.extend(built.events);
            }
            continue;
        }
        let mut device_events = Vec::with_capacity(entries.len() + synthetic);
        let mut pairing = Pairing::default();
        // Allocations open at each address, for `annotate` entries to attach their text to.
        let mut open: FxHashMap<u64, usize> = FxHashMap::default();
        let mut last_time_ns = 0i64;
        let mut at_start = at_start.into_iter();
        for i in 0..synthetic + entries.len() {
            let (entry, index) = match i.checked_sub(synthetic) {
                None => (at_start.next().map(|e| Entry { time_us: start_us, ..e }), None),
                Some(k) => {
                    let index = entries.get(k);
                    (index.and_then(|index| all_entries.get(index)), index)
                }
            };
            let Some(entry) = entry else { continue };
            if let Some(index) = index
                && in_order
                && i % 4096 == 0
            {
                all_entries.free_below(index);
            }
            let time_ns = match entry.time_us {
                // What stands for the blocks alive at a range's start comes just before it: never
                // at the time of an allocation inside the range (the attribution tells them apart
                // by address and time).
                Some(us) if index.is_none() => us.saturating_mul(1000).saturating_sub(1),
                Some(us) => us.saturating_mul(1000),
                None if has_time => last_time_ns,
                None => i as i64,
            };
            last_time_ns = time_ns;
            match entry.action {
                Action::Event(kind) => {
                    match kind {
                        EventKind::Alloc if annotated => {
                            open.insert(entry.addr, device_events.len());
                        }
                        EventKind::FreeCompleted if annotated => {
                            open.remove(&entry.addr);
                        }
                        _ => {}
                    }
                    let flags = if index.is_none() { event_flags::BEFORE_RANGE } else { 0 };
                    let mut event = entry.event(kind, time_ns, device, flags);
                    pairing.note(device_events.len(), &mut event);
                    in_time_order &= time_ns >= last_pushed_ns;
                    last_pushed_ns = time_ns;
                    device_events.push(event);
                }
                Action::Oom => ooms.push(entry.oom(time_ns, device)),
                Action::Snapshot | Action::Annotate => annotations.push(marker(
                    &mut interner,
                    &entry,
                    time_ns,
                    device,
                    snapshot_name,
                    open.get(&entry.addr).and_then(|&i| device_events.get_mut(i)),
                )),
                Action::Unknown(name) => {
                    *unknown_actions.entry(interner.resolve(name).to_owned()).or_default() += 1;
                }
            }
        }
        settle_sizes(&mut device_events, pairing, &final_blocks);
        if requests(&device_events) {
            two_step.push(device);
        }
        if events.is_empty() {
            events = device_events;
        } else {
            events.extend(device_events);
        }
    }
    warn_of_unknown_actions(unknown_actions, warnings);
    // Nearly always in order already; a stable sort would still take half the events' size
    // again as scratch.
    if !in_time_order {
        events.sort_by_key(|e| e.time_ns);
    }
    let start_ns = events.first().map_or(0, |e| e.time_ns);
    let end_ns = events.last().map_or(0, |e| e.time_ns);
    let mut spans = external_spans(external, &mut interner, start_ns, end_ns, warnings);
    if let Some(range) = &range {
        clip_spans(&mut spans, start_ns, range.end_ns.unwrap_or(end_ns).max(end_ns));
    }
    annotations.extend(spans);
    annotations.sort_by_key(Annotation::order);
    let mut metadata = metadata(devices, has_time, allocator_settings, extra, range.map(|r| r.info));
    for info in &mut metadata.devices {
        info.frees_in_two_steps = Some(two_step.contains(&info.device));
    }
    Ok(Trace { metadata, interner, events, segments, annotations, ooms, counters: Vec::new(), tags: Vec::new() })
}
