//! Loading any supported file, with a progress bar on a terminal and errors that name the file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use vramscope_trace_format::import::Wrapper;
use vramscope_trace_format::import::import_json_stream;
use vramscope_trace_format::{Progress, SourceFormat, Trace, TraceRange, import, import_owned_range, import_range};

use crate::mapped::MappedFile;

/// Files at least this large are mapped rather than read.
const MAP_AT_BYTES: u64 = 64 << 20;
/// How far behind the parser's position pages stay resident (it may look back a little).
const KEEP_BEHIND_BYTES: u64 = 1 << 20;

/// A trace loaded from a file.
#[derive(Debug)]
pub struct LoadedTrace {
    /// The trace.
    pub trace: Trace,
    /// What was odd about the file but not fatal.
    pub warnings: Vec<String>,
    /// Where it came from.
    pub path: PathBuf,
    /// Size of the file.
    pub file_bytes: u64,
    /// The format of the file itself.
    pub format: SourceFormat,
    /// What the content came wrapped in (gzip, a memory_viz HTML page), outermost first.
    pub wrappers: Vec<Wrapper>,
}

/// Where a trace came from (the file, its format and size, what was odd about it): what a
/// face keeps beside the trace, and a process's view of a trace keeps from the whole.
#[derive(Clone, Debug)]
pub struct Origin {
    /// The file.
    pub path: PathBuf,
    /// Its format.
    pub format: SourceFormat,
    /// What the content came wrapped in, outermost first.
    pub wrappers: Vec<Wrapper>,
    /// Its size.
    pub file_bytes: u64,
    /// What was odd about it but not fatal.
    pub warnings: Vec<String>,
    /// How long reading and analysing took.
    pub load_time: Duration,
}

impl Origin {
    /// A loaded file taken apart: its trace, and where it came from.
    pub fn of(loaded: LoadedTrace, load_time: Duration) -> (Trace, Self) {
        let origin = Self {
            path: loaded.path,
            format: loaded.format,
            wrappers: loaded.wrappers,
            file_bytes: loaded.file_bytes,
            warnings: loaded.warnings,
            load_time,
        };
        (loaded.trace, origin)
    }
}

/// The path that names standard input.
pub const STDIN: &str = "-";
/// The most read from standard input (its size is not known in advance).
const MAX_STDIN_BYTES: u64 = 16 << 30;

/// What a path is when it is not a regular file (a directory, a pipe, a device, a socket).
fn not_a_file(kind: std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_file() {
        None
    } else if kind.is_dir() {
        Some("a directory")
    } else if kind.is_fifo() {
        Some("a named pipe (FIFO)")
    } else if kind.is_socket() {
        Some("a socket")
    } else if kind.is_char_device() {
        Some("a character device")
    } else if kind.is_block_device() {
        Some("a block device")
    } else {
        Some("not a regular file")
    }
}

/// Reads a trace from standard input (`vramscope info -`), up to [`MAX_STDIN_BYTES`].
fn load_stdin(progress: &dyn Progress, range: Option<TraceRange>) -> Result<LoadedTrace> {
    let mut data = Vec::new();
    let read =
        std::io::Read::read_to_end(&mut std::io::Read::take(std::io::stdin().lock(), MAX_STDIN_BYTES + 1), &mut data)
            .context("cannot read standard input")?;
    if read as u64 > MAX_STDIN_BYTES {
        bail!("standard input holds more than {} GiB; save it to a file instead", MAX_STDIN_BYTES >> 30);
    }
    if data.is_empty() {
        bail!("standard input is empty");
    }
    let file_bytes = data.len() as u64;
    let imported = import_owned_range(data, progress, range).context("cannot load standard input")?;
    range_holds_events(Path::new(STDIN), &imported.trace)?;
    self_check(Path::new(STDIN), &imported.trace)?;
    Ok(LoadedTrace {
        trace: imported.trace,
        warnings: imported.warnings,
        path: PathBuf::from(STDIN),
        file_bytes,
        format: imported.format,
        wrappers: imported.wrappers,
    })
}

/// Whether a file's first bytes are JSON (read with `pread`, so the file position stays).
fn starts_as_json(file: &std::fs::File) -> bool {
    use std::os::unix::fs::FileExt;
    let mut head = [0u8; 256];
    let n = file.read_at(&mut head, 0).unwrap_or(0);
    matches!(import::detect(&head[..n]), Ok(import::Detected::Json))
}

/// A terminal progress bar over bytes; hidden when stderr is not a terminal.
pub fn progress_bar(total: u64, message: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{msg} [{bar:30}] {binary_bytes}/{binary_total_bytes} ({eta})") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(message.to_owned());
    bar
}

/// Progress over a mapped file that hands its pages back as they are read: those behind the
/// reported position, and any range the importer says it is done with (pieces of a snapshot
/// read in parallel).
struct Releasing<'a> {
    mapped: &'a MappedFile,
    progress: &'a dyn Progress,
}

impl Progress for Releasing<'_> {
    fn update(&self, done: u64, total: u64) -> bool {
        self.mapped.release_before(done.saturating_sub(KEEP_BEHIND_BYTES) as usize);
        self.progress.update(done, total)
    }

    fn release(&self, start: u64, end: u64) {
        self.mapped.release_range(start as usize, end as usize);
    }
}

/// Reads a file of any supported format with a caller-provided progress sink.
pub fn load_with(path: &Path, progress: &dyn Progress) -> Result<LoadedTrace> {
    load_range_with(path, None, progress)
}

