//! What the PyTorch shim (`python/vramscope/_shim/vramscope_torch.py`) wrote: one `torch.<pid>.jsonl` per
//! process, JSON lines of tensor-level allocations, tags and phases on `CLOCK_MONOTONIC`, and how
//! they join the driver-level records in one trace ([`add_to_trace`]).
//!
//! On CUDA the shim drains the caching allocator's history: its blocks sit inside segments the
//! driver-level hook also saw. The driver's account of the segments is kept (it is what the
//! process really holds), the allocator's own segment events are dropped where the driver saw
//! the device, and a driver-level allocation inside one of the allocator's segments is not a block
//! of its own; one outside them is memory outside the framework (`non_framework`). On the CPU the
//! shim reads the profiler's allocation events: each block is also what the process holds from
//! the system, a segment of its own.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Deserialize;
use vramscope_trace_format::{
    Annotation, AnnotationKind, Category, DeviceId, Event, EventKind, Frame, FrameId, Oom, ProcessId, StackId, Tag,
    Trace, Unrecorded,
};

mod alive_before;
mod placement;

pub use self::placement::{Placement, placements};

/// The shim's files, written into the recording directory's `python/` folder, which `record`
/// puts first on `PYTHONPATH`.
pub const SHIM_FILES: [(&str, &str); 14] = [
    ("sitecustomize.py", include_str!("../../python/vramscope/_shim/sitecustomize.py")),
    ("vramscope_torch.py", include_str!("../../python/vramscope/_shim/vramscope_torch.py")),
    ("vramscope_patches.py", include_str!("../../python/vramscope/_shim/vramscope_patches.py")),
    ("vramscope_recorder.py", include_str!("../../python/vramscope/_shim/vramscope_recorder.py")),
    ("vramscope_log.py", include_str!("../../python/vramscope/_shim/vramscope_log.py")),
    ("vramscope_cuda.py", include_str!("../../python/vramscope/_shim/vramscope_cuda.py")),
    ("vramscope_cpu.py", include_str!("../../python/vramscope/_shim/vramscope_cpu.py")),
    ("vramscope_tags.py", include_str!("../../python/vramscope/_shim/vramscope_tags.py")),
    ("vramscope_phases.py", include_str!("../../python/vramscope/_shim/vramscope_phases.py")),
    ("vramscope_hooks.py", include_str!("../../python/vramscope/_shim/vramscope_hooks.py")),
    ("vramscope_oom.py", include_str!("../../python/vramscope/_shim/vramscope_oom.py")),
    ("vramscope_emulate.py", include_str!("../../python/vramscope/_shim/vramscope_emulate.py")),
    ("vramscope_allocator.py", include_str!("../../python/vramscope/_shim/vramscope_allocator.py")),
    ("vramscope_attention.py", include_str!("../../python/vramscope/_shim/vramscope_attention.py")),
];

