//! Importer of PyTorch profiler Chrome traces (`prof.export_chrome_trace`, and the
//! `*.pt.trace.json[.gz]` that `tensorboard_trace_handler` writes).
//!
//! With `profile_memory=True` the profiler writes one `[memory]` instant event per allocation
//! and free. Its arguments grew over the years: early kineto traces (PyTorch 1.8-1.9) carry only
//! `Bytes` (signed), `Device Type` and `Device Id`; later ones add `Addr`, and `Total Allocated`
//! and `Total Reserved` (the allocator's running totals after the event). Events with an address
//! become allocator events; events without one become a curve: the running totals where the
//! trace has them, otherwise the running sum of `Bytes`, which cannot see memory allocated before
//! the trace began (the device is flagged so, and the curve starts at the least memory that its
//! frees imply). `Device Type` is a `c10::DeviceType`: CPU memory is the host, every other type
//! is device memory named for what it is (`cuda`, `hip` on ROCm, `xpu`, `mps`, ...).
//!
//! `[OutOfMemory]` events become OOMs; `record_function` ranges (`user_annotation`) and operators
//! (`cpu_op`) become annotations;
//! `distributedInfo` gives the process its rank, and the file's other top-level keys (kineto's
//! and those added with `prof.add_metadata`) are kept in the trace's metadata.
//!
//! The file is read in one streaming pass: events are turned into records as the JSON parser
//! produces them, never held as a whole.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::Imported;
use crate::error::{Error, Result};
use crate::model::annotation::{Annotation, AnnotationKind};
use crate::model::counter::{CounterKind, CounterSample, CounterSeries};
use crate::model::event::{Event, EventKind};
use crate::model::ids::{DeviceId, ProcessId, StackId};
use crate::model::interner::Interner;
use crate::model::metadata::{Clock, DeviceInfo, Metadata, ProcessInfo, SourceFormat};
use crate::model::oom::Oom;
use crate::model::trace::Trace;
use crate::progress::Progress;

mod fields;
mod totals;

use self::fields::{Args, Num, RawEvent};

/// `c10::DeviceType` values (`c10/core/DeviceType.h`) and the names PyTorch gives them.
const DEVICE_TYPES: [&str; 21] = [
    "cpu",
    "cuda",
    "mkldnn",
    "opengl",
    "opencl",
    "ideep",
    "hip",
    "fpga",
    "maia",
    "xla",
    "vulkan",
    "metal",
    "xpu",
    "mps",
    "meta",
    "hpu",
    "ve",
    "lazy",
    "ipu",
    "mtia",
    "privateuseone",
];
/// `c10::DeviceType::CPU`.
const DEVICE_TYPE_CPU: i64 = 0;
/// Keys of `[memory]` events named in an error about a foreign schema, at most.
const MAX_FOREIGN_KEYS: usize = 12;
/// Event categories named in an error about a trace without memory events, at most.
const MAX_CATEGORIES: usize = 8;
/// Top-level keys that say a trace comes from PyTorch's profiler (kineto).
const KINETO_KEYS: [&str; 5] = ["schemaVersion", "deviceProperties", "distributedInfo", "record_shapes", "with_stack"];
/// Event categories only PyTorch's profiler writes.
const KINETO_CATEGORIES: [&str; 8] =
    ["cpu_op", "user_annotation", "python_function", "cuda_runtime", "kernel", "gpu_memcpy", "ac2g", "Trace"];

/// Memory of one device as the trace reports it.
#[derive(Default)]
struct DeviceSeries {
    /// The device type's name (`cuda`, `hip`, ...); `None` for the host.
    kind: Option<&'static str>,
    /// `Total Allocated` of each event that has one, in file order, with the index of the event
    /// in [`State::events`] when it became one.
    allocated: Vec<(CounterSample, Option<usize>)>,
    reserved: Vec<CounterSample>,
    /// Events with an address (allocator events).
    addressed: usize,
    /// Events without one: `(time_ns, bytes)`, for the running sum.
    unaddressed: Vec<(i64, i64)>,
}

