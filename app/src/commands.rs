//! The command line's grammar: every command, argument and option, whose doc comments are the
//! `--help` text (clap derive). `main.rs` runs what they ask.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// GPU memory profiler and trace analyzer for deep-learning workloads.
///
/// Reads PyTorch memory snapshots (`torch.cuda.memory._dump_snapshot`), PyTorch profiler output
/// (Chrome traces recorded with `profile_memory=True`, and memory timelines in `.json` or
/// `raw.json.gz` form) and vramscope's own `.vtrace` files. The format is recognised from the
/// file's content, whatever its name.
///
/// `vramscope FILE` opens FILE in the desktop app; `vramscope` alone opens it on a built-in sample
/// recording.
#[derive(Parser, Debug)]
#[command(name = "vramscope", version, about, long_about, args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub open: OpenArgs,
}

/// The app's colours.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ThemeArg {
    /// Light text on dark.
    Dark,
    /// Dark text on light.
    Light,
}

#[derive(Args, Debug)]
pub struct OpenArgs {
    /// The trace to open; several files (one per rank) or a directory of them open as one run,
    /// its ranks side by side in the Ranks view.
    pub files: Vec<PathBuf>,
    /// Follow a run as it goes: the timeline grows and the peak, categories and current state
    /// update every 0.5 s (on a large run, less often: following takes at most a fifth of a core). Give the recording's directory (`record` prints it), its -o
    /// file before it exists, or a file something rewrites as it runs (a snapshot dumped every
    /// few steps); alone, the newest recording in progress on this machine. Zooming, panning or
    /// picking an instant stops at what is shown; End comes back to the newest.
    #[arg(long, value_name = "DIR|FILE", num_args = 0..=1, conflicts_with = "files")]
    pub follow: Option<Option<PathBuf>>,
    #[command(flatten)]
    pub connect: ConnectArgs,
    #[command(flatten)]
    pub range: RangeArg,
    #[command(flatten)]
    pub window: WindowArgs,
}

#[derive(Args, Debug, Default)]
pub struct ConnectArgs {
    /// Follow a run served from another machine (`vramscope serve`, `record --serve`), as
    /// --follow does a local one: HOST:PORT, through an SSH tunnel (`ssh -L 7433:127.0.0.1:7433
    /// gpu-host`, then --connect 127.0.0.1:7433). A dropped connection is made again and goes on
    /// where it stopped; the copy is kept in ~/.cache/vramscope/remote.
    #[arg(long, value_name = "HOST:PORT")]
    pub connect: Option<String>,
    /// The token the server printed (default: $VRAMSCOPE_TOKEN).
    #[arg(long, value_name = "TOKEN", requires = "connect")]
    pub token: Option<String>,
}

impl ConnectArgs {
    /// The run to follow and the copier that fetches it, when connecting.
    pub fn start(&self) -> anyhow::Result<Option<(vramscope::follow::Source, vramscope::serve::pull::Puller)>> {
        let Some(addr) = &self.connect else { return Ok(None) };
        let token = self.token.clone().or_else(|| std::env::var("VRAMSCOPE_TOKEN").ok()).unwrap_or_default();
        vramscope::serve::pull::start(addr, token.trim()).map(Some)
    }
}

#[derive(Args, Debug, Default)]
pub struct RangeArg {
    /// Read only this part of each trace: +2s..+3.5s (time after its first event; a snapshot's
    /// first trace entry in the file) or #1000000..#2000000 (events by index from 0, end
    /// excluded; a snapshot's trace entries in file order); either end may be left out. What was alive when the range starts is kept,
    /// so its memory is the whole trace's; a snapshot is cut as it is read, so a trace too large
    /// for this machine's memory opens in part.
    #[arg(long, value_name = "START..END")]
    pub range: Option<vramscope_trace_format::TraceRange>,
}

#[derive(Args, Debug)]
pub struct WindowArgs {
    /// Render the window once the trace is shown (without FILE: the welcome screen), save it to
    /// this PNG and exit. Needs a display (Xvfb will do).
    #[arg(long, value_name = "OUT.png")]
    pub screenshot: Option<PathBuf>,
    /// The view to show first.
    #[arg(long, value_enum)]
    pub view: Option<vramscope::gui::View>,
    /// Colour theme (default: the one last chosen in the app, else dark).
    #[arg(long, value_enum)]
    pub theme: Option<ThemeArg>,
    /// Window size in points, e.g. 1600x1000.
    #[arg(long, value_name = "WxH", value_parser = parse_size)]
    pub size: Option<[f32; 2]>,
}

