//! A GPU whole: every process that held memory on it, as the driver accounted it (NVML, sampled
//! by `record`), beside what the recording saw of each. For a recorded process at the device's
//! high point: PyTorch's part by category, the allocations it made around PyTorch (another
//! allocator, NCCL's buffers, a library's workspace), and what no allocation call shows (its CUDA
//! context, the driver's own). A process not recorded has its bytes and nothing else. Processes
//! that take turns (one gives its memory back, another takes it) show as turns, each with its
//! peak.

use std::collections::BTreeMap;

use serde::Serialize;
use vramscope_trace_format::{
    Category, CounterKind, CounterSeries, DEVICE_SERIES, DeviceId, PROCESS_SERIES, ProcessId, Trace,
};

/// One GPU whole.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema, PartialEq)]
pub struct WholeDevice {
    /// The device.
    pub device: DeviceId,
    /// Its name in the trace (`cuda:0`).
    pub label: String,
    /// Its memory, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
    /// Samples of the driver's accounting.
    pub samples: usize,
    /// The most in use on the device in any sample, every process together.
    pub high_bytes: u64,
    /// When (µs on the trace's clock).
    #[serde(rename = "high_time_us", serialize_with = "crate::micros::ns_as_us")]
    pub high_time_ns: i64,
    /// Every process that held memory there, the most at the device's high point first.
    pub processes: Vec<ProcessOnDevice>,
    /// Processes taking the device in turns (one gives back what it held and another takes it),
    /// in order; empty where they do not.
    pub turns: Vec<Turn>,
}

/// A process on a device.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema, PartialEq)]
pub struct ProcessOnDevice {
    /// Its index in the trace's processes.
    pub process: u32,
    /// Its pid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Its distributed rank, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// What to call it: `rank 0`, the executable's name, or the program's.
    pub name: String,
    /// Whether the recording saw it (else only the driver's accounting did).
    pub recorded: bool,
    /// What the driver accounted to it at the device's high point.
    pub at_high_bytes: u64,
    /// The most the driver accounted to it in any sample.
    pub peak_bytes: u64,
    /// When.
    #[serde(rename = "peak_time_us", serialize_with = "crate::micros::ns_as_us")]
    pub peak_time_ns: i64,
    /// Recorded: what its share at the device's high point was made of.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parts: Option<Parts>,
}

/// A recorded process's share of a device at an instant.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema, PartialEq, Default)]
pub struct Parts {
    /// Reserved by PyTorch's caching allocator.
    pub pytorch_reserved_bytes: u64,
    /// Of that, allocated, by category.
    pub pytorch_by_category: BTreeMap<Category, u64>,
    /// Allocated through the driver around PyTorch's allocator (another allocator, NCCL's
    /// buffers, a library's own): outside PyTorch, seen as allocations.
    pub outside_allocations_bytes: u64,
    /// What the driver accounted to it that no allocation call shows: its CUDA context and the
    /// driver's own memory for it (kernels, stacks, the cuBLAS and NCCL state it set up).
    pub not_allocations_bytes: u64,
}

/// One process's turn on a device.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema, PartialEq)]
pub struct Turn {
    /// The process (its index in the trace's processes).
    pub process: u32,
    /// What to call it.
    pub name: String,
    /// From (µs on the trace's clock).
    #[serde(rename = "from_us", serialize_with = "crate::micros::ns_as_us")]
    pub from_ns: i64,
    /// To.
    #[serde(rename = "to_us", serialize_with = "crate::micros::ns_as_us")]
    pub to_ns: i64,
    /// The most it held in the turn.
    pub peak_bytes: u64,
}

/// The value of a step series at `t` (its last sample at or before; 0 before the first).
fn value_at(series: &CounterSeries, t: i64) -> u64 {
    let i = series.samples.partition_point(|s| s.time_ns <= t);
    i.checked_sub(1).map_or(0, |i| u64::try_from(series.samples[i].value).unwrap_or(0))
}

/// What to call a process.
pub fn process_name(trace: &Trace, process: ProcessId) -> String {
    let Some(info) = trace.metadata.processes.get(process.0 as usize) else {
        return format!("process {}", process.0);
    };
    if let Some(rank) = info.rank {
        return format!("rank {rank}");
    }
    let program = info.name.clone().or_else(|| {
        let first = info.command_line.iter().find(|a| !a.starts_with('-'))?;
        // `python train.py`: the script says more than the interpreter.
        let script = info.command_line.iter().skip(1).find(|a| a.ends_with(".py"));
        let path = script.unwrap_or(first);
        std::path::Path::new(path).file_name().map(|n| n.to_string_lossy().into_owned())
    });
    match (program, info.pid) {
        (Some(p), Some(pid)) => format!("{p} (pid {pid})"),
        (Some(p), None) => p,
        (None, Some(pid)) => format!("pid {pid}"),
        (None, None) => format!("process {}", process.0),
    }
}