/// Everything read from the file so far.
#[derive(Default)]
struct State {
    interner: Interner,
    events: Vec<Event>,
    /// `Total Allocated` after each of `events`, where the event has one.
    event_totals: Vec<Option<i64>>,
    annotations: Vec<Annotation>,
    ooms: Vec<Oom>,
    series: BTreeMap<DeviceId, DeviceSeries>,
    pids: BTreeSet<u64>,
    memory_events: usize,
    /// `[memory]` events that do not follow PyTorch's schema, and their argument names.
    foreign_memory: usize,
    foreign_keys: BTreeSet<String>,
    skipped_memory: usize,
    categories: BTreeSet<String>,
    kineto_categories: bool,
    /// Devices whose `Device Type` is not one this build knows.
    unknown_types: BTreeSet<i64>,
    /// The trace's device of each (type name, `Device Id`).
    device_numbers: BTreeMap<(&'static str, i64), i16>,
    /// Devices that could not keep their own index.
    renumbered: Vec<String>,
    /// Memory events of devices beyond [`super::MAX_DEVICES`].
    devices_over_limit: usize,
    trace_events: usize,
}

/// A `c10::DeviceType` number as a device of the trace: `None` is the host.
fn device_kind(device_type: Option<i64>, device_id: Option<i64>, unknown: &mut BTreeSet<i64>) -> Option<&'static str> {
    match device_type {
        Some(DEVICE_TYPE_CPU) => None,
        Some(t) => Some(usize::try_from(t).ok().and_then(|t| DEVICE_TYPES.get(t)).copied().unwrap_or_else(|| {
            unknown.insert(t);
            "device"
        })),
        // Without a type, the id tells: the CPU allocator reports -1.
        None if device_id.is_none_or(|d| d < 0) => None,
        None => Some("cuda"),
    }
}

impl State {
    fn event(&mut self, raw: RawEvent<'_>) {
        self.trace_events += 1;
        let Some(ts) = raw.ts.and_then(Num::as_f64) else { return };
        let time_ns = (ts * 1000.0).round() as i64;
        let name = raw.name.as_deref().unwrap_or("");
        if let Some(cat) = raw.cat.as_deref() {
            if KINETO_CATEGORIES.contains(&cat) {
                self.kineto_categories = true;
            }
            if self.categories.len() < MAX_CATEGORIES && !self.categories.contains(cat) {
                self.categories.insert(cat.to_owned());
            }
        }
        if name == "[OutOfMemory]" {
            self.oom_event(time_ns, raw.args.unwrap_or_default());
            return;
        }
        if name == "[memory]" {
            self.memory_event(time_ns, raw.args.unwrap_or_default());
            if let Some(pid) = raw.pid.and_then(Num::as_u64) {
                self.pids.insert(pid);
            }
            return;
        }
        if raw.ph.as_deref() != Some("X") {
            return;
        }
        let kind = match raw.cat.as_deref() {
            Some("user_annotation") | Some("gpu_user_annotation") => {
                if name.starts_with("ProfilerStep#") {
                    AnnotationKind::Iteration
                } else if name.starts_with("Optimizer.step#") {
                    AnnotationKind::OptimizerStep
                } else {
                    AnnotationKind::UserRange
                }
            }
            Some("cpu_op") => AnnotationKind::Op,
            _ => return,
        };
        let dur_ns = (raw.dur.and_then(Num::as_f64).unwrap_or(0.0).max(0.0) * 1000.0).round() as i64;
        // A GPU annotation spans every device; a CPU one is the host's.
        let device = if raw.cat.as_deref() == Some("gpu_user_annotation") { None } else { Some(DeviceId::HOST) };
        self.annotations.push(Annotation {
            kind,
            device,
            process: ProcessId(0),
            start_ns: time_ns,
            end_ns: time_ns.saturating_add(dur_ns),
            name: self.interner.string(name),
            stack: StackId(0),
        });
        if let Some(pid) = raw.pid.and_then(Num::as_u64) {
            self.pids.insert(pid);
        }
    }

    /// The device of an event in PyTorch's schema, and its kind (`None`: one device too many,
    /// counted and refused at the end).
    fn device_of(&mut self, args: &Args<'_>) -> Option<(DeviceId, Option<&'static str>)> {
        let (device, kind) = self.device_number(args);
        (device != i16::MIN).then_some((DeviceId(device), kind))
    }