fn parse_size(text: &str) -> Result<[f32; 2], String> {
    let (w, h) = text.split_once(['x', 'X']).ok_or("expected WIDTHxHEIGHT, e.g. 1600x1000")?;
    let parse = |v: &str| v.trim().parse::<f32>().ok().filter(|v| (200.0..=16384.0).contains(v));
    match (parse(w), parse(h)) {
        (Some(w), Some(h)) => Ok([w, h]),
        _ => Err("width and height must be numbers from 200 to 16384".to_owned()),
    }
}

/// Where `record`'s PyTorch shim takes tensor allocations from.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum TorchSource {
    /// CUDA's caching allocator when CUDA is available, else the CPU profiler.
    Auto,
    /// The CUDA caching allocator's history.
    Cuda,
    /// The CPU profiler's allocation events.
    Cpu,
    /// No shim: driver-level memory only.
    Off,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Open a trace in the desktop app (the same as `vramscope FILE`).
    ///
    /// Timeline of memory by category, the peak breakdown (by category, stack and allocation)
    /// and the allocator's fragmentation map. Press F1 in the window for keyboard shortcuts.
    Open(OpenArgs),
    /// Compare two runs in the desktop app: timelines on one time axis and byte scale, deltas
    /// by category and allocation site at each peak, and what changed in one sentence.
    Compare {
        /// The baseline run.
        a: PathBuf,
        /// The run compared with it.
        b: PathBuf,
        #[command(flatten)]
        range: RangeArg,
        #[command(flatten)]
        window: WindowArgs,
    },
    /// Print what a trace holds: peaks, the final segment state, fragmentation.
    ///
    /// For each device: the peak of allocated bytes (blocks handed to tensors, from alloc until
    /// their free completes) and of reserved bytes (segments held from the driver), what was
    /// alive at the peak by category, and the allocator's final segment state with its free space
    /// split into internal waste (rounding inside allocated blocks) and external free blocks.
    /// Memory allocated before a snapshot's trace window began is counted.
    Info {
        /// The trace to read ('-' reads it from standard input, e.g. `zcat x.gz | vramscope info -`);
        /// several files (one per rank), a directory of them, or a recording of several ranks
        /// are read as one run: a row per rank and the run's summary.
        #[arg(required = true, num_args = 1..)]
        files: Vec<PathBuf>,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// Also say what was alive at an instant: +DURATION after the first event (+40ms, +1.5s),
        /// or the start of a phase as info finds them: forward, backward, optimizer_step or
        /// iteration, with #N for iteration N, numbered from 1 as info and diff number them
        /// (optimizer_step#2; without #N, the first).
        #[arg(long, value_name = "WHEN", value_parser = vramscope::cli::info::parse_when_arg)]
        at: Option<(String, vramscope::cli::info::When)>,
        /// Also list the N largest blocks alive at the peak (or at --at), each with its category,
        /// why it has it, and where it was allocated.
        #[arg(long, value_name = "N", default_value_t = 0)]
        blocks: usize,
        /// Also list every iteration's phases and their high points, one row per iteration (in
        /// the JSON: `phases.phases` and `phases.iterations`). Without it, the phases are
        /// outlined at any length of run: how many, each kind's highest, the 5 highest
        /// iterations.
        #[arg(long)]
        all_phases: bool,
        /// Explain the trace's out-of-memory errors instead (the first on each device): the
        /// request that failed (size, stream, stack), what the device and the allocator had free
        /// (and whether a free range could have taken it: fragmentation), what was alive by
        /// category and site, the phase and iteration, and the smallest change the advisor
        /// projects would have fitted.
        #[arg(long, conflicts_with_all = ["at", "blocks", "all_phases"])]
        oom: bool,
        #[command(flatten)]
        range: RangeArg,
    },
    /// Compare two runs at their peaks and phase by phase; with gates, fail (exit 1) when memory
    /// grew too much.
    ///
    /// Prints one sentence on what changed most (a phase's high point when it changed much more
    /// than the peak), both peaks (allocated and reserved), bytes by category at each peak with
    /// B - A, the high point of forward, backward and the optimizer step and of each iteration
    /// side by side (phases recorded, found from ranges named like them, or from the allocations'
    /// stacks), and the allocation sites that grew, shrank, or exist in one run only: allocations
    /// are matched by their whole call path (function, file and line of each frame), grouped by
    /// their innermost site, with code that moved paired. Exit status: 0 when every gate holds, 1
    /// when one fails, 2 when a file cannot be read or a gate cannot be checked. For CI:
    /// `vramscope diff main.pickle pr.pickle --fail-if-peak-grows 5
    /// --fail-if-category-grows activation=10 --fail-if-phase-grows forward=5`.
    Diff {
        /// The baseline run: a trace, or a run of several ranks (a directory of rank files, or a
        /// recording of several ranks: the ranks are paired by number, each gate must hold on
        /// every rank).
        a: PathBuf,
        /// The run compared with it.
        b: PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// Fail when B's allocated peak is more than PCT percent above A's.
        #[arg(long, value_name = "PCT")]
        fail_if_peak_grows: Option<f64>,
        /// Fail when a category's bytes at B's peak are more than PCT percent above A's
        /// (repeatable; categories: parameter, gradient, optimizer_state, activation, temporary,
        /// input, allocator_cache, non_framework, autograd_detail, unknown).
        #[arg(long, value_name = "CAT=PCT", value_parser = vramscope::cli::diff::parse_category_gate)]
        fail_if_category_grows: Vec<(vramscope_trace_format::Category, f64)>,
        /// Fail when the high point of a phase in B is more than PCT percent above A's
        /// (repeatable): PHASE=PCT for all of the phase's memory, PHASE:CAT=PCT for one category
        /// at the phase's high point. Phases: forward, backward, optimizer_step (each compared
        /// at its highest over the iterations). E.g. `--fail-if-phase-grows forward=5
        /// --fail-if-phase-grows backward:activation=10`. A run that shows no such phase cannot
        /// be checked: exit status 2.
        #[arg(long, value_name = "PHASE[:CAT]=PCT", value_parser = vramscope::cli::diff::parse_phase_gate)]
        fail_if_phase_grows: Vec<vramscope::cli::diff::PhaseGate>,
        /// Compare this device: its index (0, 1, …), cuda:N or host (default: each file's device
        /// with the highest peak).
        #[arg(long, value_name = "DEVICE")]
        device: Option<vramscope_trace_format::DeviceId>,
        /// List every iteration side by side (text and JSON); without it, each phase kind's
        /// highest and the first 4 iterations, with how many there are.
        #[arg(long)]
        all_phases: bool,
        /// Compare this part of both runs (see `info --range`).
        #[arg(long, value_name = "START..END")]
        range: Option<vramscope_trace_format::TraceRange>,
    },
    /// Draw a report image: the timeline by category and the breakdown at the peak; with two
    /// files, both timelines on one time axis and byte scale, and what changed.
    ///
    /// PNG or SVG, chosen by OUT's extension. An existing OUT is kept unless --force is given.
    Report {
        /// The run (or the baseline run of a comparison).
        file: PathBuf,
        /// A second run to compare with the first.
        file2: Option<PathBuf>,
        /// Where to write the image (`.png` or `.svg`).
        #[arg(short, long, value_name = "OUT.png|OUT.svg")]
        output: PathBuf,
        /// Replace OUT if it exists.
        #[arg(long)]
        force: bool,
        /// Also print what the picture shows as one JSON document (`vramscope schema report`):
        /// each run's summary and the advisor's projections, instead of "wrote OUT".
        #[arg(long)]
        json: bool,
        /// With --json, also list the N largest blocks alive at each device's peak.
        #[arg(long, value_name = "N", default_value_t = 0, requires = "json")]
        blocks: usize,
        #[command(flatten)]
        range: RangeArg,
    },
    /// Run a workload with its GPU memory recorded, and write it as one trace.
    ///
    /// Two recorders run inside the workload, with no change to its code:
    ///
    /// - a hook library (loaded with LD_PRELOAD) sees every CUDA driver and runtime allocation,
    ///   however the program reaches the driver: plain, pitched, managed, stream-ordered (with
    ///   its pools), virtual-memory mappings and pinned host memory, and their frees;
    ///
    /// - for Python programs that import PyTorch, a start-up shim (sitecustomize, chained to the
    ///   program's own) records every tensor's allocation with its Python stack and tags
    ///   parameters (with qualified names), gradients, optimizer state and inputs, and the
    ///   forward, backward, optimizer-step and iteration phases. On CUDA it reads the caching
    ///   allocator's history; without a GPU, the CPU profiler's allocation events.
    ///
    /// stdin, stdout and stderr pass through and vramscope exits with the workload's exit
    /// status. Child processes are recorded with their own pid.
    Record {
        /// Where to write the trace (default: PROGRAM-PID.vtrace here).
        #[arg(short, long, value_name = "OUT.vtrace")]
        output: Option<PathBuf>,
        /// Watch the run in the desktop app as it goes (needs a display). Closing the window
        /// does not stop the workload: the recording goes on and the trace is written when it
        /// ends; the window then shows the finished trace.
        #[arg(long)]
        live: bool,
        /// Serve the recording as it is written to viewers on other machines (`vramscope open
        /// --connect`, `top --connect`), on ADDR:PORT (default 127.0.0.1:7433: this machine only;
        /// reach it through an SSH tunnel). A token printed at start is asked of every viewer
        /// (set it with $VRAMSCOPE_TOKEN). Serving never waits on a viewer; once the trace is
        /// written, viewers still connected get it (for up to a minute).
        #[arg(long, value_name = "ADDR:PORT", num_args = 0..=1, default_missing_value = vramscope::serve::DEFAULT_ADDR)]
        serve: Option<String>,
        /// Watch the run in this terminal as it goes (`vramscope top`'s view), for a GPU machine
        /// reached over SSH. The workload's output goes to OUT.log instead of the terminal, and
        /// its standard input is empty. q leaves the view and the recording goes on; Ctrl+C
        /// also interrupts the workload.
        #[arg(long, conflicts_with = "live")]
        tui: bool,
        /// Replace OUT if it exists.
        #[arg(long)]
        force: bool,
        /// Where the PyTorch shim takes tensor allocations from: CUDA when it is available, else
        /// the CPU (auto); or off, for driver-level memory only.
        #[arg(long, value_enum, default_value_t = TorchSource::Auto)]
        torch: TorchSource,
        /// How often to ask the NVIDIA driver (NVML) what each GPU holds, for every process on
        /// it (those not recorded too: another job, an inference server, a notebook): 100ms by
        /// default, or off. Without NVML (no NVIDIA driver) nothing is sampled; nor with --flight.
        #[arg(long, value_name = "INTERVAL|off", default_value = "100ms", value_parser = vramscope::cli::record::parse_sampling)]
        sample_devices: vramscope::cli::record::Sampling,
        /// Keep a flight recorder instead of a trace: each process's driver calls go round a
        /// file of fixed size in the directory -o names (default PROGRAM-PID.flight), so the
        /// last stretch of a run of any length is on disk when it dies, runs out of memory or
        /// is killed (a SIGKILL loses at most the last 20 ms; a machine that loses power, the
        /// last quarter second). SIZE bounds each process's file (e.g. 256MiB); DURATION (e.g.
        /// 10min) is how far back it should reach, within 64 MiB; default 64MiB. Open the
        /// directory with `vramscope DIR`. PyTorch's tensors are not kept, only what the driver
        /// was asked for (the caching allocator's segments, other allocators', OOMs).
        #[arg(
            long,
            value_name = "SIZE|DURATION",
            num_args = 0..=1,
            default_missing_value = "64MiB",
            require_equals = true,
            conflicts_with_all = ["live", "tui", "serve"]
        )]
        flight: Option<String>,
        /// The command to run, after `--`.
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<std::ffi::OsString>,
    },
    /// Predict a program's GPU memory on a GPU this machine does not have, by running it.
    ///
    /// The program runs here, unchanged, as on the GPU named (--gpu, default H100): torch.cuda
    /// says the GPU is there (its name, memory and compute capability), tensors are PyTorch's
    /// fake tensors (shapes and dtypes, no memory, no compute: on the CPU side too, so a model
    /// built there costs nothing), and every tensor on the GPU is allocated in a model of
    /// PyTorch's CUDA caching allocator (PYTORCH_CUDA_ALLOC_CONF honoured, expandable segments
    /// and cudaMallocAsync included), with cuBLAS's workspaces where PyTorch takes them. The
    /// program's own memory calls (max_memory_allocated(), memory_stats(), _dump_snapshot())
    /// answer what the GPU would, and it is recorded as `record` records a GPU run: every tensor
    /// tagged parameter, gradient, optimizer state, activation, temporary or input, with phases
    /// and stacks. Where the program reads a value (.item(), printing a loss), it gets 0 and the
    /// place is listed. Prints the projected peak allocated and reserved, whether it fits with
    /// the CUDA context, what was alive at the peak, what the estimate rests on and, when it
    /// does not fit, the smallest change that does. With -o the estimate is a trace every view
    /// opens.
    ///
    /// Exit status: 0 it fits, 1 it does not, 2 no complete estimate (the program failed, or put
    /// nothing on the GPU) or another error.
    Estimate {
        /// The GPU to run on: h200, h100, a100 (80 GB), a100-40gb, l40s, l4, a10, t4, rtx5090,
        /// rtx4090 (or the full name torch.cuda.get_device_name() gives).
        #[arg(long, value_name = "NAME")]
        gpu: Option<String>,
        /// Its memory instead of the table's, e.g. 24GiB or 80GB (with no --gpu: a GPU of this
        /// memory with an H100's compute capability).
        #[arg(long, value_name = "SIZE", value_parser = vramscope::cli::advise::parse_bytes)]
        device_memory: Option<u64>,
        /// How many GPUs the program sees (torch.cuda.device_count()).
        #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
        gpus: u32,
        /// The CUDA context and the kernels it loads, counted against each GPU beside PyTorch's
        /// reserved memory (assumed; what a CUDA 12 or 13 process typically holds).
        #[arg(long, value_name = "SIZE", default_value = "512MiB", value_parser = vramscope::cli::advise::parse_bytes)]
        context: u64,
        /// Also write the estimate as a trace (`vramscope open`, `info`, `advise`, `diff` read it).
        #[arg(short, long, value_name = "OUT.vtrace")]
        output: Option<PathBuf>,
        /// Replace OUT if it exists.
        #[arg(long)]
        force: bool,
        /// Print one JSON object instead of text (`vramscope schema estimate` describes it).
        #[arg(long)]
        json: bool,
        /// Find the largest batch (or sequence) that fits: estimate the program at each size, with
        /// the size where the command says {batch} (or {seq}), fit how the peak grows, and
        /// estimate the fit's answer to check it. E.g. --sweep batch=4,8,16 -- python train.py
        /// --batch-size {batch}.
        #[arg(long, value_name = "batch=N,N,…", value_parser = vramscope::cli::estimate::parse_sweep)]
        sweep: Option<(vramscope::query::advisor::scaling::Dimension, Vec<u64>)>,
        /// The command to run, after `--`.
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<std::ffi::OsString>,
    },
    /// Run a program with CUDA out-of-memory errors caught: nothing is recorded until one happens.
    ///
    /// No relaunch when it fails, no hook library, no cost until then: once the program imports
    /// torch and initialises CUDA, the caching allocator keeps a ring of its recent events (with
    /// Python stacks). When an allocation fails, what led to it is written to DIR as a memory
    /// snapshot (`oom-HOST-PID-N.pickle`, at most 3 per process) and the post-mortem's first
    /// lines (`vramscope info --oom`) are printed on stderr; then the error goes on as it would.
    /// `python -m vramscope train.py` is the same; a launcher that only passes the environment
    /// through (SLURM, torchrun) gets it with VRAMSCOPE_CAPTURE_OOM=DIR where the pip package is
    /// installed.
    Run {
        /// Where snapshots of out-of-memory errors go.
        #[arg(long, value_name = "DIR", default_value = "vramscope-oom")]
        oom_dir: PathBuf,
        /// The command to run, after `--`.
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<std::ffi::OsString>,
    },
    /// Project what each remedy would do to the peak, from the trace's breakdown.
    ///
    /// Mixed precision (bf16/fp16), activation checkpointing (of every block, and of some),
    /// halving the micro-batch (with gradient accumulation) or the sequence, 8-bit Adam,
    /// Adafactor, SGD, ZeRO 1/2/3, tensor and pipeline parallelism over --gpus GPUs, and the
    /// allocator's expandable segments and max_split_size_mb: for each, the projected peak
    /// (allocated and reserved), the saving, the cost, the reasoning from the trace, an
    /// uncertainty, and how it was projected (the recorded allocations changed as the remedy
    /// would change them and replayed, or a rule); the best pairs; the smallest change that fits
    /// under the target, and the order to try them in. With --with and --batch or --seq-len,
    /// the largest batch or sequence that fits, fitted over recordings at several sizes. Works
    /// best on traces recorded with `vramscope record` (tags, phases and module names).
    Advise {
        /// The trace ('-' for standard input); of a run of several ranks (a directory of rank
        /// files, or a recording of several ranks), the rank that peaks highest is advised on.
        file: PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// GPUs to split over, for the ZeRO, tensor and pipeline parallel remedies (default: the ranks or GPUs the trace
        /// shows; with one, sharding is not projected).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=65536))]
        gpus: Option<u32>,
        /// The memory to fit under (default: the device's, when the trace knows it), e.g. 80GiB
        /// or 80G (binary), 80GB (decimal, 80·10⁹ bytes).
        #[arg(long, value_name = "BYTES", value_parser = vramscope::cli::advise::parse_bytes)]
        target_bytes: Option<u64>,
        /// The device to advise on: its index (0, 1, …) or cuda:N (default: the one with the
        /// highest peak).
        #[arg(long, value_name = "DEVICE")]
        device: Option<vramscope_trace_format::DeviceId>,
        /// Another recording of the same run at another batch size (with --batch) or sequence
        /// length (with --seq-len), to fit how the peak scales and find the largest that fits
        /// under the target; repeat it for more.
        #[arg(long = "with", value_name = "FILE", requires = "sizes")]
        with: Vec<PathBuf>,
        /// The batch size of FILE and of each --with, in order (e.g. --batch 8,4).
        #[arg(long, value_name = "N,…", value_delimiter = ',', group = "sizes", requires = "with",
              value_parser = clap::value_parser!(u64).range(1..))]
        batch: Vec<u64>,
        /// The sequence length of FILE and of each --with, in order (e.g. --seq-len 64,32,96):
        /// three or more fit the square of the length too (attention), two give an upper bound.
        #[arg(long, value_name = "N,…", value_delimiter = ',', group = "sizes", requires = "with",
              value_parser = clap::value_parser!(u64).range(1..))]
        seq_len: Vec<u64>,
        #[command(flatten)]
        range: RangeArg,
    },
    /// Write a trace or a run for the tools people already use.
    ///
    /// `--format parquet`: six tables in the directory OUT (ranks, events, blocks with their
    /// lifetime, category and why it has it, segments, annotations, tags), each a directory
    /// partitioned by rank (and node) that DuckDB, Polars, Spark and Dask read as one table; the
    /// schema and the queries are in docs/EXPORT.md. `--format perfetto`: Chrome trace event
    /// JSON, which Perfetto's UI (ui.perfetto.dev), chrome://tracing and the trace tools that
    /// read it open: a process per rank, a counter track per device (allocated and reserved
    /// bytes), the recorded phases as slices and OOMs as instants. Like `info`, it takes a
    /// trace, several (one per rank), a directory of them, or a recording of several ranks. The
    /// output is written atomically; an existing one is kept unless --force is given.
    Export {
        /// The trace or traces.
        #[arg(required = true, num_args = 1..)]
        files: Vec<PathBuf>,
        /// Where to write.
        #[arg(short, long, value_name = "OUT")]
        output: PathBuf,
        /// The format to write.
        #[arg(long, value_enum)]
        format: vramscope::cli::export::Format,
        /// Replace OUT if it exists.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        range: RangeArg,
    },
    /// Convert any supported file to a compact `.vtrace`.
    ///
    /// The output is written to a temporary file beside it and renamed into place when complete,
    /// so an interrupted conversion never leaves a half-written trace. With --range, only that
    /// part is written (a small trace of one step of a huge snapshot, say).
    Convert {
        /// The file to convert ('-' for standard input), or a recording's directory (what
        /// `vramscope.record()` in Python leaves when it cannot finish the trace itself).
        file: PathBuf,
        /// Where to write the `.vtrace`.
        #[arg(short, long, value_name = "OUT.vtrace")]
        output: PathBuf,
        /// Replace OUT if it exists.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        range: RangeArg,
    },
    /// Watch a run in the terminal: memory now and at the peak, charts of the last minutes and
    /// of the whole run, categories and allocation sites alive now, growth, OOMs, the phase.
    ///
    /// For a GPU machine reached over SSH. Takes what `open --follow` takes: a recording in
    /// progress (the directory `record` prints, or its -o file before it exists), a file
    /// something rewrites as the run goes (a snapshot dumped every few steps), a finished trace;
    /// alone, the newest recording in progress on this machine. The numbers are `info`'s, worked
    /// out at most every half second at a lower priority than the workload. Keys are listed at
    /// the bottom (? for help; q quits). Works in an 80x24 terminal.
    Top {
        /// The recording's directory, or a trace file (default: the newest recording in progress).
        #[arg(conflicts_with = "connect")]
        source: Option<PathBuf>,
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Serve a recording in progress (or a trace) to viewers on other machines.
    ///
    /// `vramscope open --connect HOST:PORT` (the app) or `vramscope top --connect HOST:PORT`
    /// (the terminal) there follow it as `--follow` does here, and get the finished trace at the
    /// end. Takes what `open --follow` takes: a recording's directory (the one `record` prints,
    /// or its -o file before it exists), a file something rewrites as the run goes (sent again
    /// whenever it changes), a finished trace; alone, the newest recording in progress. A
    /// recording whose recorder was killed is served as `vramscope convert DIR` would write it.
    /// Listens on this machine only unless given another address; asks every viewer for the
    /// token it prints. Runs until Ctrl+C.
    Serve {
        /// The recording's directory, or a file (default: the newest recording in progress).
        source: Option<PathBuf>,
        /// Where to listen: HOST:PORT, or a port (on 127.0.0.1). 0.0.0.0:PORT serves every
        /// network this machine is on: anyone who reaches it with the token reads the run.
        #[arg(long, value_name = "ADDR:PORT", default_value = vramscope::serve::DEFAULT_ADDR)]
        addr: String,
        /// The token viewers must give (default: $VRAMSCOPE_TOKEN, else a new random one).
        #[arg(long, value_name = "TOKEN")]
        token: Option<String>,
        /// Ask viewers for no token: anyone who can reach the address reads the run.
        #[arg(long, conflicts_with = "token")]
        no_token: bool,
    },
    /// Answer coding agents: a Model Context Protocol server on standard input and output.
    ///
    /// An MCP client (Claude Code, Cursor, VS Code, Codex, ...) starts it and asks it what the CLI
    /// answers, with the same numbers: a run's summary (one trace or a run of ranks), what was alive
    /// at the peak or at an instant (by category and allocation site), two runs compared (with
    /// gates), memory growing every iteration, the OOM post-mortem and the advisor's projections.
    /// Every tool only reads the files it is given; answers are bounded in size (long lists come
    /// a page at a time). Register it with the client, e.g. `claude mcp add vramscope --
    /// vramscope mcp`, or in a client's JSON settings:
    /// `{"mcpServers": {"vramscope": {"command": "vramscope", "args": ["mcp"]}}}`. It runs until
    /// the client closes its input; paths are relative to the directory it was started in.
    Mcp,
    /// Print the JSON Schema of what the commands print as JSON.
    ///
    /// Every JSON answer is a document with a `schema_version`: `info --json` (info, or run for
    /// several ranks), `info --oom --json` (oom), `diff --json` (diff, or ranks-diff for runs of
    /// ranks), `advise --json` (advise) and the MCP tools, which answer with the same documents.
    /// Without DOCUMENT, every document's schema by name; `--list` names them.
    Schema {
        /// The document: info, run, oom, diff, ranks-diff, advise or growth.
        document: Option<String>,
        /// Name the documents and what prints each, instead of a schema.
        #[arg(long, conflicts_with = "document")]
        list: bool,
    },
}
