//! The whole device, as the driver accounts it: while a workload runs, `record` samples NVML
//! (`libnvidia-ml.so.1`, loaded at run time; nothing without it) for each GPU's capacity, what is
//! used on it, and each process holding memory there with what the driver accounts to it (its
//! CUDA context, its allocations, another allocator's pools): processes the recording does not
//! see too. The samples go to `devices.jsonl` in the recording directory, a JSON line each,
//! appended (so a SIGKILL of the recorder loses nothing already sampled):
//!
//! - `{"gpu": 0, "uuid": "GPU-…", "name": "…", "total": BYTES}`: a device, once, first;
//! - `{"pid": 812, "name": "python3", "cmdline": ["…"]}`: a process, once, as first seen (read
//!   from `/proc` then: it may be gone at the end);
//! - `{"t": NS, "gpu": 0, "used": BYTES, "procs": [[PID, BYTES or null], …]}`: a sample
//!   (`CLOCK_MONOTONIC`, the hook's clock), written when something changed since the device's
//!   last one, and at the end. `null`: NVML does not know the process's bytes (it says so on some
//!   systems).
//!
//! What NVML cannot say: in a container without the host's PID namespace the pids it gives are
//! the host's, which match no process of the recording (those are listed as not recorded); under
//! MPS, clients' memory may be the server's.
#![allow(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The samples' file in a recording directory.
pub const FILE: &str = "devices.jsonl";

/// NVML's `nvmlMemory_t`.
#[repr(C)]
#[derive(Default)]
struct Memory {
    total: u64,
    free: u64,
    used: u64,
}

/// NVML's `nvmlProcessInfo_t` (of `_v2` and `_v3`).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ProcessInfo {
    pid: c_uint,
    used: u64,
    gpu_instance: c_uint,
    compute_instance: c_uint,
}

/// NVML's `NVML_VALUE_NOT_AVAILABLE` (for unsigned long long).
const NOT_AVAILABLE: u64 = u64::MAX;
/// `NVML_ERROR_INSUFFICIENT_SIZE`.
const INSUFFICIENT_SIZE: c_int = 7;

type Device = *mut c_void;
type ProcessesFn = unsafe extern "C" fn(Device, *mut c_uint, *mut ProcessInfo) -> c_int;
type MemoryFn = unsafe extern "C" fn(Device, *mut Memory) -> c_int;
/// Each process on a device and its bytes (`None`: NVML does not say), by pid.
type Holders = Vec<(u32, Option<u64>)>;

/// The functions a sampler calls.
struct Nvml {
    _library: *mut c_void,
    shutdown: unsafe extern "C" fn() -> c_int,
    memory: MemoryFn,
    compute: ProcessesFn,
    graphics: Option<ProcessesFn>,
    devices: Vec<(u32, Device)>,
}

// SAFETY: NVML's functions are thread-safe; the handles are only used on the sampling thread.
unsafe impl Send for Nvml {}

/// A line of `devices.jsonl`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Line {
    /// A sample of one device.
    Sample {
        /// When (`CLOCK_MONOTONIC` ns).
        t: i64,
        /// NVML's index of the device.
        gpu: u32,
        /// Bytes in use on it.
        used: u64,
        /// Each process holding memory there, and its bytes (`None`: NVML does not say).
        procs: Vec<(u32, Option<u64>)>,
    },
    /// A device.
    Device {
        /// NVML's index.
        gpu: u32,
        /// `GPU-…`, as NVML and `nvidia-smi -L` write it.
        uuid: String,
        /// Its name.
        name: String,
        /// Its memory.
        total: u64,
    },
    /// A process as first seen.
    Process {
        /// Its pid (NVML's).
        pid: u32,
        /// Its executable's name, where `/proc` shows it.
        #[serde(default)]
        name: Option<String>,
        /// Its command line, where `/proc` shows it.
        #[serde(default)]
        cmdline: Vec<String>,
    },
}

fn symbol(library: *mut c_void, name: &CStr) -> Option<*mut c_void> {
    // SAFETY: `library` is a handle dlopen returned; `name` is NUL-terminated.
    let found = unsafe { libc::dlsym(library, name.as_ptr()) };
    (!found.is_null()).then_some(found)
}

