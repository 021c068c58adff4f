//! Each event of a Chrome trace as the parser produces it: `[memory]` events into each device's
//! series and allocator events, OOMs, ranges and operators into annotations.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use crate::model::annotation::{Annotation, AnnotationKind};
use crate::model::counter::CounterSample;
use crate::model::event::{Event, EventKind};
use crate::model::ids::{DeviceId, ProcessId, StackId};
use crate::model::interner::Interner;
use crate::model::oom::Oom;

use super::fields::{Args, Num, RawEvent};

/// `c10::DeviceType` values (`c10/core/DeviceType.h`) and the names PyTorch gives them.
pub(super) const DEVICE_TYPES: [&str; 21] = [
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
pub(super) const DEVICE_TYPE_CPU: i64 = 0;
/// Keys of `[memory]` events named in an error about a foreign schema, at most.
pub(super) const MAX_FOREIGN_KEYS: usize = 12;
/// Event categories named in an error about a trace without memory events, at most.
pub(super) const MAX_CATEGORIES: usize = 8;
/// Top-level keys that say a trace comes from PyTorch's profiler (kineto).
pub(super) const KINETO_KEYS: [&str; 5] =
    ["schemaVersion", "deviceProperties", "distributedInfo", "record_shapes", "with_stack"];
/// Event categories only PyTorch's profiler writes.
pub(super) const KINETO_CATEGORIES: [&str; 8] =
    ["cpu_op", "user_annotation", "python_function", "cuda_runtime", "kernel", "gpu_memcpy", "ac2g", "Trace"];

/// Memory of one device as the trace reports it.
#[derive(Default)]
pub(super) struct DeviceSeries {
    /// The device type's name (`cuda`, `hip`, ...); `None` for the host.
    pub(super) kind: Option<&'static str>,
    /// `Total Allocated` of each event that has one, in file order, with the index of the event
    /// in [`State::events`] when it became one.
    pub(super) allocated: Vec<(CounterSample, Option<usize>)>,
    pub(super) reserved: Vec<CounterSample>,
    /// Events with an address (allocator events).
    pub(super) addressed: usize,
    /// Events without one: `(time_ns, bytes)`, for the running sum.
    pub(super) unaddressed: Vec<(i64, i64)>,
}

/// Everything read from the file so far.
#[derive(Default)]
pub(super) struct State {
    pub(super) interner: Interner,
    pub(super) events: Vec<Event>,
    /// `Total Allocated` after each of `events`, where the event has one.
    pub(super) event_totals: Vec<Option<i64>>,
    pub(super) annotations: Vec<Annotation>,
    pub(super) ooms: Vec<Oom>,
    pub(super) series: BTreeMap<DeviceId, DeviceSeries>,
    pub(super) pids: BTreeSet<u64>,
    pub(super) memory_events: usize,
    /// `[memory]` events that do not follow PyTorch's schema, and their argument names.
    pub(super) foreign_memory: usize,
    pub(super) foreign_keys: BTreeSet<String>,
    pub(super) skipped_memory: usize,
    pub(super) categories: BTreeSet<String>,
    pub(super) kineto_categories: bool,
    /// Devices whose `Device Type` is not one this build knows.
    pub(super) unknown_types: BTreeSet<i64>,
    /// The trace's device of each (type name, `Device Id`).
    pub(super) device_numbers: BTreeMap<(&'static str, i64), i16>,
    /// Devices that could not keep their own index.
    pub(super) renumbered: Vec<String>,
    /// Memory events of devices beyond [`crate::import::MAX_DEVICES`].
    pub(super) devices_over_limit: usize,
    pub(super) trace_events: usize,
}

/// A `c10::DeviceType` number as a device of the trace: `None` is the host.
pub(super) fn device_kind(
    device_type: Option<i64>,
    device_id: Option<i64>,
    unknown: &mut BTreeSet<i64>,
) -> Option<&'static str> {
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
    pub(super) fn event(&mut self, raw: RawEvent<'_>) {
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
    pub(super) fn device_of(&mut self, args: &Args<'_>) -> Option<(DeviceId, Option<&'static str>)> {
        let (device, kind) = self.device_number(args);
        (device != i16::MIN).then_some((DeviceId(device), kind))
    }

    pub(super) fn device_number(&mut self, args: &Args<'_>) -> (i16, Option<&'static str>) {
        let device_type = args.device_type.and_then(Num::as_i64);
        let device_id = args.device_id.and_then(Num::as_i64);
        let kind = device_kind(device_type, device_id, &mut self.unknown_types);
        let Some(name) = kind else { return (-1, None) };
        let id = device_id.unwrap_or(0).max(0);
        if let Some(&device) = self.device_numbers.get(&(name, id)) {
            return (device, kind);
        }
        if self.device_numbers.len() >= crate::import::MAX_DEVICES {
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
    pub(super) fn oom_event(&mut self, time_ns: i64, args: Args<'_>) {
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

    pub(super) fn memory_event(&mut self, time_ns: i64, args: Args<'_>) {
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
