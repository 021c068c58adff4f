//! `vramscope estimate -- CMD ARGS...`: a program's GPU memory on a GPU it does not run on. The
//! program runs here, unchanged, on the emulated GPU (`vramscope_collector::session::estimate`):
//! its tensors have no storage, its CUDA calls answer as the GPU would, and it is recorded as on
//! the GPU. The answer is the estimate's document (`EstimateDocument`), said in words or as JSON.

use std::ffi::OsString;
use std::io::Write;
use std::path::Path;

use anyhow::{Result, bail};
use vramscope_collector::session;
use vramscope_trace_format::{DeviceId, DeviceInfo};

use super::To;
use crate::query::advisor::scaling::Dimension;
use crate::query::documents::{Document, EstimateDocument, Estimated, Sweep, SweepPoint, estimate_document};
use crate::query::gpus::{Gpu, gpu, gpu_names};
use crate::units::bytes;

/// The GPU an estimate runs on when none is named.
pub const DEFAULT_GPU: &str = "h100";
/// The CUDA context and the kernels it loads, counted against the device unless `--context`
/// says otherwise: what a CUDA 12 or 13 process with lazy module loading typically holds
/// before its first tensor (an assumption, said as one wherever it is used).
pub const DEFAULT_CONTEXT_BYTES: u64 = 512 << 20;

/// What `estimate` is asked.
#[derive(Clone, Debug)]
pub struct Options<'a> {
    /// The GPU by name (`H100`, `a100-40gb`), else [`DEFAULT_GPU`].
    pub gpu: Option<&'a str>,
    /// Its memory instead of the table's (or, with no name, a GPU of this memory).
    pub device_memory: Option<u64>,
    /// How many GPUs the program sees.
    pub gpus: u32,
    /// Where to write the estimate's trace.
    pub output: Option<&'a Path>,
    /// Replace the output if it exists.
    pub force: bool,
    /// The CUDA context counted against each device.
    pub context_bytes: u64,
    /// One JSON object instead of text.
    pub json: bool,
    /// Estimate at each size (`--sweep batch=4,8,16`), the size where the command has its
    /// placeholder (`{batch}`, `{seq}`).
    pub sweep: Option<(Dimension, Vec<u64>)>,
}

/// Exit statuses: the estimate fits, it does not, or none could be made.
pub const EXIT_FITS: i32 = 0;
/// It does not fit.
pub const EXIT_DOES_NOT_FIT: i32 = 1;
/// No estimate: the program failed, or put nothing on the GPU.
pub const EXIT_NO_ESTIMATE: i32 = 2;

/// The GPU `options` name.
pub fn target(options: &Options<'_>) -> Result<Gpu> {
    let name = options.gpu.unwrap_or(DEFAULT_GPU);
    let Some(mut found) = gpu(name) else {
        bail!(
            "--gpu {name}: not a GPU vramscope knows ({}); give its memory with --device-memory",
            gpu_names().join(", ")
        );
    };
    if let Some(memory) = options.device_memory {
        if options.gpu.is_none() {
            found.name = format!("a GPU of {} (the compute capability of an {})", bytes(memory), found.name);
        }
        found.total_memory_bytes = memory;
        found.memory_from = "--device-memory".to_owned();
    }
    Ok(found)
}

/// Runs the estimate of `command` and says it to `out`; returns the exit status
/// ([`EXIT_FITS`], [`EXIT_DOES_NOT_FIT`], [`EXIT_NO_ESTIMATE`]).
pub fn run(options: &Options<'_>, command: &[OsString], out: &mut dyn Write) -> Result<i32> {
    answer(options, command, &mut To::new(options.json, out))
}