impl Nvml {
    /// NVML, initialised, with its devices; `None` without the library or where it fails.
    fn open() -> Option<Self> {
        // SAFETY: loading NVML runs its initialisers, as nvidia-smi's start does.
        let library = unsafe { libc::dlopen(c"libnvidia-ml.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if library.is_null() {
            return None;
        }
        // SAFETY (each transmute): the symbols are NVML's, with these C signatures.
        let init: unsafe extern "C" fn() -> c_int = unsafe { std::mem::transmute(symbol(library, c"nvmlInit_v2")?) };
        let shutdown = unsafe {
            std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> c_int>(symbol(library, c"nvmlShutdown")?)
        };
        let count: unsafe extern "C" fn(*mut c_uint) -> c_int =
            unsafe { std::mem::transmute(symbol(library, c"nvmlDeviceGetCount_v2")?) };
        let handle: unsafe extern "C" fn(c_uint, *mut Device) -> c_int =
            unsafe { std::mem::transmute(symbol(library, c"nvmlDeviceGetHandleByIndex_v2")?) };
        let memory =
            unsafe { std::mem::transmute::<*mut c_void, MemoryFn>(symbol(library, c"nvmlDeviceGetMemoryInfo")?) };
        let compute = symbol(library, c"nvmlDeviceGetComputeRunningProcesses_v3")
            .or_else(|| symbol(library, c"nvmlDeviceGetComputeRunningProcesses_v2"))?;
        let compute: ProcessesFn = unsafe { std::mem::transmute(compute) };
        let graphics = symbol(library, c"nvmlDeviceGetGraphicsRunningProcesses_v3")
            .or_else(|| symbol(library, c"nvmlDeviceGetGraphicsRunningProcesses_v2"))
            .map(|f| unsafe { std::mem::transmute::<*mut c_void, ProcessesFn>(f) });
        // SAFETY: the library is loaded; init takes no arguments.
        if unsafe { init() } != 0 {
            return None;
        }
        let mut n: c_uint = 0;
        // SAFETY: `n` is valid to write.
        if unsafe { count(&mut n) } != 0 {
            return None;
        }
        let devices = (0..n.min(64))
            .filter_map(|i| {
                let mut device: Device = std::ptr::null_mut();
                // SAFETY: `device` is valid to write; `i` is below the count.
                (unsafe { handle(i, &mut device) } == 0).then_some((i, device))
            })
            .collect();
        Some(Self { _library: library, shutdown, memory, compute, graphics, devices })
    }

    fn text(&self, device: Device, name: &CStr) -> Option<String> {
        let f = symbol(self._library, name)?;
        // SAFETY: nvmlDeviceGetName and nvmlDeviceGetUUID have this signature.
        let f: unsafe extern "C" fn(Device, *mut c_char, c_uint) -> c_int = unsafe { std::mem::transmute(f) };
        let mut buffer = [0 as c_char; 96];
        // SAFETY: the buffer holds 96 bytes, as said.
        if unsafe { f(device, buffer.as_mut_ptr(), 96) } != 0 {
            return None;
        }
        // SAFETY: NVML wrote a NUL-terminated string within the buffer.
        Some(unsafe { CStr::from_ptr(buffer.as_ptr()) }.to_string_lossy().into_owned())
    }

    fn processes(list: ProcessesFn, device: Device, into: &mut BTreeMap<u32, Option<u64>>) {
        let mut room: Vec<ProcessInfo> = vec![ProcessInfo::default(); 64];
        for _ in 0..4 {
            let mut n = room.len() as c_uint;
            // SAFETY: `room` holds `n` entries; NVML writes at most that many and says how many.
            let result = unsafe { list(device, &mut n, room.as_mut_ptr()) };
            if result == INSUFFICIENT_SIZE {
                room.resize(n as usize + 16, ProcessInfo::default());
                continue;
            }
            if result == 0 {
                for p in room.iter().take(n as usize) {
                    let bytes = (p.used != NOT_AVAILABLE).then_some(p.used);
                    let entry = into.entry(p.pid).or_insert(Some(0));
                    *entry = entry.zip(bytes).map(|(a, b)| a + b);
                }
            }
            return;
        }
    }

    /// One sample of each device: (index, used, processes).
    fn sample(&self) -> Vec<(u32, u64, Holders)> {
        self.devices
            .iter()
            .filter_map(|&(index, device)| {
                let mut memory = Memory::default();
                // SAFETY: `memory` is valid to write.
                if unsafe { (self.memory)(device, &mut memory) } != 0 {
                    return None;
                }
                let mut procs = BTreeMap::new();
                Self::processes(self.compute, device, &mut procs);
                if let Some(graphics) = self.graphics {
                    Self::processes(graphics, device, &mut procs);
                }
                Some((index, memory.used, procs.into_iter().collect()))
            })
            .collect()
    }
}

impl Drop for Nvml {
    fn drop(&mut self) {
        // SAFETY: NVML was initialised by `open`.
        unsafe { (self.shutdown)() };
    }
}

/// `CLOCK_MONOTONIC` in ns, the hook's clock.
fn monotonic_ns() -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is valid to write.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// A process's name and command line from `/proc`.
fn describe(pid: u32) -> Line {
    let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok().map(|s| s.trim_end().to_owned());
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect()
        })
        .unwrap_or_default();
    Line::Process { pid, name, cmdline }
}

