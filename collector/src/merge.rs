//! Turning what the hook wrote into one trace.
//!
//! Driver-level memory is reserved memory: each successful allocation (`cuMemAlloc`, pitched,
//! managed, stream-ordered, pinned host memory on device -1) becomes a segment. No framework
//! allocator's records sit on top of it yet, so each is also one allocated block of the same
//! size. A failed allocation becomes an OOM event with the size asked for. With the virtual
//! memory API, what is mapped counts (`cuMemMap` / `cuMemUnmap`); creating a handle or reserving
//! addresses alone does not. Destroying or resetting a context frees what the process held on
//! its device.
//!
//! Stream-ordered allocations come from a pool, which keeps freed memory until a synchronisation
//! or a trim gives it back. Where the hook recorded what the process's pools reserve
//! ([`Api::PoolReserved`]), a pool is one segment that grows and shrinks with it (mapped and
//! unmapped at its top end, at a made-up address: pools have no address range of their own) and
//! its allocations are blocks without segments of their own. Without those records (a
//! driver that could not be asked) each stream-ordered allocation is its own segment again.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;

use vramscope_trace_format::{
    Clock, DeviceId, DeviceInfo, Event, EventKind, Oom, ProcessId, ProcessInfo, SourceFormat, Trace,
};

use crate::wire::{Api, Record};

/// `CUDA_ERROR_OUT_OF_MEMORY`.
const CUDA_ERROR_OUT_OF_MEMORY: i32 = 2;

/// What backs a live driver allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Backing {
    /// Its own segment (`cuMemAlloc` and the like).
    Segment,
    /// Memory mapped with the virtual memory API.
    Mapped,
    /// A stream-ordered pool, which is a segment of its own.
    Pool,
}

/// What a stream-ordered pool reserves, as the segment ranges mapped above its handle's number
/// (offset, size), in the order they were mapped.
#[derive(Debug, Default)]
struct Pool {
    chunks: Vec<(u64, u64)>,
    device: DeviceId,
    /// Where its segment is drawn: pools have no address range of their own, so each gets one
    /// of its own, 1 TiB apart, far above real device addresses.
    base: u64,
}

/// The first pool's made-up segment address.
const POOL_BASE: u64 = 0xF000_0000_0000_0000;

impl Pool {
    fn reserved(&self) -> u64 {
        self.chunks.last().map_or(0, |&(offset, size)| offset + size)
    }

    /// The segment events that take the pool drawn at `base` to `now` bytes: growth is mapped
    /// at the top; shrinking unmaps the top ranges (each as it was mapped) and maps back the part
    /// of a range below `now`.
    fn resize(&mut self, base: u64, now: u64) -> Vec<(EventKind, u64, u64)> {
        let handle = base;
        let mut events = Vec::new();
        let was = self.reserved();
        if now > was {
            self.chunks.push((was, now - was));
            events.push((EventKind::SegmentMap, handle.wrapping_add(was), now - was));
        }
        while let Some(&(offset, size)) = self.chunks.last() {
            if offset + size <= now {
                break;
            }
            self.chunks.pop();
            events.push((EventKind::SegmentUnmap, handle.wrapping_add(offset), size));
            if offset < now {
                self.chunks.push((offset, now - offset));
                events.push((EventKind::SegmentMap, handle.wrapping_add(offset), now - offset));
            }
        }
        events
    }
}

/// What reading a recording directory found.
#[derive(Debug, Default)]
pub struct Recorded {
    /// The records, in time order.
    pub records: Vec<Record>,
    /// Files whose last record was cut short (the process was killed mid-write).
    pub cut_short: Vec<PathBuf>,
}