    fn device_number(&mut self, args: &Args<'_>) -> (i16, Option<&'static str>) {
        let device_type = args.device_type.and_then(Num::as_i64);
        let device_id = args.device_id.and_then(Num::as_i64);
        let kind = device_kind(device_type, device_id, &mut self.unknown_types);
        let Some(name) = kind else { return (-1, None) };
        let id = device_id.unwrap_or(0).max(0);
        if let Some(&device) = self.device_numbers.get(&(name, id)) {
            return (device, kind);
        }
        if self.device_numbers.len() >= super::MAX_DEVICES {
            // Counted, and refused at the end: no real trace has this many devices.
            self.devices_over_limit += 1;
            return (i16::MIN, kind);
        }
        // The device's own index, unless another kind of device holds it (CUDA 0 and XPU 0 in one
        // trace) or it does not fit: then the next free one, said in a warning.
        let own = i16::try_from(id).ok().filter(|d| !self.device_numbers.values().any(|v| v == d));
        let device = own.unwrap_or_else(|| {
            let free = (0..i16::MAX).rev().find(|d| !self.device_numbers.values().any(|v| v == d)).unwrap_or(0);
            self.renumbered.push(format!("{name}:{id} is shown as device {free}"));
            free
        });
        self.device_numbers.insert((name, id), device);
        (device, kind)
    }

    /// `[OutOfMemory]`: an allocation of `Bytes` that failed, with the totals at that moment.
    fn oom_event(&mut self, time_ns: i64, args: Args<'_>) {
        let Some(bytes) = args.bytes.and_then(Num::as_i64) else { return };
        let Some((device, _)) = self.device_of(&args) else { return };
        self.ooms.push(Oom {
            time_ns,
            device,
            process: ProcessId(0),
            stream: 0,
            requested_bytes: bytes.unsigned_abs(),
            device_free_bytes: None,
            stack: StackId(0),
        });
    }

    fn memory_event(&mut self, time_ns: i64, args: Args<'_>) {
        self.memory_events += 1;
        let bytes = args.bytes.and_then(Num::as_i64);
        // PyTorch's schema: a signed `Bytes` and where it lives. Anything else is another tool's.
        let pytorch =
            bytes.is_some() && (args.device_type.is_some() || args.device_id.is_some() || args.addr.is_some());
        let Some(bytes) = bytes.filter(|_| pytorch) else {
            self.foreign_memory += 1;
            let keys = [
                ("Addr", args.addr.is_some()),
                ("Bytes", args.bytes.is_some()),
                ("Total Allocated", args.total_allocated.is_some()),
                ("Total Reserved", args.total_reserved.is_some()),
                ("Device Type", args.device_type.is_some()),
                ("Device Id", args.device_id.is_some()),
            ];
            let named = keys.iter().filter(|(_, present)| *present).map(|(k, _)| Cow::Borrowed(*k));
            for key in named.chain(args.other_keys.into_iter().flatten()) {
                if self.foreign_keys.len() < MAX_FOREIGN_KEYS {
                    self.foreign_keys.insert(key.into_owned());
                }
            }
            return;
        };
        let Some((device, kind)) = self.device_of(&args) else { return };
        let entry = self.series.entry(device).or_insert_with(|| DeviceSeries { kind, ..DeviceSeries::default() });
        // A negative total is the profiler's "not known".
        let total = args.total_allocated.and_then(Num::as_i64).filter(|&t| t >= 0);
        // `Addr` is an `intptr_t`: a negative value is an address by its bit pattern.
        let addr = args.addr.and_then(|a| a.as_u64().or_else(|| a.as_i64().map(|v| v as u64)));
        if let Some(total) = total {
            let event = (addr.is_some() && bytes != 0).then_some(self.events.len());
            entry.allocated.push((CounterSample { time_ns, value: total }, event));
        }
        if let Some(total) = args.total_reserved.and_then(Num::as_i64).filter(|&t| t >= 0) {
            entry.reserved.push(CounterSample { time_ns, value: total });
        }
        match addr {
            Some(addr) => {
                entry.addressed += 1;
                let kind = if bytes >= 0 { EventKind::Alloc } else { EventKind::FreeCompleted };
                if bytes != 0 {
                    self.events.push(Event::new(kind, time_ns, device, addr, bytes.unsigned_abs()));
                    self.event_totals.push(total);
                }
            }
            None if args.addr.is_some() => self.skipped_memory += 1,
            None => entry.unaddressed.push((time_ns, bytes)),
        }
    }
}

