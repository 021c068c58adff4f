//! The trace from what was read: times on the file's base, counters per device, the metadata.

use super::Imported;
use crate::model::annotation::Annotation;
use crate::model::counter::{CounterKind, CounterSample, CounterSeries};
use crate::model::ids::ProcessId;
use crate::model::metadata::{Clock, DeviceInfo, Metadata, ProcessInfo, SourceFormat};
use crate::model::trace::Trace;

use super::events::State;

/// The running sum of a device's address-less `[memory]` events, lifted so that it never goes
/// below zero: a free of memory allocated before the trace shows that at least that much was
/// alive from the start.
pub(super) fn running_sum(changes: &mut [(i64, i64)]) -> Vec<CounterSample> {
    changes.sort_by_key(|c| c.0);
    let mut sum = 0i64;
    let mut lowest = 0i64;
    let sums: Vec<(i64, i64)> = changes
        .iter()
        .map(|&(t, bytes)| {
            sum = sum.saturating_add(bytes);
            lowest = lowest.min(sum);
            (t, sum)
        })
        .collect();
    sums.into_iter().map(|(time_ns, value)| CounterSample { time_ns, value: value.saturating_sub(lowest) }).collect()
}

/// What the top level of the file said, once the events are read.
pub(super) struct TopFacts {
    pub(super) base_time_ns: Option<i64>,
    pub(super) display_time_unit: Option<String>,
    pub(super) device_properties: Option<serde_json::Value>,
    pub(super) distributed: Option<serde_json::Value>,
    pub(super) other: serde_json::Map<String, serde_json::Value>,
}

/// The trace from what was read: times on the file's base, counters per device, the metadata.
pub(super) fn assemble(state: State, facts: TopFacts) -> Imported {
    let TopFacts { base_time_ns, display_time_unit, device_properties, distributed, other } = facts;
    let base_ns = base_time_ns.unwrap_or(0);
    let mut warnings = Vec::new();
    if state.skipped_memory > 0 {
        warnings.push(format!("{} [memory] events whose Addr is not a number were skipped", state.skipped_memory));
    }
    if state.foreign_memory > 0 {
        warnings.push(format!(
            "{} [memory] events without PyTorch's Bytes, Device Type and Device Id were skipped",
            state.foreign_memory
        ));
    }
    if !state.renumbered.is_empty() {
        warnings.push(format!(
            "devices of several types share an index, or an index is too large: {}",
            state.renumbered.join(", ")
        ));
    }
    if !state.unknown_types.is_empty() {
        let types: Vec<String> = state.unknown_types.iter().map(ToString::to_string).collect();
        warnings.push(format!(
            "memory events of Device Type {} (not a c10::DeviceType this build knows) are shown as 'device'",
            types.join(", ")
        ));
    }
    let mut interner = state.interner;
    let mut events = state.events;
    for e in &mut events {
        e.time_ns = e.time_ns.saturating_add(base_ns);
    }
    let (events, position, reconciled) = super::totals::reconcile_with_totals(events, &state.event_totals);
    let mut ooms = state.ooms;
    for o in &mut ooms {
        o.time_ns = o.time_ns.saturating_add(base_ns);
    }
    ooms.sort_by_key(|o| o.time_ns);
    let mut annotations = state.annotations;
    for a in &mut annotations {
        a.start_ns = a.start_ns.saturating_add(base_ns);
        a.end_ns = a.end_ns.saturating_add(base_ns);
    }
    annotations.sort_by_key(Annotation::order);
    let shift = |samples: &mut Vec<CounterSample>| {
        for s in samples.iter_mut() {
            s.time_ns = s.time_ns.saturating_add(base_ns);
        }
        samples.sort_by_key(|c| c.time_ns);
    };
    let mut counters = Vec::new();
    let mut devices = Vec::new();
    for (device, mut s) in state.series {
        let reconciled = reconciled.get(&device);
        let mut info = DeviceInfo {
            device,
            initial_allocated_bytes: reconciled.and_then(|r| r.initial_allocated_bytes),
            kind: s.kind.filter(|&k| k != "cuda").map(str::to_owned),
            totals: reconciled.and_then(|r| r.agreement),
            ..DeviceInfo::default()
        };
        let mut allocated = super::totals::samples_in_event_order(std::mem::take(&mut s.allocated), &position);
        if allocated.is_empty() && s.addressed == 0 && !s.unaddressed.is_empty() {
            // No totals and no addresses: the running sum is all there is.
            allocated = running_sum(&mut s.unaddressed);
            info.allocated_before_unknown = true;
        }
        let running = info.allocated_before_unknown;
        devices.push(info);
        if !allocated.is_empty() {
            shift(&mut allocated);
            counters.push(CounterSeries {
                kind: CounterKind::Allocated,
                name: interner.string(if running { "Bytes (running sum)" } else { "Total Allocated" }),
                device,
                process: ProcessId(0),
                samples: allocated,
            });
        }
        if s.reserved.iter().any(|c| c.value != 0) {
            let mut reserved = s.reserved;
            shift(&mut reserved);
            counters.push(CounterSeries {
                kind: CounterKind::Reserved,
                name: interner.string("Total Reserved"),
                device,
                process: ProcessId(0),
                samples: reserved,
            });
        }
    }
    if devices.iter().any(|d| d.allocated_before_unknown) {
        warnings.push(
            "this trace's memory events carry neither addresses nor running totals (an early kineto trace, \
             PyTorch 1.8-1.9): memory is the running sum of their sizes, so memory allocated before the trace \
             began is not seen"
                .to_owned(),
        );
    }
    let mut extra = serde_json::Map::new();
    if let Some(properties) = device_properties.filter(|v| !v.is_null()) {
        extra.insert("deviceProperties".to_owned(), properties);
    }
    let rank = distributed.as_ref().and_then(|d| d.get("rank")).and_then(serde_json::Value::as_u64);
    if let Some(world) = distributed.as_ref().and_then(|d| d.get("world_size")).and_then(serde_json::Value::as_u64) {
        extra.insert("world_size".to_owned(), world.into());
    }
    if let Some(distributed) = distributed.filter(|v| !v.is_null()) {
        extra.insert("distributedInfo".to_owned(), distributed);
    }
    if let Some(unit) = display_time_unit {
        extra.insert("displayTimeUnit".to_owned(), unit.into());
    }
    if !other.is_empty() {
        extra.insert("trace_metadata".to_owned(), serde_json::Value::Object(other));
    }
    let metadata = Metadata {
        source_format: SourceFormat::ChromeTrace,
        clock: if base_time_ns.is_some() { Clock::UnixNs } else { Clock::MonotonicNs },
        tool_version: String::new(),
        devices,
        processes: vec![ProcessInfo {
            pid: state.pids.first().and_then(|&p| u32::try_from(p).ok()),
            rank: rank.and_then(|r| u32::try_from(r).ok()),
            ..ProcessInfo::default()
        }],
        allocator_settings: serde_json::Value::Null,
        extra,
        range: None,
        unrecorded: Vec::new(),
    };
    Imported {
        trace: Trace {
            metadata,
            interner,
            events,
            segments: Vec::new(),
            annotations,
            ooms,
            counters,
            tags: Vec::new(),
        },
        warnings,
        format: SourceFormat::ChromeTrace,
        wrappers: Vec::new(),
    }
}