/// One line of a shim log.
#[derive(Debug, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum Line {
    /// The process, its torch and where its allocations come from (`cuda` or `cpu`).
    Meta {
        /// Process id.
        pid: u32,
        /// `torch.__version__`.
        torch: String,
        /// `cuda`, `cpu`, or `driver` (tensors are the driver-level allocations).
        source: String,
        /// The distributed rank (`RANK`), when there is one.
        #[serde(default)]
        rank: Option<u32>,
        /// The ranks of the run (`WORLD_SIZE`), when there are.
        #[serde(default)]
        world_size: Option<u32>,
        /// Its node in a multi-node run (`GROUP_RANK`).
        #[serde(default)]
        node: Option<u32>,
        /// Its rank on its node (`LOCAL_RANK`).
        #[serde(default)]
        local_rank: Option<u32>,
        /// The host's name.
        #[serde(default)]
        host: Option<String>,
        /// Recorded inside the program (`vramscope.record()`), without the driver-level hook.
        #[serde(default)]
        in_process: bool,
        /// When recording began.
        #[serde(default)]
        time: Option<i64>,
        /// The program's `sys.argv`.
        #[serde(default)]
        argv: Vec<String>,
    },
    /// A Python frame, referred to by `id` in stacks.
    Frame {
        /// Id within this log.
        id: u64,
        /// Source file.
        file: String,
        /// Line number.
        line: u32,
        /// Function.
        name: String,
    },
    /// A tensor's block was allocated.
    Alloc(Block),
    /// A block's owner freed it; the allocator waits for its streams.
    FreeRequested(Block),
    /// A block is free.
    Free(Block),
    /// The allocator reserved a segment.
    SegmentAlloc(Block),
    /// The allocator released a segment.
    SegmentFree(Block),
    /// Memory mapped into an expandable segment.
    SegmentMap(Block),
    /// Memory unmapped from an expandable segment.
    SegmentUnmap(Block),
    /// An allocation failed.
    Oom {
        /// When.
        time: i64,
        /// Device.
        dev: DeviceId,
        /// Bytes asked for.
        size: u64,
        /// Free device memory then.
        #[serde(default)]
        free: u64,
    },
    /// What the block at an address is.
    Tag {
        /// When it was learnt.
        time: i64,
        /// Device (-1: CPU).
        dev: DeviceId,
        /// Storage data pointer.
        addr: u64,
        /// Category name.
        cat: String,
        /// Qualified name.
        name: String,
        /// The storage's bytes.
        #[serde(default)]
        size: Option<u64>,
    },
    /// The caching allocator's configuration string (`PYTORCH_CUDA_ALLOC_CONF`), as the program
    /// had it when torch was imported or set it later.
    AllocatorConf {
        /// `key:value` pairs separated by commas.
        conf: String,
    },
    /// The model's parameters' bytes by dtype (`float32`, `bfloat16`, ...), as last tagged.
    Dtypes {
        /// Bytes by dtype.
        parameters: BTreeMap<String, u64>,
        /// The model's linear and embedding layers: `[kind, module, weight, rows, columns,
        /// trainable]` each (what LoRA adapts; a head that could share the embedding's weight).
        #[serde(default)]
        layers: Vec<serde_json::Value>,
        /// Where the model was loaded from (`from_pretrained`), when it was: a fine-tune.
        #[serde(default)]
        pretrained: Option<String>,
    },
    /// Forward ran under autocast.
    Autocast {
        /// `cuda` or `cpu`.
        device_type: String,
        /// `bfloat16` or `float16`.
        dtype: String,
    },
    /// A model's forward ran with autograd recording its graph (not under `no_grad` or
    /// `inference_mode`).
    GradMode {
        /// Always true: written when it is.
        enabled: bool,
    },
    /// How a batch a DataLoader gave was padded (from its `attention_mask`).
    Padding {
        /// When.
        time: i64,
        /// Its length (tokens per row, padding included).
        padded: u64,
        /// Its longest row without the padding.
        longest: u64,
    },
    /// A stretch in which the process's tensor allocations were not recorded (the CPU profiler
    /// was off: the program's own profiler ran, or it could not be restarted safely yet).
    Gap {
        /// Device (-1: CPU).
        dev: DeviceId,
        /// From.
        begin: i64,
        /// To (the process's end, when it never came back).
        end: i64,
        /// `own_profiler`, `open_ranges` or `unsafe`.
        why: String,
        /// What was open, for `open_ranges` and `unsafe`.
        #[serde(default)]
        detail: String,
    },
    /// `vramscope estimate`: the attention backend `scaled_dot_product_attention` chose on the
    /// emulated GPU, and how many calls chose it.
    Attention {
        /// `flash`, `efficient` or `math`.
        backend: String,
        /// How many calls.
        calls: u64,
    },
    /// `vramscope estimate`: where the program read a value the emulated GPU could not give it
    /// (it got a stand-in), once per place.
    Standin {
        /// Source file.
        file: String,
        /// Line number.
        line: u32,
        /// Function.
        name: String,
    },
    /// `vramscope estimate`: the emulated caching allocator's own peaks on a device, at the
    /// program's end (what `torch.cuda.max_memory_allocated()` and `max_memory_reserved()` said).
    Counters {
        /// Device.
        dev: DeviceId,
        /// The highest allocated, blocks as the allocator sizes them.
        peak_allocated: u64,
        /// The highest reserved.
        peak_reserved: u64,
    },
    /// A phase or a module's forward.
    Span {
        /// `forward`, `backward`, `optimizer_step`, `iteration` or `module`.
        kind: String,
        /// Its name.
        name: String,
        /// Start.
        begin: i64,
        /// End.
        end: i64,
    },
}