/// A sampler running beside the workload.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Sampler {
    /// Starts sampling every `interval` into `dir`'s [`FILE`]; `None` where there is no NVML (no
    /// NVIDIA driver: nothing to sample) or the file cannot be made.
    pub fn start(dir: &Path, interval: Duration) -> Option<Self> {
        let nvml = Nvml::open()?;
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(dir.join(FILE)).ok()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("vramscope-nvml".to_owned())
            .spawn(move || {
                let mut out = Vec::new();
                for &(gpu, device) in &nvml.devices {
                    let mut memory = Memory::default();
                    // SAFETY: `memory` is valid to write.
                    let total = if unsafe { (nvml.memory)(device, &mut memory) } == 0 { memory.total } else { 0 };
                    let uuid = nvml.text(device, c"nvmlDeviceGetUUID").unwrap_or_default();
                    let name = nvml.text(device, c"nvmlDeviceGetName").unwrap_or_default();
                    push(&mut out, &Line::Device { gpu, uuid, name, total });
                }
                let mut seen: BTreeSet<u32> = BTreeSet::new();
                let mut last: BTreeMap<u32, (u64, Holders)> = BTreeMap::new();
                loop {
                    let done = stopping.load(Ordering::Acquire);
                    let t = monotonic_ns();
                    for (gpu, used, procs) in nvml.sample() {
                        for &(pid, _) in &procs {
                            if seen.insert(pid) {
                                push(&mut out, &describe(pid));
                            }
                        }
                        let changed = last.get(&gpu).is_none_or(|(u, p)| *u != used || *p != procs);
                        if changed || done {
                            push(&mut out, &Line::Sample { t, gpu, used, procs: procs.clone() });
                            last.insert(gpu, (used, procs));
                        }
                    }
                    if !out.is_empty() {
                        let _ = file.write_all(&out);
                        out.clear();
                    }
                    if done {
                        return;
                    }
                    std::thread::park_timeout(interval);
                }
            })
            .ok()?;
        Some(Self { stop, thread: Some(thread) })
    }

    /// Takes a last sample and stops.
    pub fn finish(mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

fn push(out: &mut Vec<u8>, line: &Line) {
    if serde_json::to_writer(&mut *out, line).is_ok() {
        out.push(b'\n');
    }
}

/// The lines of `dir`'s [`FILE`] that read (none without one); a line cut short by a kill is
/// left out.
pub fn read(dir: &Path) -> Vec<Line> {
    let Ok(text) = std::fs::read_to_string(dir.join(FILE)) else {
        return Vec::new();
    };
    text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

/// Adds what the sampler wrote (`lines`) to `trace`: each sampled GPU that is one of the trace's
/// devices (by UUID; by number where neither side names UUIDs and CUDA's numbering is the
/// driver's) gets a `device` series and a `process` series per process that held memory on it;
/// processes the recording did not see are added to the metadata as `not_recorded`. What could
/// not be tied is said in `notes`.
pub fn add_to_trace(trace: &mut vramscope_trace_format::Trace, lines: &[Line], notes: &mut Vec<String>) {
    use vramscope_trace_format::{
        CounterKind, CounterSample, CounterSeries, DEVICE_SERIES, DeviceId, PROCESS_SERIES, ProcessId, ProcessInfo,
    };
    let mut gpus: BTreeMap<u32, (&str, &str, u64)> = BTreeMap::new();
    let mut described: BTreeMap<u32, (&Option<String>, &Vec<String>)> = BTreeMap::new();
    for line in lines {
        match line {
            Line::Device { gpu, uuid, name, total } => {
                gpus.insert(*gpu, (uuid, name, *total));
            }
            Line::Process { pid, name, cmdline } => {
                described.insert(*pid, (name, cmdline));
            }
            Line::Sample { .. } => {}
        }
    }
    if gpus.is_empty() {
        return;
    }
    let cuda_renumbered = std::env::var_os("CUDA_VISIBLE_DEVICES").is_some();
    let any_uuid = trace.metadata.devices.iter().any(|d| d.uuid.is_some());
    // Trace device by NVML index.
    let mut tied: BTreeMap<u32, DeviceId> = BTreeMap::new();
    for info in trace.metadata.devices.iter_mut().filter(|d| !d.device.is_host()) {
        let found = match &info.uuid {
            Some(uuid) => gpus.iter().find(|(_, g)| g.0 == uuid).map(|(&i, _)| i),
            None if !any_uuid && !cuda_renumbered => u32::try_from(info.device.0).ok().filter(|i| gpus.contains_key(i)),
            None => None,
        };
        match found {
            Some(gpu) => {
                tied.insert(gpu, info.device);
                let (uuid, name, total) = gpus[&gpu];
                info.uuid.get_or_insert_with(|| uuid.to_owned());
                if info.name.is_none() && !name.is_empty() {
                    info.name = Some(name.to_owned());
                }
                if info.total_memory_bytes.is_none() && total > 0 {
                    info.total_memory_bytes = Some(total);
                }
            }
            None => notes.push(format!(
                "cuda:{} could not be matched to a GPU the driver listed (no UUID to match): the whole \
                 device is not shown",
                info.device.0
            )),
        }
    }
    let mut process_of: BTreeMap<u32, ProcessId> = trace
        .metadata
        .processes
        .iter()
        .enumerate()
        .filter_map(|(i, p)| Some((p.pid?, ProcessId(u32::try_from(i).ok()?))))
        .collect();
    let mut device_series: BTreeMap<DeviceId, Vec<CounterSample>> = BTreeMap::new();
    let mut process_series: BTreeMap<(DeviceId, ProcessId), Vec<CounterSample>> = BTreeMap::new();
    for line in lines {
        let Line::Sample { t, gpu, used, procs } = line else { continue };
        let Some(&device) = tied.get(gpu) else { continue };
        device_series.entry(device).or_default().push(CounterSample { time_ns: *t, value: clamp(*used) });
        let mut here: BTreeSet<ProcessId> = BTreeSet::new();
        for &(pid, bytes) in procs {
            let process = *process_of.entry(pid).or_insert_with(|| {
                let id = ProcessId(trace.metadata.processes.len() as u32);
                let (name, cmdline) =
                    described.get(&pid).map_or((None, Vec::new()), |(n, c)| ((*n).clone(), (*c).clone()));
                trace.metadata.processes.push(ProcessInfo {
                    pid: Some(pid),
                    command_line: cmdline,
                    name,
                    not_recorded: true,
                    ..ProcessInfo::default()
                });
                id
            });
            here.insert(process);
            // Unknown bytes (NVML's "not available") are left out of the series.
            if let Some(bytes) = bytes {
                process_series
                    .entry((device, process))
                    .or_default()
                    .push(CounterSample { time_ns: *t, value: clamp(bytes) });
            }
        }
        // A process no longer listed holds nothing there.
        for ((d, process), samples) in &mut process_series {
            if *d == device && !here.contains(process) && samples.last().is_some_and(|s| s.value != 0) {
                samples.push(CounterSample { time_ns: *t, value: 0 });
            }
        }
    }
    let name = trace.interner.string(DEVICE_SERIES);
    for (device, samples) in device_series {
        trace.counters.push(CounterSeries {
            kind: CounterKind::DeviceUsed,
            name,
            device,
            process: ProcessId(0),
            samples,
        });
    }
    let name = trace.interner.string(PROCESS_SERIES);
    for ((device, process), samples) in process_series {
        trace.counters.push(CounterSeries { kind: CounterKind::DeviceUsed, name, device, process, samples });
    }
}

fn clamp(bytes: u64) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}