/// What `process` had on `device` at `time_ns` as the recording saw it.
pub fn parts_at(trace: &Trace, device: DeviceId, process: ProcessId, time_ns: i64, driver_bytes: u64) -> Parts {
    // The process's own part of the trace, where others have events on the device too (no copy
    // where it is the only one).
    let alone = trace.events.iter().all(|e| e.device != device || e.process == process);
    let part;
    let own = if alone {
        trace
    } else {
        part = trace.of_process(process);
        &part
    };
    let last = own.events.iter().rposition(|e| e.device == device && e.time_ns <= time_ns);
    let instant = crate::instant::instant(own, device, last, time_ns);
    let outside = instant.by_category.get(&Category::NonFramework).copied().unwrap_or(0);
    let seen = instant.total.reserved_bytes.max(instant.total.allocated_bytes);
    let mut by_category = instant.by_category;
    by_category.remove(&Category::NonFramework);
    by_category.retain(|_, b| *b > 0);
    Parts {
        pytorch_reserved_bytes: seen.saturating_sub(outside),
        pytorch_by_category: by_category,
        outside_allocations_bytes: outside,
        not_allocations_bytes: driver_bytes.saturating_sub(seen),
    }
}

/// A device as the driver last accounted it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceNow {
    /// What is used on it.
    pub used_bytes: u64,
    /// Its memory, when known.
    pub capacity_bytes: Option<u64>,
    /// Each process holding memory there: what to call it, whether it was recorded, its bytes;
    /// the most first.
    pub processes: Vec<(String, bool, u64)>,
}

/// The device as the driver last accounted it; `None` where the recording did not sample it.
/// Cheap (the last samples only), for live views.
pub fn now(trace: &Trace, device: DeviceId) -> Option<DeviceNow> {
    let named = |c: &&CounterSeries, name: &str| {
        c.device == device && c.kind == CounterKind::DeviceUsed && trace.interner.resolve(c.name) == name
    };
    let used = trace.counters.iter().find(|c| named(c, DEVICE_SERIES))?.samples.last()?.value;
    let mut processes: Vec<(String, bool, u64)> = trace
        .counters
        .iter()
        .filter(|c| named(c, PROCESS_SERIES))
        .filter_map(|s| {
            let bytes = u64::try_from(s.samples.last()?.value).ok().filter(|&b| b > 0)?;
            let recorded = trace.metadata.processes.get(s.process.0 as usize).is_some_and(|p| !p.not_recorded);
            Some((process_name(trace, s.process), recorded, bytes))
        })
        .collect();
    processes.sort_by_key(|p| std::cmp::Reverse(p.2));
    let capacity_bytes = trace.metadata.devices.iter().find(|d| d.device == device).and_then(|d| d.total_memory_bytes);
    Some(DeviceNow { used_bytes: u64::try_from(used).unwrap_or(0), capacity_bytes, processes })
}

/// What the processes other than those `trace` recorded on `device` held there at `time_ns`, as
/// the driver accounted it (0 where the recording did not sample it): memory the program could
/// not have had.
pub fn others_at(trace: &Trace, device: DeviceId, time_ns: i64) -> u64 {
    let own: std::collections::BTreeSet<ProcessId> =
        trace.events.iter().filter(|e| e.device == device).map(|e| e.process).collect();
    trace
        .counters
        .iter()
        .filter(|c| {
            c.device == device
                && c.kind == CounterKind::DeviceUsed
                && !own.contains(&c.process)
                && trace.interner.resolve(c.name) == PROCESS_SERIES
        })
        .map(|s| value_at(s, time_ns))
        .sum()
}

