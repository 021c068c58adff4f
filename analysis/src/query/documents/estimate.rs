//! `estimate`'s document: a program's GPU memory on a GPU it did not run on, from running it on
//! the emulated device (`vramscope estimate`), with what the estimate rests on.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Serialize;
use vramscope_trace_format::{Category, DeviceId, SourceFormat, Trace};

use super::{InfoDocument, SCHEMA_VERSION, summary_document};
use crate::query::gpus::Gpu;
use crate::query::units::{bytes, counted};
use crate::query::words;

/// The innermost frame the emulation gives memory a kernel takes for itself (its function names
/// what it is: `cuBLAS workspace`, `cuBLASLt workspace`).
pub const KERNEL_MEMORY_FILE: &str = "<cuda>";

/// A program's GPU memory on the GPU an estimate ran it on: `estimate --json`.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct EstimateDocument {
    /// The version of the documents' shape.
    pub schema_version: u32,
    /// The GPU the program ran on, emulated.
    pub target: Gpu,
    /// How many of them the program saw.
    pub gpus: u32,
    /// The command that ran.
    pub command: Vec<String>,
    /// How it ended, as the shell says (0: success; 128 + N: signal N).
    pub exit_code: i32,
    /// Whether every device's need fits in its memory.
    pub fits: bool,
    /// Memory outside PyTorch's allocator counted against each device: the CUDA context and the
    /// kernels it loads (assumed, not measured: `--context`).
    pub context_bytes: u64,
    /// Each device the program used.
    pub devices: Vec<EstimateDevice>,
    /// What the projection rests on, each with its bytes where it has some.
    pub rests_on: Vec<RestsOn>,
    /// Where the program read a value the emulated GPU could not give it (it got 0, or False).
    pub standins: Vec<Place>,
    /// What the projection does not model.
    pub not_modelled: Vec<String>,
    /// When it does not fit: the change that asks least and fits, in words (from the advisor,
    /// replaying the estimate's events).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub smallest_change_that_fits: Option<String>,
    /// Where the estimate's trace was written (every view opens it), if it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
    /// With `--sweep`: the program estimated at several sizes, the peak fitted over them, and the
    /// largest size that fits (this document is of the largest size tried that fits, else the
    /// smallest).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sweep: Option<Sweep>,
    /// The estimate's trace summed up, as `info --json` says it.
    pub summary: InfoDocument,
}

/// One device of an estimate.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct EstimateDevice {
    /// The device.
    pub device: DeviceId,
    /// The process's rank, in a run of several.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// The highest allocated, as `torch.cuda.max_memory_allocated()` would say on the GPU.
    pub peak_allocated_bytes: u64,
    /// The highest reserved by the caching allocator, as `torch.cuda.max_memory_reserved()`
    /// would say.
    pub peak_reserved_bytes: u64,
    /// Peak reserved and the context: what the device must hold for this process.
    pub needed_bytes: u64,
    /// The device's memory left over once every process on it has what it needs (negative:
    /// short by that much).
    pub headroom_bytes: i64,
    /// Whether it fits.
    pub fits: bool,
    /// What it needs and whether it fits, in words.
    pub verdict: String,
    /// The phase the peak is in (`backward of iteration 2`), when the trace shows phases.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase_at_peak: Option<String>,
    /// What was alive at the peak, by category.
    pub categories_at_peak: BTreeMap<Category, u64>,
}

/// The program estimated at several sizes (`--sweep batch=4,8,16`).
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Sweep {
    /// What was varied: `batch` or `sequence`.
    pub dimension: crate::advisor::scaling::Dimension,
    /// Each size, estimated.
    pub points: Vec<SweepPoint>,
    /// The reserved peak fitted over the sizes (the advisor's fit, as `advise --with` makes it),
    /// under the device's memory less the context.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fit: Option<crate::advisor::scaling::ScalingFit>,
    /// The fit in words, or why there is none.
    pub words: String,
    /// The largest size that fits: the fit's, once estimated at it and found to fit; else the
    /// largest size tried that fits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub largest_that_fits: Option<u64>,
}

/// One size of a sweep.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct SweepPoint {
    /// The size.
    pub size: u64,
    /// The highest peak allocated of any device.
    pub peak_allocated_bytes: u64,
    /// The highest peak reserved of any device.
    pub peak_reserved_bytes: u64,
    /// Whether every device fits.
    pub fits: bool,
    /// Whether this size was the fit's answer, estimated to check it.
    pub check: bool,
}

/// A thing an estimate rests on.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct RestsOn {
    /// What it is.
    pub what: String,
    /// Its bytes on each device, where it has some.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// How it is known, or what decides it.
    pub detail: String,
}

/// A place in the program.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Place {
    /// Its file.
    pub file: String,
    /// Its line.
    pub line: u32,
    /// Its function.
    pub function: String,
}

/// What is not modelled, in words.
const NOT_MODELLED: [&str; 3] = [
    "memory a CUDA kernel takes for itself beside its outputs, other than cuBLAS's workspaces \
     (a reduction's staging buffer, a sort's scratch): transient, freed within the operator",
    "CUDA graphs' private pools, and cuDNN's attention (PyTorch tries it last)",
    "other processes on the device",
];