/// The top-level object, read key by key; `traceEvents` is streamed into the state.
struct TopLevel<'s> {
    state: &'s mut State,
    base_time_ns: Option<i64>,
    display_time_unit: Option<String>,
    has_events: bool,
    kineto_keys: bool,
    device_properties: Option<serde_json::Value>,
    distributed: Option<serde_json::Value>,
    other: serde_json::Map<String, serde_json::Value>,
}

/// Streams the events of the `traceEvents` array.
struct EventsSeed<'s>(&'s mut State);

impl<'de> DeserializeSeed<'de> for EventsSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for EventsSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("'traceEvents' to be a list of event objects")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(event) = seq.next_element::<Option<RawEvent<'de>>>()? {
            if let Some(event) = event {
                self.0.event(event);
            }
        }
        Ok(())
    }
}

impl<'de> Visitor<'de> for &mut TopLevel<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object with 'traceEvents', or a list of events")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        self.has_events = true;
        EventsSeed(self.state).visit_seq(seq)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            if KINETO_KEYS.contains(&key.as_ref()) {
                self.kineto_keys = true;
            }
            match key.as_ref() {
                "traceEvents" => {
                    self.has_events = true;
                    map.next_value_seed(EventsSeed(self.state))?;
                }
                "baseTimeNanoseconds" => {
                    let value: Num = map.next_value()?;
                    let Some(base) = value.as_i64() else {
                        return Err(serde::de::Error::custom(
                            "'baseTimeNanoseconds' should be an integer number of nanoseconds",
                        ));
                    };
                    self.base_time_ns = Some(base);
                }
                "displayTimeUnit" => {
                    let value: serde_json::Value = map.next_value()?;
                    self.display_time_unit = value.as_str().map(str::to_owned);
                }
                "deviceProperties" => self.device_properties = Some(map.next_value()?),
                "distributedInfo" => {
                    let value: serde_json::Value = map.next_value()?;
                    if !value.is_object() && !value.is_null() {
                        return Err(serde::de::Error::custom("'distributedInfo' should be an object"));
                    }
                    self.distributed = Some(value);
                }
                other => {
                    let other = other.to_owned();
                    let value: serde_json::Value = map.next_value()?;
                    self.other.insert(other, value);
                }
            }
        }
        Ok(())
    }
}