/// [`run`], its document given `to` a writer or a keeper.
pub fn answer(options: &Options<'_>, command: &[OsString], to: &mut To<'_>) -> Result<i32> {
    if command.is_empty() {
        bail!("nothing to estimate: give the command after --, e.g. vramscope estimate --gpu H100 -- python train.py");
    }
    let target = target(options)?;
    if let Some(output) = options.output {
        if options.sweep.is_some() {
            bail!("--sweep estimates the program several times, and -o keeps one trace: leave one of them out");
        }
        crate::atomic::check_writable(output, options.force)?;
    }
    // With a document on standard output, the program's own output goes to standard error;
    // kept (the MCP server), its standard input is the protocol's too.
    let quiet = (!matches!(to, To::Text(_)), matches!(to, To::Keep(_)));
    let (doc, code) = match &options.sweep {
        None => once(options, &target, command, quiet)?,
        Some((dimension, sizes)) => sweep(options, &target, command, quiet, *dimension, sizes)?,
    };
    if let Some(out) = to.document(Document::Estimate(&doc))? {
        write_text(&doc, out)?;
    }
    Ok(if code != 0 {
        EXIT_NO_ESTIMATE
    } else if doc.fits || doc.sweep.as_ref().is_some_and(|s| s.largest_that_fits.is_some()) {
        EXIT_FITS
    } else {
        EXIT_DOES_NOT_FIT
    })
}

/// One estimate of `command`: its document and the program's exit code.
fn once(
    options: &Options<'_>,
    target: &Gpu,
    command: &[OsString],
    quiet: (bool, bool),
) -> Result<(EstimateDocument, i32)> {
    let Some((program, args)) = command.split_first() else {
        bail!("nothing to estimate");
    };
    let spec = serde_json::json!({
        "name": target.name,
        "total_memory": target.total_memory_bytes,
        "major": target.compute_capability.0,
        "minor": target.compute_capability.1,
        "multi_processor_count": target.multiprocessors,
        "count": options.gpus,
    });
    let facts = (0..options.gpus)
        .filter_map(|i| {
            Some(DeviceInfo {
                device: DeviceId(i16::try_from(i).ok()?),
                name: Some(format!("{}, estimated", target.name)),
                total_memory_bytes: Some(target.total_memory_bytes),
                ..DeviceInfo::default()
            })
        })
        .collect();
    let (stdout_to_stderr, no_stdin) = quiet;
    let device = session::Emulated { spec: spec.to_string(), count: options.gpus, facts, stdout_to_stderr, no_stdin };
    let mut recording = session::estimate(program, args, &device, options.output, None, |_| {})?;
    for note in &recording.notes {
        eprintln!("vramscope: {note}");
    }
    recording.trace.metadata.extra.insert("estimate".to_owned(), spec);
    let code = session::exit_code(recording.status);
    let trace = &recording.trace;
    if let Some(output) = options.output {
        crate::vtrace_out::write_vtrace(trace, output, options.force)?;
    }
    let estimated = Estimated {
        target: target.clone(),
        gpus: options.gpus,
        command: session::command_line(program, args),
        exit_code: code,
        context_bytes: options.context_bytes,
        trace: options.output.map(|p| p.display().to_string()),
    };
    let mut doc = estimate_document(trace, estimated);
    if doc.devices.is_empty() {
        let why = if code == 0 {
            "it put nothing on the GPU (does it use CUDA? `device = \"cuda\"`, `.to(\"cuda\")`)".to_owned()
        } else {
            format!("it exited with status {code} before putting anything on the GPU (its error is above)")
        };
        bail!("no estimate for {}: {why}", doc.command.join(" "));
    }
    if !doc.fits {
        doc.smallest_change_that_fits = smallest_change(trace, &doc);
    }
    Ok((doc, code))
}

/// The placeholder `--sweep` puts each size in, for `dimension`.
pub fn placeholder(dimension: Dimension) -> &'static str {
    match dimension {
        Dimension::Batch => "{batch}",
        Dimension::Sequence => "{seq}",
    }
}