/// What the estimate was of: the GPU, how many, the command, how it ended, the context assumed.
#[derive(Clone, Debug)]
pub struct Estimated {
    /// The GPU.
    pub target: Gpu,
    /// How many.
    pub gpus: u32,
    /// The command.
    pub command: Vec<String>,
    /// Its exit code.
    pub exit_code: i32,
    /// The context counted against each device.
    pub context_bytes: u64,
    /// Where the trace was written.
    pub trace: Option<String>,
}

/// The estimate's document, from its trace.
pub fn estimate_document(trace: &Trace, estimated: Estimated) -> EstimateDocument {
    let summary = summary_document(trace, SourceFormat::Vtrace, &[]);
    let counters = counters(trace);
    // A device's rows: one per process that used it (ranks each have their own).
    let mut rows: Vec<EstimateDevice> = Vec::new();
    let processes = trace.metadata.processes.len();
    if processes > 1 {
        for (index, process) in trace.metadata.processes.iter().enumerate() {
            let part = trace.of_process(vramscope_trace_format::ProcessId(index as u32));
            let part_summary = crate::query::summary(&part, SourceFormat::Vtrace, &[]);
            for d in part_summary.devices.iter().filter(|d| d.device.0 >= 0 && d.events > 0) {
                rows.push(row(d, process.pid, process.rank, &counters, &estimated));
            }
        }
    } else {
        let pid = trace.metadata.processes.first().and_then(|p| p.pid);
        for d in summary.summary.devices.iter().filter(|d| d.device.0 >= 0) {
            rows.push(row(d, pid, None, &counters, &estimated));
        }
    }
    // Processes that share a device share its memory: each one's need counts against it.
    let total = i64::try_from(estimated.target.total_memory_bytes).unwrap_or(i64::MAX);
    let mut used: BTreeMap<DeviceId, u64> = BTreeMap::new();
    for r in &rows {
        *used.entry(r.device).or_default() += r.needed_bytes;
    }
    for r in &mut rows {
        let on_device = used.get(&r.device).copied().unwrap_or(r.needed_bytes);
        r.headroom_bytes = total - i64::try_from(on_device).unwrap_or(i64::MAX);
        r.fits = r.headroom_bytes >= 0;
        r.verdict = words::estimate_verdict(on_device, estimated.target.total_memory_bytes, r.headroom_bytes);
    }
    EstimateDocument {
        schema_version: SCHEMA_VERSION,
        fits: !rows.is_empty() && rows.iter().all(|d| d.fits),
        rests_on: rests_on(trace, &estimated),
        standins: standins(trace),
        not_modelled: NOT_MODELLED.iter().map(|s| (*s).to_owned()).collect(),
        smallest_change_that_fits: None,
        target: estimated.target,
        gpus: estimated.gpus,
        command: estimated.command,
        exit_code: estimated.exit_code,
        context_bytes: estimated.context_bytes,
        trace: estimated.trace,
        sweep: None,
        devices: rows,
        summary,
    }
}

/// One device of one process.
fn row(
    d: &crate::summary::DeviceSummary,
    pid: Option<u32>,
    rank: Option<u32>,
    counters: &BTreeMap<(Option<u32>, DeviceId), (u64, u64)>,
    estimated: &Estimated,
) -> EstimateDevice {
    // The allocator's own counters (blocks as it sizes them), else the trace's replay.
    let (peak_allocated, peak_reserved) = counters
        .get(&(pid, d.device))
        .or_else(|| counters.get(&(None, d.device)))
        .copied()
        .unwrap_or((d.peak_allocated_bytes, d.peak_reserved_bytes));
    // The first phase to reach the highest high point.
    let highest = d.phases.phases.iter().fold(None, |best: Option<&crate::phases::PhaseHigh>, p| match best {
        Some(b) if b.high_bytes >= p.high_bytes => Some(b),
        _ => Some(p),
    });
    EstimateDevice {
        device: d.device,
        rank,
        peak_allocated_bytes: peak_allocated,
        peak_reserved_bytes: peak_reserved,
        needed_bytes: peak_reserved + estimated.context_bytes,
        headroom_bytes: 0,
        fits: false,
        verdict: String::new(),
        phase_at_peak: highest.map(|p| match p.kind {
            Some(kind) => format!("{} of iteration {}", words::phase_label(kind), p.iteration),
            None => format!("iteration {}", p.iteration),
        }),
        categories_at_peak: d.categories_at_peak.clone(),
    }
}