/// Reads `range` of the trace in a file ([`vramscope_trace_format::range`]); the whole of it
/// without one.
pub fn load_range_with(path: &Path, range: Option<TraceRange>, progress: &dyn Progress) -> Result<LoadedTrace> {
    if crate::sample::is_sample(path) {
        let imported =
            import_range(crate::sample::BYTES, progress, range).context("cannot load the built-in sample")?;
        return Ok(LoadedTrace {
            trace: imported.trace,
            warnings: imported.warnings,
            path: path.to_owned(),
            file_bytes: crate::sample::BYTES.len() as u64,
            format: imported.format,
            wrappers: imported.wrappers,
        });
    }
    if path == Path::new(STDIN) {
        return load_stdin(progress, range);
    }
    let cannot_read = || format!("cannot read {}", path.display());
    // A recording's directory (a flight recorder's rings, or what `vramscope.record()` left):
    // merged as `record` merges it at the end.
    if path.is_dir() && vramscope_collector::session::is_recording_dir(path) {
        let recording = vramscope_collector::session::collect_dir(path)
            .with_context(|| format!("cannot read the recording in {}", path.display()))?;
        let file_bytes = std::fs::read_dir(path)
            .map(|entries| entries.filter_map(Result::ok).filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum())
            .unwrap_or(0);
        return Ok(LoadedTrace {
            trace: recording.trace,
            warnings: recording.notes,
            path: path.to_owned(),
            file_bytes,
            format: SourceFormat::Vtrace,
            wrappers: Vec::new(),
        });
    }
    // Looked at before opening: opening a named pipe without a writer waits forever.
    let kind = std::fs::metadata(path).with_context(cannot_read)?.file_type();
    if let Some(what) = not_a_file(kind) {
        bail!(
            "{} is {what}, not a file: vramscope reads traces from files (or from standard input, given as '-')",
            path.display()
        );
    }
    let file = std::fs::File::open(path).with_context(cannot_read)?;
    let file_bytes = file.metadata().with_context(cannot_read)?.len();
    if file_bytes == 0 {
        bail!("{}: the file is empty", path.display());
    }
    let cannot_load = || format!("cannot load {}", path.display());
    let imported = if file_bytes >= MAP_AT_BYTES && starts_as_json(&file) {
        // A large JSON file is parsed as it is read: memory for the records kept, not the bytes.
        let reader = std::io::BufReader::with_capacity(1 << 20, &file);
        import_json_stream(reader, file_bytes, progress, range).with_context(cannot_load)?
    } else if file_bytes >= MAP_AT_BYTES {
        let mapped = MappedFile::map(&file).with_context(cannot_read)?;
        import_range(mapped.bytes(), &Releasing { mapped: &mapped, progress }, range).with_context(cannot_load)?
    } else {
        let mut data = Vec::with_capacity(file_bytes as usize);
        std::io::Read::read_to_end(&mut &file, &mut data).with_context(cannot_read)?;
        // The bytes are dropped as soon as they are parsed: less memory at the peak.
        import_owned_range(data, progress, range).with_context(cannot_load)?
    };
    range_holds_events(path, &imported.trace)?;
    self_check(path, &imported.trace)?;
    if std::env::var_os("VRAMSCOPE_TIMINGS").is_some() {
        eprintln!("vramscope: imported {}: {}", path.display(), crate::memory::resident_so_far());
    }
    Ok(LoadedTrace {
        trace: imported.trace,
        warnings: imported.warnings,
        path: path.to_owned(),
        file_bytes,
        format: imported.format,
        wrappers: imported.wrappers,
    })
}

/// Whether every trace read is held to [`crate::query::invariants`] and every `.vtrace`
/// written is read back (`VRAMSCOPE_SELF_CHECK=1`; the end-to-end tests set it).
pub fn self_checking() -> bool {
    std::env::var_os("VRAMSCOPE_SELF_CHECK").is_some_and(|v| v == "1")
}

/// With [`self_checking`], fails when `trace` breaks an invariant.
/// A range that holds none of the trace's events is refused: what it would show (what was alive
/// before it, at one instant) is not the part asked for.
fn range_holds_events(path: &Path, trace: &Trace) -> Result<()> {
    let Some(info) = &trace.metadata.range else { return Ok(()) };
    let inside = (trace.events.len() as u64).saturating_sub(info.alive_at_start);
    if inside > 0 {
        return Ok(());
    }
    // An instant between two events (`+140ms..+140ms`) shows the state there: only a range
    // outside the trace is refused.
    let total = info.events_before + info.events_after;
    let side = match (info.events_before, info.events_after) {
        (_, 0) => "all of them are before it",
        (0, _) => "all of them are after it",
        _ => return Ok(()),
    };
    bail!(
        "{}: the range {} holds none of the trace's {} events ({side}); `vramscope info` says when the trace \
         starts and how long it spans",
        path.display(),
        info.range,
        crate::units::count(total as usize)
    );
}

fn self_check(path: &Path, trace: &Trace) -> Result<()> {
    if !self_checking() {
        return Ok(());
    }
    let found = crate::query::invariants::violations(trace);
    if !found.is_empty() {
        bail!("{}: self-check failed: {}", path.display(), found.join("; "));
    }
    Ok(())
}

/// Reads `range` of a file of any supported format (`None`: the whole), showing a progress bar
/// on a terminal.
pub fn load(path: &Path, range: Option<TraceRange>) -> Result<LoadedTrace> {
    let size = if path == Path::new(STDIN) || crate::sample::is_sample(path) {
        0
    } else {
        std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?.len()
    };
    let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
    let bar = progress_bar(size, &format!("reading {name}"));
    let result = load_range_with(path, range, &|done: u64, _total: u64| {
        bar.set_position(done);
        true
    });
    bar.finish_and_clear();
    result
}
