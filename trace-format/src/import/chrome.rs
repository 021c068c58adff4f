//! Importer of PyTorch profiler Chrome traces (`prof.export_chrome_trace`).
//!
//! With `profile_memory=True` the profiler writes one `[memory]` instant event per allocation
//! and free, with the address, the signed size and the running totals. `record_function` ranges
//! (`user_annotation`) and operators (`cpu_op`) become annotations.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Deserialize;

use super::Imported;
use crate::error::{Error, Result};
use crate::model::annotation::{Annotation, AnnotationKind};
use crate::model::counter::{CounterKind, CounterSample, CounterSeries};
use crate::model::event::{Event, EventKind};
use crate::model::ids::{ProcessId, StackId};
use crate::model::interner::Interner;
use crate::model::metadata::{Clock, DeviceInfo, Metadata, ProcessInfo, SourceFormat};
use crate::model::trace::Trace;
use crate::progress::Progress;

#[derive(Deserialize)]
struct File<'a> {
    #[serde(rename = "traceEvents", borrow)]
    trace_events: Vec<RawEvent<'a>>,
    #[serde(rename = "baseTimeNanoseconds", default)]
    base_time_ns: Option<i64>,
    #[serde(rename = "deviceProperties", default)]
    device_properties: serde_json::Value,
}

#[derive(Deserialize)]
struct RawEvent<'a> {
    #[serde(borrow, default)]
    ph: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    cat: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(default)]
    ts: Option<f64>,
    #[serde(default)]
    dur: Option<f64>,
    #[serde(default)]
    pid: Option<serde_json::Value>,
    #[serde(default)]
    args: Option<MemoryArgs>,
}

/// The arguments of a `[memory]` event; other events' arguments are skipped field by field.
#[derive(Deserialize, Default, Clone, Copy)]
struct MemoryArgs {
    #[serde(rename = "Addr", default)]
    addr: Option<u64>,
    #[serde(rename = "Bytes", default)]
    bytes: Option<i64>,
    #[serde(rename = "Total Allocated", default)]
    total_allocated: Option<i64>,
    #[serde(rename = "Total Reserved", default)]
    total_reserved: Option<i64>,
    #[serde(rename = "Device Type", default)]
    device_type: Option<i64>,
    #[serde(rename = "Device Id", default)]
    device_id: Option<i64>,
}

/// `c10::DeviceType::CPU`.
const DEVICE_TYPE_CPU: i64 = 0;

struct DeviceSeries {
    allocated: Vec<CounterSample>,
    reserved: Vec<CounterSample>,
    initial_allocated: Option<i64>,
}