/// Every sampled device of `trace`, whole (none where the recording did not sample the driver).
pub fn whole_devices(trace: &Trace) -> Vec<WholeDevice> {
    let named = |series: &CounterSeries, name: &str| {
        series.kind == CounterKind::DeviceUsed && trace.interner.resolve(series.name) == name
    };
    let mut out = Vec::new();
    for device_series in trace.counters.iter().filter(|c| named(c, DEVICE_SERIES)) {
        let device = device_series.device;
        let Some(high) = device_series.samples.iter().max_by_key(|s| (s.value, std::cmp::Reverse(s.time_ns))) else {
            continue;
        };
        let high_time_ns = high.time_ns;
        let mut processes: Vec<ProcessOnDevice> = trace
            .counters
            .iter()
            .filter(|c| c.device == device && named(c, PROCESS_SERIES))
            .filter_map(|series| {
                let peak = series.samples.iter().max_by_key(|s| (s.value, std::cmp::Reverse(s.time_ns)))?;
                let info = trace.metadata.processes.get(series.process.0 as usize);
                let recorded = info.is_some_and(|p| !p.not_recorded);
                let at_high_bytes = value_at(series, high_time_ns);
                Some(ProcessOnDevice {
                    process: series.process.0,
                    pid: info.and_then(|p| p.pid),
                    rank: info.and_then(|p| p.rank),
                    name: process_name(trace, series.process),
                    recorded,
                    at_high_bytes,
                    peak_bytes: u64::try_from(peak.value).unwrap_or(0),
                    peak_time_ns: peak.time_ns,
                    parts: recorded.then(|| parts_at(trace, device, series.process, high_time_ns, at_high_bytes)),
                })
            })
            .collect();
        processes.sort_by_key(|p| (std::cmp::Reverse(p.at_high_bytes), std::cmp::Reverse(p.peak_bytes), p.process));
        let turns = turns(trace, device, &processes);
        out.push(WholeDevice {
            device,
            label: trace.metadata.device_label(device),
            capacity_bytes: trace
                .metadata
                .devices
                .iter()
                .find(|d| d.device == device)
                .and_then(|d| d.total_memory_bytes),
            samples: device_series.samples.len(),
            high_bytes: u64::try_from(high.value).unwrap_or(0),
            high_time_ns,
            processes,
            turns,
        });
    }
    out
}

fn come_and_go(series: &CounterSeries) -> bool {
    let peak = series.samples.iter().map(|s| s.value).max().unwrap_or(0);
    let low = series.samples.iter().map(|s| s.value).min().unwrap_or(0);
    peak > 0 && low.saturating_mul(4) <= peak
}

/// Turns: stretches in which one process holds most of what the processes that come and go
/// hold. A process holds the device in a sample when it is awake (it holds more than a quarter
/// of its own most: a context alone is asleep), holds the most there and at least half of what
/// they hold together; consecutive samples of one holder are one turn, which ends where another
/// begins or where none holds it. Only where the holder changes at least twice (A, B, A: memory
/// handed back and forth) are there turns, and only where in each the others held less than a
/// quarter of its most (two processes side by side, each with its own share, take no turns).
fn turns(trace: &Trace, device: DeviceId, processes: &[ProcessOnDevice]) -> Vec<Turn> {
    let series: Vec<&CounterSeries> = trace
        .counters
        .iter()
        .filter(|c| {
            c.device == device
                && c.kind == CounterKind::DeviceUsed
                && trace.interner.resolve(c.name) == PROCESS_SERIES
                && processes.iter().any(|p| p.process == c.process.0)
                // One that comes and goes: at some point it held at most a quarter of its peak.
                && come_and_go(c)
        })
        .collect();
    if series.len() < 2 {
        return Vec::new();
    }
    let mut times: Vec<i64> = series.iter().flat_map(|s| s.samples.iter().map(|x| x.time_ns)).collect();
    times.sort_unstable();
    times.dedup();
    let peaks: Vec<u64> = series
        .iter()
        .map(|s| s.samples.iter().map(|x| u64::try_from(x.value).unwrap_or(0)).max().unwrap_or(0))
        .collect();
    let mut out: Vec<Turn> = Vec::new();
    // Whether the last turn is still going.
    let mut open = false;
    for &t in &times {
        let values: Vec<(u32, u64)> = series.iter().map(|s| (s.process.0, value_at(s, t))).collect();
        let total: u64 = values.iter().map(|v| v.1).sum();
        // Awake: holding more than a quarter of its own most (a context alone is asleep).
        let holder = values
            .iter()
            .zip(&peaks)
            .filter(|((_, bytes), peak)| bytes.saturating_mul(4) > **peak && bytes.saturating_mul(2) >= total)
            .map(|(v, _)| *v)
            .max_by_key(|v| (v.1, std::cmp::Reverse(v.0)));
        match (holder, out.last_mut()) {
            (Some((process, bytes)), Some(turn)) if open && turn.process == process => {
                turn.to_ns = t;
                turn.peak_bytes = turn.peak_bytes.max(bytes);
            }
            (Some((process, bytes)), last) => {
                if let Some(turn) = last.filter(|_| open) {
                    turn.to_ns = t;
                }
                out.push(Turn {
                    process,
                    name: processes.iter().find(|p| p.process == process).map(|p| p.name.clone()).unwrap_or_default(),
                    from_ns: t,
                    to_ns: t,
                    peak_bytes: bytes,
                });
                open = true;
            }
            (None, Some(turn)) if open => {
                turn.to_ns = t;
                open = false;
            }
            (None, _) => {}
        }
    }
    // Side by side, not in turns: each holder kept what it held while the other held more.
    let in_turns = out.len() >= 3
        && out.iter().all(|turn| {
            series.iter().filter(|s| s.process.0 != turn.process).all(|s| {
                let others = s
                    .samples
                    .iter()
                    .filter(|x| x.time_ns >= turn.from_ns && x.time_ns < turn.to_ns)
                    .map(|x| u64::try_from(x.value).unwrap_or(0))
                    .max()
                    .unwrap_or(0)
                    .max(value_at(s, turn.from_ns));
                others.saturating_mul(4) < turn.peak_bytes
            })
        });
    if in_turns { out } else { Vec::new() }
}