/// A block or segment event.
#[derive(Debug, Deserialize)]
pub struct Block {
    /// When (ns, `CLOCK_MONOTONIC`).
    pub time: i64,
    /// Device (-1: CPU).
    pub dev: DeviceId,
    /// Address.
    pub addr: u64,
    /// Bytes.
    pub size: u64,
    /// Stream.
    #[serde(default)]
    pub stream: u64,
    /// Frame ids, innermost first.
    #[serde(default)]
    pub stack: Vec<u64>,
    /// The operator it was allocated in (CPU profiler).
    #[serde(default)]
    pub op: Option<String>,
}

/// The lines of one process's log.
#[derive(Debug)]
pub struct Log {
    /// The process (from the file name).
    pub pid: u32,
    /// Its lines, in file order.
    pub lines: Vec<Line>,
    /// Lines that could not be read (a cut-short last line, or a kind this version does not know).
    pub skipped: usize,
}

fn category(name: &str) -> Option<Category> {
    Category::ALL.into_iter().find(|c| c.name() == name)
}

/// The span kinds the shim writes: the phases and module spans.
fn annotation_kind(kind: &str) -> Option<AnnotationKind> {
    // An evaluation (validation inside a training run) is a range named so.
    if kind == "evaluation" {
        return Some(AnnotationKind::UserRange);
    }
    AnnotationKind::from_name(kind).filter(|k| k.is_phase() || *k == AnnotationKind::Module)
}

/// Address ranges, for "is this address inside one of them".
#[derive(Default)]
struct Ranges(Vec<(u64, u64)>);

impl Ranges {
    fn contains(&self, address: u64) -> bool {
        let i = self.0.partition_point(|&(start, _)| start <= address);
        i > 0 && self.0.get(i - 1).is_some_and(|&(start, size)| address < start.saturating_add(size))
    }
}

/// What merging the shims' logs collects before it changes the trace.
#[derive(Default)]
struct Merging {
    /// The framework's segments, per process and device.
    framework_segments: HashMap<(ProcessId, DeviceId), Ranges>,
    /// Events to add.
    added: Vec<Event>,
    /// OOMs the framework's allocator reported.
    framework_ooms: Vec<Oom>,
}

/// What the recorder saw of the model: its parameters' bytes by dtype, its linear and
/// embedding layers, and where it was loaded from.
fn add_model(
    trace: &mut Trace,
    parameters: &BTreeMap<String, u64>,
    layers: &[serde_json::Value],
    pretrained: Option<&str>,
) {
    let extra = &mut trace.metadata.extra;
    extra.insert("parameter_dtypes".to_owned(), serde_json::json!(parameters));
    if !layers.is_empty() {
        extra.insert("model_layers".to_owned(), serde_json::Value::Array(layers.to_vec()));
    }
    if let Some(name) = pretrained {
        extra.insert("pretrained".to_owned(), name.into());
    }
}