/// The running sum of a device's address-less `[memory]` events, lifted so that it never goes
/// below zero: a free of memory allocated before the trace shows that at least that much was
/// alive from the start.
fn running_sum(changes: &mut [(i64, i64)]) -> Vec<CounterSample> {
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

/// Why a Chrome trace without usable memory events is refused.
fn refusal(state: &State, top: &TopLevel<'_>) -> String {
    if state.foreign_memory > 0 {
        let keys: Vec<&str> = state.foreign_keys.iter().map(String::as_str).collect();
        // PaddlePaddle's profiler names its memory events `[memory]` too, with snake_case arguments.
        let paddle = ["increase_bytes", "place", "current_allocated"].iter().any(|k| state.foreign_keys.contains(*k));
        let writer = if paddle { "PaddlePaddle's profiler" } else { "another framework's profiler" };
        let keys = if keys.is_empty() { "none".to_owned() } else { keys.join(", ") };
        return format!(
            "this Chrome trace has {} [memory] event{}, but not in the schema of PyTorch's profiler (their \
             arguments: {keys}; PyTorch writes a signed Bytes with Device Type and Device Id): it was written \
             by {writer}. vramscope reads the memory events of PyTorch's profiler \
             (torch.profiler.profile(profile_memory=True)) and PyTorch memory snapshots",
            state.foreign_memory,
            if state.foreign_memory == 1 { "" } else { "s" }
        );
    }
    if state.skipped_memory > 0 {
        return format!(
            "this Chrome trace's {} [memory] events all have an Addr that is not a number, so none can be read",
            state.skipped_memory
        );
    }
    let from_pytorch = top.kineto_keys || state.kineto_categories;
    if from_pytorch {
        return "this PyTorch profiler trace has no memory events: profile with \
                torch.profiler.profile(profile_memory=True) to record them, or take a memory snapshot \
                (torch.cuda.memory._record_memory_history, then _dump_snapshot)"
            .to_owned();
    }
    let categories: Vec<&str> = state.categories.iter().map(String::as_str).collect();
    format!(
        "this Chrome trace ({} events{}) is not from PyTorch's profiler and has no memory events vramscope \
         reads; vramscope reads PyTorch profiler traces recorded with profile_memory=True",
        state.trace_events,
        if categories.is_empty() { String::new() } else { format!(", categories {}", categories.join(", ")) }
    )
}

/// Reads a Chrome trace.
pub fn import_chrome_trace(data: &[u8], progress: &dyn Progress) -> Result<Imported> {
    if !progress.update(0, data.len() as u64) {
        return Err(Error::Cancelled);
    }
    import_from(serde_json::Deserializer::from_slice(data), data.len() as u64, progress)
}

/// Reads a Chrome trace from a stream (what a compressed container holds, parsed as it is
/// inflated: the inflated bytes are never held whole). `total` is the progress scale.
pub(crate) fn import_chrome_trace_from(
    reader: impl std::io::Read,
    total: u64,
    progress: &dyn Progress,
) -> Result<Imported> {
    let reader = std::io::BufReader::with_capacity(1 << 16, reader);
    import_from(serde_json::Deserializer::from_reader(reader), total, progress)
}

fn import_from<'de, R: serde_json::de::Read<'de>>(
    mut deserializer: serde_json::Deserializer<R>,
    total: u64,
    progress: &dyn Progress,
) -> Result<Imported> {
    let mut state = State::default();
    let mut top = TopLevel {
        state: &mut state,
        base_time_ns: None,
        display_time_unit: None,
        has_events: false,
        kineto_keys: false,
        device_properties: None,
        distributed: None,
        other: serde_json::Map::new(),
    };
    let parsed = (&mut deserializer).deserialize_any(&mut top).and_then(|()| deserializer.end());
    if let Err(e) = parsed {
        let text = e.to_string();
        return Err(if e.is_data() && text.contains("'traceEvents'") {
            Error::Structure(format!("this Chrome trace's 'traceEvents' is not a list of event objects: {e}"))
        } else if e.is_data() && (text.contains("'baseTimeNanoseconds'") || text.contains("'distributedInfo'")) {
            Error::Structure(format!("this Chrome trace's top level is malformed: {e}"))
        } else {
            Error::Json(e)
        });
    }
    if !top.has_events {
        return Err(Error::Structure(format!(
            "a JSON object without 'traceEvents', so not a PyTorch profiler trace, nor a memory timeline; \
             vramscope reads {}",
            crate::error::FORMATS
        )));
    }
    if !progress.update(total * 9 / 10, total) {
        return Err(Error::Cancelled);
    }
    if top.state.devices_over_limit > 0 {
        return Err(Error::Structure(format!(
            "this trace has memory events of more than {} devices; vramscope reads at most that many",
            super::MAX_DEVICES
        )));
    }
    let usable = top.state.series.values().any(|s| s.addressed > 0 || !s.unaddressed.is_empty());
    if !usable {
        return Err(Error::Structure(refusal(top.state, &top)));
    }
    let TopLevel { base_time_ns, display_time_unit, device_properties, distributed, other, .. } = top;
    let facts = TopFacts { base_time_ns, display_time_unit, device_properties, distributed, other };
    let imported = assemble(state, facts);
    progress.update(total, total);
    Ok(imported)
}

/// What the top level of the file said, once the events are read.
struct TopFacts {
    base_time_ns: Option<i64>,
    display_time_unit: Option<String>,
    device_properties: Option<serde_json::Value>,
    distributed: Option<serde_json::Value>,
    other: serde_json::Map<String, serde_json::Value>,
}

/// The trace from what was read: times on the file's base, counters per device, the metadata.
fn assemble(state: State, facts: TopFacts) -> Imported {
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
    let (events, position, reconciled) = totals::reconcile_with_totals(events, &state.event_totals);
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
        let mut allocated = totals::samples_in_event_order(std::mem::take(&mut s.allocated), &position);
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

#[cfg(test)]
mod tests;