#[cfg(test)]
mod tests {
    use vramscope_trace_format::{
        CounterKind, CounterSample, CounterSeries, DEVICE_SERIES, DeviceId, DeviceInfo, PROCESS_SERIES, ProcessId,
        ProcessInfo, Trace,
    };

    /// A trace with the driver's samples of device 0: `series[i]` is process i's (time, bytes).
    fn sampled(series: &[&[(i64, i64)]], not_recorded: &[usize]) -> Trace {
        let mut trace = Trace::default();
        trace.metadata.devices =
            vec![DeviceInfo { device: DeviceId(0), total_memory_bytes: Some(100), ..DeviceInfo::default() }];
        let mut times: Vec<i64> = series.iter().flat_map(|s| s.iter().map(|x| x.0)).collect();
        times.sort_unstable();
        times.dedup();
        let value = |s: &[(i64, i64)], t: i64| s.iter().rev().find(|x| x.0 <= t).map_or(0, |x| x.1);
        let device =
            times.iter().map(|&t| CounterSample { time_ns: t, value: series.iter().map(|s| value(s, t)).sum() });
        let name = trace.interner.string(DEVICE_SERIES);
        trace.counters.push(CounterSeries {
            kind: CounterKind::DeviceUsed,
            name,
            device: DeviceId(0),
            process: ProcessId(0),
            samples: device.collect(),
        });
        let name = trace.interner.string(PROCESS_SERIES);
        for (i, s) in series.iter().enumerate() {
            trace.metadata.processes.push(ProcessInfo {
                pid: Some(100 + i as u32),
                not_recorded: not_recorded.contains(&i),
                ..ProcessInfo::default()
            });
            trace.counters.push(CounterSeries {
                kind: CounterKind::DeviceUsed,
                name,
                device: DeviceId(0),
                process: ProcessId(i as u32),
                samples: s.iter().map(|&(time_ns, value)| CounterSample { time_ns, value }).collect(),
            });
        }
        trace
    }

    /// Two processes handing the device back and forth take turns, each with its most, a context
    /// left behind not counting as holding it; a third that holds its share all along is in none.
    #[test]
    fn memory_handed_back_and_forth_is_turns() {
        let a: &[(i64, i64)] = &[(0, 50), (10, 2), (30, 45), (40, 2)];
        let b: &[(i64, i64)] = &[(0, 0), (12, 40), (20, 2), (42, 38), (50, 2)];
        let c: &[(i64, i64)] = &[(0, 20)];
        let whole = &super::whole_devices(&sampled(&[a, b, c], &[2]))[0];
        let turns: Vec<(u32, i64, i64, u64)> =
            whole.turns.iter().map(|t| (t.process, t.from_ns, t.to_ns, t.peak_bytes)).collect();
        assert_eq!(turns, [(0, 0, 10, 50), (1, 12, 20, 40), (0, 30, 40, 45), (1, 42, 50, 38)]);
        assert_eq!((whole.high_bytes, whole.high_time_ns), (70, 0));
        assert_eq!(
            whole.processes.iter().map(|p| (p.process, p.at_high_bytes, p.recorded)).collect::<Vec<_>>(),
            [(0, 50, true), (2, 20, false), (1, 0, true)]
        );
    }

    /// Two processes side by side, each keeping its share while the other grows, take no turns.
    #[test]
    fn processes_side_by_side_take_no_turns() {
        let a: &[(i64, i64)] = &[(0, 40), (10, 10), (20, 40), (30, 10)];
        let b: &[(i64, i64)] = &[(0, 30), (10, 35), (20, 30), (30, 35)];
        let whole = &super::whole_devices(&sampled(&[a, b], &[]))[0];
        assert!(whole.turns.is_empty(), "{:?}", whole.turns);
    }
}