/// What a line says of the whole run, into the trace's metadata: the allocator's settings, the
/// model, its grad mode and autocast, how its batches were padded.
fn add_run_line(trace: &mut Trace, line: &Line) {
    match line {
        Line::AllocatorConf { conf } => {
            // Later settings override earlier ones pair by pair: the string keeps them in order.
            let settings = &mut trace.metadata.allocator_settings;
            let before = settings.get("PYTORCH_CUDA_ALLOC_CONF").and_then(|v| v.as_str()).unwrap_or("");
            let joined = if before.is_empty() { conf.clone() } else { format!("{before},{conf}") };
            *settings = serde_json::json!({ "PYTORCH_CUDA_ALLOC_CONF": joined });
        }
        Line::Dtypes { parameters, layers, pretrained } => add_model(trace, parameters, layers, pretrained.as_deref()),
        Line::GradMode { enabled } => {
            trace.metadata.extra.insert("forward_with_grad".to_owned(), (*enabled).into());
        }
        Line::Padding { time, padded, longest } => add_padding(trace, *time, *padded, *longest),
        Line::Autocast { device_type, dtype } => {
            trace.metadata.extra.insert("autocast".to_owned(), format!("{device_type}:{dtype}").into());
        }
        _ => {}
    }
}

/// The batches a trace keeps the padding of; past them, only the most padded length's longest.
const MAX_PADDED_BATCHES: usize = 65_536;

/// A batch's padding, in `metadata.extra`: `batch_padding` (`[time, padded, longest]` each, the
/// first [`MAX_PADDED_BATCHES`]), `batch_padding_count` (all of them) and `batch_padding_most`
/// (the batch whose longest row fills its length most, `[padded, longest]`, over all of them).
fn add_padding(trace: &mut Trace, time: i64, padded: u64, longest: u64) {
    let extra = &mut trace.metadata.extra;
    let list = extra.entry("batch_padding").or_insert_with(|| serde_json::Value::Array(Vec::new()));
    if let Some(rows) = list.as_array_mut()
        && rows.len() < MAX_PADDED_BATCHES
    {
        rows.push(serde_json::json!([time, padded, longest]));
    }
    let count = extra.get("batch_padding_count").and_then(serde_json::Value::as_u64).unwrap_or(0);
    extra.insert("batch_padding_count".to_owned(), (count + 1).into());
    let fill = |p: u64, l: u64| l as f64 / p.max(1) as f64;
    let most = extra.get("batch_padding_most").and_then(|v| Some((v.get(0)?.as_u64()?, v.get(1)?.as_u64()?)));
    if most.is_none_or(|(p, l)| fill(padded, longest) > fill(p, l)) {
        extra.insert("batch_padding_most".to_owned(), serde_json::json!([padded, longest]));
    }
}