/// Reads a Chrome trace.
pub fn import_chrome_trace(data: &[u8], progress: &dyn Progress) -> Result<Imported> {
    if !progress.update(0, data.len() as u64) {
        return Err(Error::Cancelled);
    }
    let file: File<'_> = if data.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        File {
            trace_events: serde_json::from_slice(data)?,
            base_time_ns: None,
            device_properties: serde_json::Value::Null,
        }
    } else {
        serde_json::from_slice(data).map_err(|e| {
            if e.is_data() && e.to_string().contains("traceEvents") {
                Error::Structure("a JSON object without 'traceEvents': not a PyTorch profiler Chrome trace".to_owned())
            } else {
                Error::Json(e)
            }
        })?
    };
    if !progress.update(data.len() as u64 / 2, data.len() as u64) {
        return Err(Error::Cancelled);
    }
    let base_ns = file.base_time_ns.unwrap_or(0);
    let time_ns = |ts: f64| base_ns.saturating_add((ts * 1000.0).round() as i64);
    let mut interner = Interner::new();
    let mut events = Vec::new();
    let mut annotations = Vec::new();
    let mut series: BTreeMap<i16, DeviceSeries> = BTreeMap::new();
    let mut pids = Vec::new();
    let mut warnings = Vec::new();
    let mut skipped_memory = 0usize;
    for raw in &file.trace_events {
        let Some(ts) = raw.ts else { continue };
        let name = raw.name.as_deref().unwrap_or("");
        if name == "[memory]" {
            let args = raw.args.as_ref();
            let (Some(addr), Some(bytes)) = (args.and_then(|a| a.addr), args.and_then(|a| a.bytes)) else {
                skipped_memory += 1;
                continue;
            };
            let args = args.copied().unwrap_or_default();
            let device = if args.device_type == Some(DEVICE_TYPE_CPU) { -1 } else { args.device_id.unwrap_or(0) };
            let device = i16::try_from(device).unwrap_or(-1);
            let t = time_ns(ts);
            let kind = if bytes >= 0 { EventKind::Alloc } else { EventKind::FreeCompleted };
            if bytes != 0 {
                events.push(Event::new(kind, t, device, addr, bytes.unsigned_abs()));
            }
            let entry = series.entry(device).or_insert_with(|| DeviceSeries {
                allocated: Vec::new(),
                reserved: Vec::new(),
                initial_allocated: None,
            });
            if let Some(total) = args.total_allocated {
                if entry.initial_allocated.is_none() {
                    entry.initial_allocated = Some(total - bytes);
                }
                entry.allocated.push(CounterSample { time_ns: t, value: total });
            }
            if let Some(total) = args.total_reserved {
                entry.reserved.push(CounterSample { time_ns: t, value: total });
            }
            continue;
        }
        if raw.ph.as_deref() != Some("X") {
            continue;
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
            _ => continue,
        };
        let start_ns = time_ns(ts);
        let end_ns = start_ns.saturating_add((raw.dur.unwrap_or(0.0).max(0.0) * 1000.0).round() as i64);
        let device = if raw.cat.as_deref() == Some("gpu_user_annotation") { Annotation::ALL_DEVICES } else { -1 };
        annotations.push(Annotation {
            kind,
            device,
            process: ProcessId(0),
            start_ns,
            end_ns,
            name: interner.string(name),
            stack: StackId(0),
        });
        if let Some(pid) = raw.pid.as_ref().and_then(serde_json::Value::as_u64) {
            pids.push(pid);
        }
    }
    if skipped_memory > 0 {
        warnings.push(format!("{skipped_memory} [memory] events without Addr or Bytes were skipped"));
    }
    if events.is_empty() && series.is_empty() {
        return Err(Error::Structure(
            "this Chrome trace has no [memory] events: record it with profile_memory=True".to_owned(),
        ));
    }
    events.sort_by_key(|e| e.time_ns);
    annotations.sort_by_key(|a| (a.start_ns, a.end_ns));
    let mut counters = Vec::new();
    let mut devices = Vec::new();
    for (&device, s) in &series {
        devices.push(DeviceInfo {
            device,
            initial_allocated_bytes: s.initial_allocated.map(|v| v.max(0) as u64),
            ..DeviceInfo::default()
        });
        let mut allocated = s.allocated.clone();
        allocated.sort_by_key(|c| c.time_ns);
        counters.push(CounterSeries {
            kind: CounterKind::Allocated,
            name: interner.string("Total Allocated"),
            device,
            process: ProcessId(0),
            samples: allocated,
        });
        if s.reserved.iter().any(|c| c.value != 0) {
            let mut reserved = s.reserved.clone();
            reserved.sort_by_key(|c| c.time_ns);
            counters.push(CounterSeries {
                kind: CounterKind::Reserved,
                name: interner.string("Total Reserved"),
                device,
                process: ProcessId(0),
                samples: reserved,
            });
        }
    }
    pids.sort_unstable();
    pids.dedup();
    let mut extra = serde_json::Map::new();
    if !file.device_properties.is_null() {
        extra.insert("deviceProperties".to_owned(), file.device_properties.clone());
    }
    let metadata = Metadata {
        source_format: SourceFormat::ChromeTrace,
        clock: if file.base_time_ns.is_some() { Clock::UnixNs } else { Clock::MonotonicNs },
        tool_version: String::new(),
        devices,
        processes: vec![ProcessInfo {
            pid: pids.first().and_then(|&p| u32::try_from(p).ok()),
            ..ProcessInfo::default()
        }],
        allocator_settings: serde_json::Value::Null,
        extra,
    };
    progress.update(data.len() as u64, data.len() as u64);
    Ok(Imported {
        trace: Trace {
            metadata,
            interner,
            events,
            segments: Vec::new(),
            annotations,
            ooms: Vec::new(),
            counters,
            tags: Vec::new(),
        },
        warnings,
        format: SourceFormat::ChromeTrace,
    })
}