/// Builds the trace of a recording: the driver-level records and the PyTorch shims' logs.
pub fn to_trace(records: &[Record], logs: &[crate::torch::Log], command_line: &[String]) -> Trace {
    let mut trace = Trace::default();
    trace.metadata.source_format = SourceFormat::Vtrace;
    trace.metadata.clock = Clock::MonotonicNs;
    trace.metadata.tool_version = env!("CARGO_PKG_VERSION").to_owned();
    let mut processes: BTreeMap<u32, ProcessId> = BTreeMap::new();
    // Live allocations by (process, address): size, what backs them, device.
    let mut live: HashMap<(ProcessId, u64), (u64, Backing, DeviceId)> = HashMap::new();
    // Processes whose pools were followed, and what each pool (process, handle) reserves.
    let pooled: HashSet<u32> = records.iter().filter(|r| r.api == Api::PoolReserved).map(|r| r.pid).collect();
    let mut pools: BTreeMap<(ProcessId, u64), Pool> = BTreeMap::new();
    for r in records {
        let next = ProcessId(processes.len() as u32);
        let process = *processes.entry(r.pid).or_insert(next);
        let device = DeviceId(i16::try_from(r.device.max(-1)).unwrap_or(0));
        let time_ns = i64::try_from(r.time_ns).unwrap_or(i64::MAX);
        let event = |kind: EventKind| {
            let mut e = Event::new(kind, time_ns, device, r.address, r.size_bytes);
            e.process = process;
            e.stream = r.stream.into();
            e
        };
        match (r.api, r.result) {
            (Api::MemMap, 0) => {
                trace.events.push(event(EventKind::SegmentMap));
                trace.events.push(event(EventKind::Alloc));
                live.insert((process, r.address), (r.size_bytes, Backing::Mapped, device));
            }
            (Api::MemUnmap, 0) => {
                trace.events.push(event(EventKind::FreeCompleted));
                trace.events.push(event(EventKind::SegmentUnmap));
                live.remove(&(process, r.address));
            }
            (Api::PoolReserved, _) => {
                let index = pools.len() as u64;
                let pool = pools
                    .entry((process, r.address))
                    .or_insert_with(|| Pool { base: POOL_BASE + (index << 40), ..Pool::default() });
                pool.device = device;
                let base = pool.base;
                for (kind, address, size) in pool.resize(base, r.size_bytes) {
                    let mut e = Event::new(kind, time_ns, device, address, size);
                    e.process = process;
                    trace.events.push(e);
                }
            }
            // Destroying or resetting a context frees everything it held, its pools' memory too.
            (Api::ContextDestroy, 0) => {
                let mut held: Vec<(u64, u64, Backing, DeviceId)> = live
                    .iter()
                    .filter(|((p, _), (_, _, d))| *p == process && *d == device)
                    .map(|((_, address), (size, backing, d))| (*address, *size, *backing, *d))
                    .collect();
                held.sort_unstable();
                for (address, size, backing, d) in held {
                    live.remove(&(process, address));
                    let release = match backing {
                        Backing::Mapped => Some(EventKind::SegmentUnmap),
                        Backing::Segment => Some(EventKind::SegmentFree),
                        Backing::Pool => None,
                    };
                    for kind in std::iter::once(EventKind::FreeCompleted).chain(release) {
                        let mut e = Event::new(kind, time_ns, d, address, size);
                        e.process = process;
                        trace.events.push(e);
                    }
                }
                for ((_, handle), pool) in
                    pools.iter_mut().filter(|((p, _), pool)| *p == process && pool.device == device)
                {
                    for (kind, address, size) in pool.resize(*handle, 0) {
                        let mut e = Event::new(kind, time_ns, device, address, size);
                        e.process = process;
                        trace.events.push(e);
                    }
                }
            }
            (Api::MemAllocAsync, 0) if pooled.contains(&r.pid) => {
                live.insert((process, r.address), (r.size_bytes, Backing::Pool, device));
                trace.events.push(event(EventKind::Alloc));
            }
            (api, 0) if api.allocates() => {
                live.insert((process, r.address), (r.size_bytes, Backing::Segment, device));
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
                // context's destruction already released is not freed twice; memory from a pool
                // stays reserved by the pool.
                let Some((size, backing, _)) = live.remove(&(process, r.address)) else { continue };
                let release = (backing != Backing::Pool).then_some(EventKind::SegmentFree);
                for kind in std::iter::once(EventKind::FreeCompleted).chain(release) {
                    let mut e = event(kind);
                    e.size_bytes = size;
                    e.set_requested_bytes(size);
                    trace.events.push(e);
                }
            }
            // Failed calls change nothing.
            _ => {}
        }
    }
    let ranks = crate::torch::add_to_trace(&mut trace, logs, &mut processes);
    let placements = crate::torch::placements(logs);
    // Process ids are numbered in order of first appearance: the metadata lists them so.
    let mut by_id: Vec<(ProcessId, u32)> = processes.iter().map(|(&pid, &id)| (id, pid)).collect();
    by_id.sort_unstable();
    trace.metadata.processes = by_id
        .into_iter()
        .map(|(_, pid)| {
            let placed = placements.get(&pid).cloned().unwrap_or_default();
            ProcessInfo {
                pid: Some(pid),
                rank: ranks.get(&pid).copied(),
                command_line: command_line.to_vec(),
                node: placed.node,
                local_rank: placed.local_rank,
                host: placed.host,
                in_process: placed.in_process,
                name: placed.name,
                ..ProcessInfo::default()
            }
        })
        .collect();
    // A device the program only failed to allocate on is one of the run's too.
    let mut devices: Vec<DeviceId> =
        trace.events.iter().map(|e| e.device).chain(trace.ooms.iter().map(|o| o.device)).collect();
    devices.sort_unstable();
    devices.dedup();
    trace.metadata.devices = devices.into_iter().map(|device| DeviceInfo { device, ..DeviceInfo::default() }).collect();
    trace
}