/// One process's log: tags, spans, frames and OOMs go to the trace; block and segment events
/// are collected in `m` (where the driver saw a device, its account of the segments stands).
fn add_log(
    trace: &mut Trace,
    log: &Log,
    process: ProcessId,
    driver_devices: &HashSet<(ProcessId, DeviceId)>,
    m: &mut Merging,
) {
    let cpu = log.lines.iter().any(|l| matches!(l, Line::Meta { source, .. } if source == "cpu"));
    let mut frames: HashMap<u64, FrameId> = HashMap::new();
    let mut op_stacks: HashMap<String, StackId> = HashMap::new();
    let mut live_cpu: HashMap<u64, u64> = HashMap::new();
    // The allocator's history is in the order things happened, but its clock is approximate
    // and can step back by a microsecond: times are kept from going back, so that sorting
    // by time never puts a free before its allocation.
    let mut latest: HashMap<DeviceId, i64> = HashMap::new();
    for line in &log.lines {
        let (kind, block) = match line {
            Line::Meta { .. } => continue,
            Line::AllocatorConf { .. }
            | Line::Dtypes { .. }
            | Line::GradMode { .. }
            | Line::Padding { .. }
            | Line::Autocast { .. } => {
                add_run_line(trace, line);
                continue;
            }
            Line::Counters { .. } | Line::Attention { .. } | Line::Standin { .. } => {
                add_estimate_line(trace, log.pid, line);
                continue;
            }
            Line::Frame { id, file, line, name } => {
                let frame =
                    Frame { function: trace.interner.string(name), file: trace.interner.string(file), line: *line };
                frames.insert(*id, trace.interner.frame(frame));
                continue;
            }
            Line::Tag { time, dev, addr, cat, name, .. } => {
                if let Some(category) = category(cat) {
                    let name = trace.interner.string(name);
                    trace.tags.push(Tag { time_ns: *time, device: *dev, process, address: *addr, category, name });
                }
                continue;
            }
            Line::Gap { dev, begin, end, why, detail } => {
                trace.metadata.unrecorded.push(Unrecorded {
                    process: process.0,
                    device: *dev,
                    begin_ns: *begin,
                    end_ns: (*end).max(*begin),
                    why: why.clone(),
                    detail: detail.clone(),
                });
                continue;
            }
            Line::Span { kind, name, begin, end } => {
                if let Some(kind) = annotation_kind(kind) {
                    let name = trace.interner.string(name);
                    trace.annotations.push(Annotation {
                        kind,
                        device: None,
                        process,
                        start_ns: *begin,
                        end_ns: (*end).max(*begin),
                        name,
                        stack: StackId(0),
                    });
                }
                continue;
            }
            Line::Oom { time, dev, size, free } => {
                m.framework_ooms.push(Oom {
                    time_ns: *time,
                    device: *dev,
                    process,
                    stream: 0,
                    requested_bytes: *size,
                    device_free_bytes: Some(*free),
                    stack: StackId(0),
                });
                continue;
            }
            Line::Alloc(b) => (EventKind::Alloc, b),
            Line::FreeRequested(b) => (EventKind::FreeRequested, b),
            Line::Free(b) => (EventKind::FreeCompleted, b),
            Line::SegmentAlloc(b) => (EventKind::SegmentAlloc, b),
            Line::SegmentFree(b) => (EventKind::SegmentFree, b),
            Line::SegmentMap(b) => (EventKind::SegmentMap, b),
            Line::SegmentUnmap(b) => (EventKind::SegmentUnmap, b),
        };
        let stack = match &block.op {
            Some(op) => *op_stacks.entry(op.clone()).or_insert_with(|| {
                let frame = Frame { function: trace.interner.string(op), file: trace.interner.string(""), line: 0 };
                let frame = trace.interner.frame(frame);
                trace.interner.stack(&[frame])
            }),
            None if block.stack.is_empty() => StackId(0),
            None => {
                let ids: Vec<FrameId> = block.stack.iter().filter_map(|id| frames.get(id).copied()).collect();
                trace.interner.stack(&ids)
            }
        };
        let time_ns = {
            let latest = latest.entry(block.dev).or_insert(i64::MIN);
            *latest = (*latest).max(block.time);
            *latest
        };
        let mut event = Event::new(kind, time_ns, block.dev, block.addr, block.size);
        event.process = process;
        event.stream = block.stream.into();
        event.stack = stack;
        if cpu && block.dev.is_host() {
            // CPU memory: each block is what the process holds from the system, too.
            match kind {
                EventKind::Alloc => {
                    // The profiler misses frees made on threads it does not follow (a
                    // communication library's, say): a new block at a live address means the
                    // old one was freed.
                    if let Some(size) = live_cpu.insert(block.addr, block.size) {
                        let free = Event { kind: EventKind::FreeCompleted, size_bytes: size, slack_bytes: 0, ..event };
                        m.added.push(free);
                        m.added.push(Event { kind: EventKind::SegmentFree, ..free });
                    }
                    m.added.push(Event { kind: EventKind::SegmentAlloc, ..event });
                    m.added.push(event);
                }
                EventKind::FreeCompleted => {
                    let size = live_cpu.remove(&block.addr).unwrap_or(block.size);
                    let free = Event { size_bytes: size, slack_bytes: 0, ..event };
                    m.added.push(free);
                    m.added.push(Event { kind: EventKind::SegmentFree, ..free });
                }
                _ => {}
            }
            continue;
        }
        if matches!(kind, EventKind::SegmentAlloc | EventKind::SegmentMap) {
            m.framework_segments.entry((process, block.dev)).or_default().0.push((block.addr, block.size));
        }
        let segment_event = matches!(
            kind,
            EventKind::SegmentAlloc | EventKind::SegmentFree | EventKind::SegmentMap | EventKind::SegmentUnmap
        );
        // Where the driver saw this device, its account of the segments stands.
        if segment_event && driver_devices.contains(&(process, block.dev)) {
            continue;
        }
        m.added.push(event);
    }
    if let Some(began) = log.lines.iter().find_map(|l| match l {
        Line::Meta { in_process: true, time, .. } => Some(time.unwrap_or(i64::MIN)),
        _ => None,
    }) {
        alive_before::add(log, process, began, m);
    }
}