/// The emulated allocator's own peaks by process and device, as the shim wrote them at each
/// program's end (`None`: a log that did not say its process).
fn counters(trace: &Trace) -> BTreeMap<(Option<u32>, DeviceId), (u64, u64)> {
    let mut out = BTreeMap::new();
    for entry in trace.metadata.extra.get("estimate_counters").and_then(|v| v.as_array()).into_iter().flatten() {
        let number = |key: &str| entry.get(key).and_then(serde_json::Value::as_u64);
        let (Some(device), Some(allocated), Some(reserved)) =
            (number("device"), number("peak_allocated_bytes"), number("peak_reserved_bytes"))
        else {
            continue;
        };
        let Ok(device) = i16::try_from(device) else { continue };
        let pid = number("pid").and_then(|p| u32::try_from(p).ok());
        let slot = out.entry((pid, DeviceId(device))).or_insert((0, 0));
        *slot = (slot.0.max(allocated), slot.1.max(reserved));
    }
    out
}

/// The memory kernels took for themselves (blocks whose innermost frame is the emulation's),
/// by what it is: how many blocks and their bytes.
fn kernel_memory(trace: &Trace) -> BTreeMap<String, (usize, u64)> {
    let mut out: BTreeMap<String, (usize, u64)> = BTreeMap::new();
    for event in trace.events.iter().filter(|e| e.kind == vramscope_trace_format::EventKind::Alloc) {
        let Some(frame) = trace.interner.frames_of(event.stack).first().and_then(|&f| trace.interner.frame_of(f))
        else {
            continue;
        };
        if trace.interner.resolve(frame.file) != KERNEL_MEMORY_FILE {
            continue;
        }
        let slot = out.entry(trace.interner.resolve(frame.function).to_owned()).or_default();
        slot.0 += 1;
        slot.1 += event.size_bytes;
    }
    out
}

fn rests_on(trace: &Trace, estimated: &Estimated) -> Vec<RestsOn> {
    let conf = trace
        .metadata
        .allocator_settings
        .get("PYTORCH_CUDA_ALLOC_CONF")
        .and_then(|v| v.as_str())
        .filter(|c| !c.is_empty())
        .map(str::to_owned);
    let mut out = vec![
        RestsOn {
            what: format!(
                "{}, compute capability {}.{}",
                estimated.target.name, estimated.target.compute_capability.0, estimated.target.compute_capability.1
            ),
            bytes: Some(estimated.target.total_memory_bytes),
            detail: format!("its memory from {}", estimated.target.memory_from),
        },
        RestsOn {
            what: "PyTorch's CUDA caching allocator".to_owned(),
            bytes: None,
            detail: match conf {
                Some(conf) => format!("PYTORCH_CUDA_ALLOC_CONF={conf}"),
                None => "default settings (PYTORCH_CUDA_ALLOC_CONF unset): blocks rounded to 512 bytes, pools of \
                         small and large blocks, segments of 2 MiB, 20 MiB or the request"
                    .to_owned(),
            },
        },
    ];
    for (what, (blocks, total)) in kernel_memory(trace) {
        out.push(RestsOn {
            detail: format!(
                "{} kept for the process's life: one for each thread and stream that multiplies matrices ({} each)",
                counted(blocks, "block", "blocks"),
                bytes(total / blocks.max(1) as u64)
            ),
            what,
            bytes: Some(total),
        });
    }
    if let Some(chosen) = trace.metadata.extra.get("estimate_attention").and_then(|v| v.as_object()) {
        let parts: Vec<String> = chosen
            .iter()
            .map(|(backend, calls)| {
                let calls = calls.as_u64().unwrap_or(0) as usize;
                format!("{} ({})", attention_name(backend), counted(calls, "call", "calls"))
            })
            .collect();
        out.push(RestsOn {
            what: "the attention backend scaled_dot_product_attention picks".to_owned(),
            bytes: None,
            detail: format!(
                "{}: chosen as ATen chooses on compute capability {}.{} (dtype, head size, mask, what the program enabled)",
                parts.join(", "),
                estimated.target.compute_capability.0,
                estimated.target.compute_capability.1
            ),
        });
    }
    out.push(RestsOn {
        what: "the CUDA context and the kernels it loads".to_owned(),
        bytes: Some(estimated.context_bytes),
        detail: "outside PyTorch's allocator, not in its counters; assumed, not measured (--context)".to_owned(),
    });
    out
}

/// An attention backend as PyTorch's documentation names it.
fn attention_name(backend: &str) -> &str {
    match backend {
        "flash" => "flash attention",
        "efficient" => "memory-efficient attention",
        "math" => "the math backend (the attention matrix materialised)",
        other => other,
    }
}

fn standins(trace: &Trace) -> Vec<Place> {
    let Some(places) = trace.metadata.extra.get("estimate_standins").and_then(|v| v.as_array()) else {
        return Vec::new();
    };
    let mut seen = std::collections::BTreeSet::new();
    places
        .iter()
        .filter(|p| seen.insert((p.get("file").map(ToString::to_string), p.get("line").map(ToString::to_string))))
        .map(|p| Place {
            file: p.get("file").and_then(|v| v.as_str()).unwrap_or_default().to_owned(),
            line: p.get("line").and_then(serde_json::Value::as_u64).and_then(|l| u32::try_from(l).ok()).unwrap_or(0),
            function: p.get("function").and_then(|v| v.as_str()).unwrap_or_default().to_owned(),
        })
        .collect()
}