/// Reads `--sweep`'s value: `batch=4,8,16` or `seq=512,1024,2048`.
pub fn parse_sweep(text: &str) -> std::result::Result<(Dimension, Vec<u64>), String> {
    let (name, sizes) = text.split_once('=').ok_or("give the size and its values: batch=4,8,16 or seq=512,1024")?;
    let dimension = match name.trim() {
        "batch" => Dimension::Batch,
        "seq" | "seq_len" | "sequence" => Dimension::Sequence,
        other => return Err(format!("{other:?} is not a size to sweep: batch or seq")),
    };
    let sizes: Vec<u64> = sizes
        .split(',')
        .map(|s| s.trim().parse::<u64>().ok().filter(|&n| n > 0).ok_or(format!("{s:?} is not a size")))
        .collect::<std::result::Result<_, _>>()?;
    if sizes.len() < 2 {
        return Err("give two sizes or more, to fit how the peak grows".to_owned());
    }
    Ok((dimension, sizes))
}

/// The command with `size` where its placeholder is.
fn sized(command: &[OsString], dimension: Dimension, size: u64) -> Vec<OsString> {
    let mark = placeholder(dimension);
    command.iter().map(|a| OsString::from(a.to_string_lossy().replace(mark, &size.to_string()))).collect()
}

/// The estimate at each size, the peak fitted over them, and the fit's largest size that fits,
/// estimated to check it: the document of the largest size that fits (else the smallest), with
/// the sweep.
fn sweep(
    options: &Options<'_>,
    target: &Gpu,
    command: &[OsString],
    quiet: (bool, bool),
    dimension: Dimension,
    sizes: &[u64],
) -> Result<(EstimateDocument, i32)> {
    let mark = placeholder(dimension);
    if !command.iter().any(|a| a.to_string_lossy().contains(mark)) {
        bail!(
            "--sweep {}: put {mark} in the command where the size goes, e.g. -- python train.py --batch-size {mark}",
            if dimension == Dimension::Batch { "batch" } else { "seq" }
        );
    }
    let point = |size: u64, doc: &EstimateDocument, check: bool| SweepPoint {
        size,
        peak_allocated_bytes: doc.devices.iter().map(|d| d.peak_allocated_bytes).max().unwrap_or(0),
        peak_reserved_bytes: doc.devices.iter().map(|d| d.peak_reserved_bytes).max().unwrap_or(0),
        fits: doc.fits,
        check,
    };
    let mut points = Vec::new();
    let mut docs = Vec::new();
    let mut sorted = sizes.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    for &size in &sorted {
        eprintln!("vramscope: estimating at {mark} = {size}");
        let (doc, code) = once(options, target, &sized(command, dimension, size), quiet)?;
        if code != 0 {
            return Ok((doc, code));
        }
        points.push(point(size, &doc, false));
        docs.push((size, doc));
    }
    let room = target.total_memory_bytes.saturating_sub(options.context_bytes);
    let fitted: Vec<(u64, u64)> =
        points.iter().map(|p| (p.size, p.peak_reserved_bytes.max(p.peak_allocated_bytes))).collect();
    let fit = crate::query::advisor::scaling::fit(dimension, &fitted, room);
    let words = match &fit {
        Ok(f) => crate::words::scaling_fit(f),
        Err(e) => format!("no fit: {e}"),
    };
    let mut largest = points.iter().filter(|p| p.fits).map(|p| p.size).max();
    if let Some(answer) = fit.as_ref().ok().and_then(|f| f.largest_that_fits).filter(|n| !sorted.contains(n)) {
        eprintln!("vramscope: estimating at {mark} = {answer}, the fit's largest that fits, to check it");
        let (doc, code) = once(options, target, &sized(command, dimension, answer), quiet)?;
        if code == 0 {
            let checked = point(answer, &doc, true);
            if checked.fits && largest.is_none_or(|l| answer > l) {
                largest = Some(answer);
                docs.push((answer, doc));
            }
            points.push(checked);
        }
    }
    points.sort_by_key(|p| p.size);
    let chosen = largest.or_else(|| sorted.first().copied());
    let index = docs.iter().position(|(size, _)| Some(*size) == chosen).unwrap_or(0);
    let (_, mut doc) = docs.swap_remove(index);
    doc.sweep = Some(Sweep { dimension, points, fit: fit.ok(), words, largest_that_fits: largest });
    Ok((doc, 0))
}