/// Adds the shims' logs to a trace that holds the driver-level events (`processes` maps the pids
/// seen so far to the trace's process ids and takes new ones). Returns the distributed rank of
/// each pid that has one.
pub fn add_to_trace(trace: &mut Trace, logs: &[Log], processes: &mut BTreeMap<u32, ProcessId>) -> HashMap<u32, u32> {
    let ranks: HashMap<u32, u32> = logs
        .iter()
        .filter_map(|log| {
            log.lines.iter().find_map(|l| match l {
                Line::Meta { rank: Some(rank), .. } => Some((log.pid, *rank)),
                _ => None,
            })
        })
        .collect();
    // The run's ranks, as its processes were told them: a rank's own trace keeps the count.
    let world = logs
        .iter()
        .flat_map(|log| &log.lines)
        .filter_map(|l| match l {
            Line::Meta { world_size: Some(w), .. } => Some(*w),
            _ => None,
        })
        .max();
    if let Some(world) = world.filter(|&w| w > 1) {
        trace.metadata.extra.insert("world_size".to_owned(), world.into());
    }
    // Devices on which the driver-level hook saw segments, per process.
    let driver_devices: HashSet<(ProcessId, DeviceId)> = trace
        .events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::SegmentAlloc | EventKind::SegmentMap))
        .map(|e| (e.process, e.device))
        .collect();
    let mut m = Merging::default();
    for log in logs {
        let next = ProcessId(processes.len() as u32);
        let process = *processes.entry(log.pid).or_insert(next);
        add_log(trace, log, process, &driver_devices, &mut m);
    }
    // A process whose PyTorch works on the host (the shim's CPU source) allocates on a GPU only
    // around PyTorch (an engine's own allocator, a library called through ctypes): all of it is
    // outside the framework.
    let host_torch: HashSet<ProcessId> = logs
        .iter()
        .filter(|log| log.lines.iter().any(|l| matches!(l, Line::Meta { source, .. } if source == "cpu")))
        .filter_map(|log| processes.get(&log.pid).copied())
        .collect();
    let Merging { mut framework_segments, mut added, framework_ooms } = m;
    let no_framework_there: HashSet<(ProcessId, DeviceId)> = driver_devices
        .iter()
        .filter(|(p, d)| host_torch.contains(p) && !d.is_host() && !framework_segments.contains_key(&(*p, *d)))
        .copied()
        .collect();
    for ranges in framework_segments.values_mut() {
        ranges.0.sort_unstable();
    }
    // A driver-level allocation inside the framework's segments is one of those segments, not a
    // block; one outside them is memory outside the framework.
    let mut outside: Vec<Tag> = Vec::new();
    let non_framework = trace.interner.string("outside the framework's allocator");
    trace.events.retain(|e| {
        let inside = match framework_segments.get(&(e.process, e.device)) {
            Some(ranges) => ranges.contains(e.address),
            None if no_framework_there.contains(&(e.process, e.device)) => false,
            None => return true,
        };
        match e.kind {
            EventKind::Alloc | EventKind::FreeCompleted if inside => false,
            EventKind::Alloc => {
                outside.push(Tag {
                    time_ns: e.time_ns,
                    device: e.device,
                    process: e.process,
                    address: e.address,
                    category: Category::NonFramework,
                    name: non_framework,
                });
                true
            }
            _ => true,
        }
    });
    trace.tags.extend(outside);
    // A failed cudaMalloc that the framework's allocator recovered from (by freeing its cache)
    // is not an OOM of the program: where the allocator's history is recorded, its own OOM
    // entries stand.
    trace.ooms.retain(|o| !framework_segments.contains_key(&(o.process, o.device)));
    trace.ooms.extend(framework_ooms);
    trace.ooms.sort_by_key(|o| o.time_ns);
    // Blocks the allocator's history gives no Python frame for were allocated on autograd's own
    // threads when that happened during backward: say so, rather than "no stack".
    let mut backward: Vec<(ProcessId, i64, i64)> = trace
        .annotations
        .iter()
        .filter(|a| a.kind == AnnotationKind::Backward)
        .map(|a| (a.process, a.start_ns, a.end_ns))
        .collect();
    backward.sort_unstable();
    if !backward.is_empty() {
        let function = trace.interner.string("autograd engine (backward; no Python frames)");
        // A file of its own, in angle brackets as Python names what is not a file: the function
        // is words, which a native frame's name (file-less) would be cut down from.
        let file = trace.interner.string("<autograd>");
        let frame = trace.interner.frame(Frame { function, file, line: 0 });
        let engine = trace.interner.stack(&[frame]);
        for e in added.iter_mut().filter(|e| e.kind == EventKind::Alloc && e.stack == StackId(0) && !e.device.is_host())
        {
            let i = backward.partition_point(|b| (b.0, b.1) <= (e.process, e.time_ns));
            if i.checked_sub(1).and_then(|i| backward.get(i)).is_some_and(|b| b.0 == e.process && b.2 >= e.time_ns) {
                e.stack = engine;
            }
        }
    }
    trace.events.extend(added);
    trace.events.sort_by_key(|e| e.time_ns);
    trace.tags.sort_by_key(|t| t.time_ns);
    trace.annotations.sort_by_key(Annotation::order);
    ranks
}

