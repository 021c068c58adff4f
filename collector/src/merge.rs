//! Turning what the hook wrote into one trace.
//!
//! Driver-level memory is reserved memory: each successful allocation (`cuMemAlloc`, pitched,
//! managed, stream-ordered, pinned host memory on device -1) becomes a segment. No framework
//! allocator's records sit on top of it yet, so each is also one allocated block of the same
//! size. A failed allocation becomes an OOM event with the size asked for. A stream-ordered free
//! is taken as freeing at once (the pool's cached memory is not modelled yet). With the virtual
//! memory API, what is mapped counts (`cuMemMap` / `cuMemUnmap`); creating a handle or reserving
//! addresses alone does not. Destroying or resetting a context frees what the process held on
//! its device.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use vramscope_trace_format::{Clock, DeviceInfo, Event, EventKind, Oom, ProcessId, ProcessInfo, SourceFormat, Trace};

use crate::wire::{Api, RECORD_BYTES, Record};

/// `CUDA_ERROR_OUT_OF_MEMORY`.
const CUDA_ERROR_OUT_OF_MEMORY: i32 = 2;

/// What reading a recording directory found.
#[derive(Debug, Default)]
pub struct Recorded {
    /// The records, in time order.
    pub records: Vec<Record>,
    /// Files whose last record was cut short (the process was killed mid-write).
    pub cut_short: Vec<PathBuf>,
}

/// Reads every `events.*.bin` in `dir`.
pub fn read_dir(dir: &Path) -> std::io::Result<Recorded> {
    let mut recorded = Recorded::default();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("events.") && n.ends_with(".bin"))
        })
        .collect();
    files.sort();
    for file in files {
        let bytes = std::fs::read(&file)?;
        let chunks = bytes.chunks_exact(RECORD_BYTES);
        if !chunks.remainder().is_empty() {
            recorded.cut_short.push(file.clone());
        }
        recorded.records.extend(chunks.filter_map(Record::decode));
    }
    recorded.records.sort_by_key(|r| (r.time_ns, r.pid, r.tid));
    Ok(recorded)
}

/// Builds the trace of a recording.
pub fn to_trace(records: &[Record], command_line: &[String]) -> Trace {
    let mut trace = Trace::default();
    trace.metadata.source_format = SourceFormat::Vtrace;
    trace.metadata.clock = Clock::MonotonicNs;
    trace.metadata.tool_version = env!("CARGO_PKG_VERSION").to_owned();
    let mut processes: BTreeMap<u32, ProcessId> = BTreeMap::new();
    // Live allocations by (process, address): size, mapped (virtual memory API), device.
    let mut live: HashMap<(ProcessId, u64), (u64, bool, i16)> = HashMap::new();
    for r in records {
        let next = ProcessId(processes.len() as u32);
        let process = *processes.entry(r.pid).or_insert(next);
        let device = i16::try_from(r.device.max(-1)).unwrap_or(0);
        let time_ns = i64::try_from(r.time_ns).unwrap_or(i64::MAX);
        let event = |kind: EventKind| {
            let mut e = Event::new(kind, time_ns, device, r.address, r.size_bytes);
            e.process = process;
            e.stream = r.stream;
            e
        };
        match (r.api, r.result) {
            (Api::MemMap, 0) => {
                trace.events.push(event(EventKind::SegmentMap));
                trace.events.push(event(EventKind::Alloc));
                live.insert((process, r.address), (r.size_bytes, true, device));
            }
            (Api::MemUnmap, 0) => {
                trace.events.push(event(EventKind::FreeCompleted));
                trace.events.push(event(EventKind::SegmentUnmap));
                live.remove(&(process, r.address));
            }
            // Destroying or resetting a context frees everything it held.
            (Api::ContextDestroy, 0) => {
                let mut held: Vec<(u64, u64, bool, i16)> = live
                    .iter()
                    .filter(|((p, _), (_, _, d))| *p == process && *d == device)
                    .map(|((_, address), (size, mapped, d))| (*address, *size, *mapped, *d))
                    .collect();
                held.sort_unstable();
                for (address, size, mapped, d) in held {
                    live.remove(&(process, address));
                    for kind in [
                        EventKind::FreeCompleted,
                        if mapped { EventKind::SegmentUnmap } else { EventKind::SegmentFree },
                    ] {
                        let mut e = Event::new(kind, time_ns, d, address, size);
                        e.process = process;
                        trace.events.push(e);
                    }
                }
            }
            (api, 0) if api.allocates() => {
                live.insert((process, r.address), (r.size_bytes, false, device));
                trace.events.push(event(EventKind::SegmentAlloc));
                trace.events.push(event(EventKind::Alloc));
            }
            (api, CUDA_ERROR_OUT_OF_MEMORY) if api.allocates() => trace.ooms.push(Oom {
                time_ns,
                device,
                process,
                stream: r.stream,
                requested_bytes: r.size_bytes,
                device_free_bytes: None,
                stack: Default::default(),
            }),
            (Api::MemFree | Api::MemFreeAsync | Api::MemFreeHost, 0) => {
                // Frees carry the address only: the size is the allocation's. Memory the
                // context's destruction already released is not freed twice.
                let Some((size, _, _)) = live.remove(&(process, r.address)) else { continue };
                for kind in [EventKind::FreeCompleted, EventKind::SegmentFree] {
                    let mut e = event(kind);
                    e.size_bytes = size;
                    e.requested_bytes = size;
                    trace.events.push(e);
                }
            }
            // Failed calls change nothing.
            _ => {}
        }
    }
    trace.metadata.processes = processes
        .keys()
        .map(|&pid| ProcessInfo { pid: Some(pid), rank: None, command_line: command_line.to_vec() })
        .collect();
    let mut devices: Vec<i16> = trace.events.iter().map(|e| e.device).collect();
    devices.sort_unstable();
    devices.dedup();
    trace.metadata.devices = devices.into_iter().map(|device| DeviceInfo { device, ..DeviceInfo::default() }).collect();
    trace
}