/// The advisor's smallest change that fits the device (less the context), for the device short
/// by the most.
fn smallest_change(trace: &vramscope_trace_format::Trace, doc: &EstimateDocument) -> Option<String> {
    let worst = doc.devices.iter().min_by_key(|d| d.headroom_bytes)?;
    let target = doc.target.total_memory_bytes.saturating_sub(doc.context_bytes);
    let advice = crate::query::advice(trace, Some(worst.device), Some(doc.gpus), Some(target))?;
    crate::words::smallest_change(&advice)
}

/// The document in words.
fn write_text(doc: &EstimateDocument, out: &mut dyn Write) -> Result<()> {
    let target = &doc.target;
    writeln!(
        out,
        "vramscope estimate: {} on {}{} ({}, compute capability {}.{}), emulated",
        doc.command.join(" "),
        if doc.gpus > 1 { format!("{} x ", doc.gpus) } else { String::new() },
        target.name,
        bytes(target.total_memory_bytes),
        target.compute_capability.0,
        target.compute_capability.1
    )?;
    if doc.exit_code != 0 {
        writeln!(out, "  the program exited with status {}: what follows is what it ran until then", doc.exit_code)?;
    }
    for d in &doc.devices {
        match d.rank {
            Some(rank) => writeln!(out, "\ncuda:{} (rank {rank})", d.device.0)?,
            None => writeln!(out, "\ncuda:{}", d.device.0)?,
        }
        writeln!(
            out,
            "  peak allocated  {}  (torch.cuda.max_memory_allocated() on the GPU)",
            bytes(d.peak_allocated_bytes)
        )?;
        writeln!(out, "  peak reserved   {}  (torch.cuda.max_memory_reserved())", bytes(d.peak_reserved_bytes))?;
        writeln!(out, "  {}", d.verdict)?;
        let parts = super::info::category_shares(&d.categories_at_peak);
        let phase = d.phase_at_peak.as_ref().map_or_else(String::new, |p| format!(" in {p}"));
        writeln!(out, "  at the peak{phase}: {}", parts.join(", "))?;
    }
    if let Some(change) = &doc.smallest_change_that_fits {
        writeln!(out, "\n{change}")?;
    }
    if let Some(sweep) = &doc.sweep {
        writeln!(out, "\nestimated at each {}", placeholder(sweep.dimension))?;
        for p in &sweep.points {
            writeln!(
                out,
                "  {:>8}  peak allocated {:>10}, reserved {:>10}{}{}",
                p.size,
                bytes(p.peak_allocated_bytes),
                bytes(p.peak_reserved_bytes),
                if p.fits { "  fits" } else { "  does not fit" },
                if p.check { "  (the fit's answer, estimated)" } else { "" }
            )?;
        }
        writeln!(out, "  {}", sweep.words)?;
        match sweep.largest_that_fits {
            Some(n) => writeln!(out, "  the largest that fits, estimated: {n} (the devices above are at that size)")?,
            None => writeln!(out, "  none of them fits")?,
        }
    }
    writeln!(out, "\nthe estimate rests on")?;
    for r in &doc.rests_on {
        let amount = r.bytes.map_or_else(String::new, |b| format!(": {}", bytes(b)));
        writeln!(out, "  {}{amount} ({})", r.what, r.detail)?;
    }
    if !doc.standins.is_empty() {
        writeln!(out, "\nthe program read values an emulated GPU cannot have; it was given 0 (or False) at")?;
        for p in doc.standins.iter().take(10) {
            writeln!(out, "  {}:{} in {}", p.file, p.line, p.function)?;
        }
        if doc.standins.len() > 10 {
            writeln!(out, "  and {} more places", doc.standins.len() - 10)?;
        }
    }
    writeln!(out, "\nnot modelled")?;
    for n in &doc.not_modelled {
        writeln!(out, "  {n}")?;
    }
    match &doc.trace {
        Some(path) => writeln!(out, "\ntrace: {path} (`vramscope open`, `info`, `advise` and `diff` read it)")?,
        None => writeln!(out, "\nwith -o OUT.vtrace the estimate is kept as a trace every view opens")?,
    }
    Ok(())
}