/// `vramscope estimate`'s lines, into the trace's metadata: the emulated allocator's own peaks
/// (`estimate_counters`), the attention backends chosen (`estimate_attention`) and where the
/// program read values it was given stand-ins for (`estimate_standins`).
fn add_estimate_line(trace: &mut Trace, pid: u32, line: &Line) {
    let extra = &mut trace.metadata.extra;
    match line {
        Line::Counters { dev, peak_allocated, peak_reserved } => {
            let all = extra.entry("estimate_counters").or_insert_with(|| serde_json::json!([]));
            if let Some(all) = all.as_array_mut() {
                all.push(serde_json::json!({
                    "device": dev.0,
                    "pid": pid,
                    "peak_allocated_bytes": peak_allocated,
                    "peak_reserved_bytes": peak_reserved,
                }));
            }
        }
        Line::Attention { backend, calls } => {
            let all = extra.entry("estimate_attention").or_insert_with(|| serde_json::json!({}));
            if let Some(all) = all.as_object_mut() {
                let before = all.get(backend).and_then(serde_json::Value::as_u64).unwrap_or(0);
                all.insert(backend.clone(), (before + calls).into());
            }
        }
        Line::Standin { file, line, name } => {
            let places = extra.entry("estimate_standins").or_insert_with(|| serde_json::json!([]));
            if let Some(places) = places.as_array_mut() {
                places.push(serde_json::json!({ "file": file, "line": line, "function": name }));
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests;
