//! Importers of other tools' files, chosen by content, never by file name.

pub mod chrome;
pub mod container;
pub mod html;
pub mod memory_timeline;
mod pickle;
pub mod snapshot;

use self::container::{Compression, GZIP_MAGIC, ZSTD_MAGIC};
use crate::error::{Error, Result};
use crate::model::metadata::SourceFormat;
use crate::model::trace::Trace;
use crate::progress::Progress;
use crate::range::TraceRange;

/// A trace read from a file, with what was odd about the file but not fatal.
#[derive(Debug)]
pub struct Imported {
    /// The trace.
    pub trace: Trace,
    /// Things the reader skipped or repaired, for the user to see.
    pub warnings: Vec<String>,
    /// The format of the file itself (a `.vtrace` converted from a snapshot is `Vtrace` here and
    /// `PytorchSnapshot` in its metadata).
    pub format: SourceFormat,
    /// What the content was wrapped in, outermost first (`trace_plot` HTML, gzip, ...).
    pub wrappers: Vec<Wrapper>,
}

/// Something a file's content came wrapped in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wrapper {
    /// Compressed.
    Compressed(Compression),
    /// Embedded in the HTML page that PyTorch's `_memory_viz.py` writes.
    MemoryVizHtml,
}

impl Wrapper {
    /// How `info` names it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Compressed(c) => c.name(),
            Self::MemoryVizHtml => "memory_viz HTML",
        }
    }
}

/// How much of a container's content is inflated to recognise it.
const HEAD_BYTES: usize = 64 << 10;

/// Containers may nest (a gzipped HTML page); deeper than this is hostile.
const MAX_WRAPPERS: usize = 3;

/// Distinct devices a trace may have (PyTorch numbers devices with an 8-bit index; a merged
/// recording of many processes shares their indices). The analysis works device by device, so
/// this bounds how often it passes over the events.
pub const MAX_DEVICES: usize = 256;

/// Refuses a trace with more devices than [`MAX_DEVICES`].
fn check_devices(trace: &Trace) -> Result<()> {
    let devices = trace.devices().len();
    if devices > MAX_DEVICES {
        return Err(Error::Structure(format!(
            "this trace has {devices} devices; vramscope reads traces of at most {MAX_DEVICES}"
        )));
    }
    Ok(())
}

/// The formats vramscope reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Detected {
    /// A `.vtrace`.
    Vtrace,
    /// A pickle (a PyTorch memory snapshot if anything).
    Pickle,
    /// Compressed data, whatever it holds (the profiler's `raw.json.gz` and `.pt.trace.json.gz`).
    Compressed(Compression),
    /// JSON: a Chrome trace or a memory timeline.
    Json,
    /// An HTML page (PyTorch's `_memory_viz.py` output embeds a snapshot).
    Html,
}

/// Tells the format from the first bytes of a file (and, for old pickles, its last byte).
pub fn detect(data: &[u8]) -> Result<Detected> {
    if data.is_empty() {
        return Err(Error::Empty);
    }
    if data.starts_with(&crate::vtrace::MAGIC) {
        return Ok(Detected::Vtrace);
    }
    if data[0] == 0x80 && data.len() > 1 && (2..=5).contains(&data[1]) {
        return Ok(Detected::Pickle);
    }
    if data.starts_with(&GZIP_MAGIC) {
        return Ok(Detected::Compressed(Compression::Gzip));
    }
    if data.starts_with(&ZSTD_MAGIC) {
        return Ok(Detected::Compressed(Compression::Zstd));
    }
    if is_old_pickle(data) {
        return Ok(Detected::Pickle);
    }
    let text = data.strip_prefix(&[0xef, 0xbb, 0xbf]).unwrap_or(data);
    let first = text.iter().position(|b| !b.is_ascii_whitespace()).map(|i| &text[i..]);
    match first {
        Some([b'{' | b'[', ..]) => return Ok(Detected::Json),
        Some(rest) if html::looks_like_html(rest) => return Ok(Detected::Html),
        _ => {}
    }
    Err(Error::UnknownFormat(describe_start(data)))
}

/// Pickles of protocols 0 and 1 have no header: they start with the opcode that builds the top
/// object (`(dp0`, `(lp0` in protocol 0; `}q`, `]q` and friends in protocol 1) and end with STOP.
fn is_old_pickle(data: &[u8]) -> bool {
    let ends_with_stop = data.last() == Some(&b'.');
    let starts = match data {
        [b'(', b'd' | b'l', ..] => true,
        [b'}' | b']', second, ..] => b"qr(hjsaue.0NIVX".contains(second),
        _ => false,
    };
    ends_with_stop && starts
}

/// A short, printable description of a file's first bytes, for error messages.
fn describe_start(data: &[u8]) -> String {
    let known: [(&[u8], &str); 5] = [
        (b"\x89PNG", "a PNG image"),
        (
            b"PK\x03\x04",
            "a ZIP archive (torch.save writes these; save the snapshot with torch.cuda.memory._dump_snapshot)",
        ),
        (b"%PDF", "a PDF document"),
        (b"BZh", "bzip2-compressed data (decompress it first)"),
        (b"\xfd7zXZ", "xz-compressed data (decompress it first)"),
    ];
    if let Some((_, what)) = known.iter().find(|(magic, _)| data.starts_with(magic)) {
        return (*what).to_owned();
    }
    let head = &data[..data.len().min(16)];
    let printable = head.iter().all(|b| b.is_ascii_graphic() || *b == b' ');
    if printable {
        format!("{:?}", String::from_utf8_lossy(head))
    } else {
        let hex: Vec<String> = head.iter().map(|b| format!("{b:02x}")).collect();
        format!("the bytes {}", hex.join(" "))
    }
}

/// Reads any supported file from its bytes.
///
/// `.vtrace` files damaged at the end load up to the damage; the damage is reported as a warning.
/// Compressed files and memory_viz HTML pages are unwrapped and their content recognised again.
pub fn import(data: &[u8], progress: &dyn Progress) -> Result<Imported> {
    import_range(data, progress, None)
}

/// Reads any supported file from its bytes, taking them so that they can be freed as soon as
/// they have been read (a snapshot's bytes go before its trace is built): less memory at the peak.
pub fn import_owned(data: Vec<u8>, progress: &dyn Progress) -> Result<Imported> {
    import_owned_range(data, progress, None)
}

/// Reads only `range` of the trace in a file ([`crate::range`]): a snapshot is cut as it is
/// read, so its memory follows the range; other formats are read whole, then cut.
pub fn import_range(data: &[u8], progress: &dyn Progress, range: Option<TraceRange>) -> Result<Imported> {
    let unwrapping = Unwrapping::of_file(data.len(), range);
    import_any(Bytes::Borrowed(data), progress, unwrapping)
}

/// [`import_range`] taking the bytes, so that they can be freed as soon as they are read.
pub fn import_owned_range(data: Vec<u8>, progress: &dyn Progress, range: Option<TraceRange>) -> Result<Imported> {
    let unwrapping = Unwrapping::of_file(data.len(), range);
    import_any(Bytes::Owned(data), progress, unwrapping)
}

/// Cuts a trace read whole to the range asked for (a trace opened at a range before, written to
/// a `.vtrace`, is cut again: the range is of what the file holds).
fn cut_to(mut imported: Imported, range: Option<TraceRange>) -> Result<Imported> {
    imported.trace.settle_free_steps();
    if let Some(range) = range {
        crate::range::apply(&mut imported.trace, range)?;
    }
    Ok(imported)
}

/// A file's bytes, or what a container held (owned, so that it goes once read).
enum Bytes<'a> {
    Borrowed(&'a [u8]),
    Owned(Vec<u8>),
}

impl Bytes<'_> {
    fn as_slice(&self) -> &[u8] {
        match self {
            Self::Borrowed(data) => data,
            Self::Owned(data) => data,
        }
    }
}

/// Where unwrapping containers stands: what was taken off, and how many more bytes inflating
/// may still produce. The budget is the file's, shared by every layer, so that nesting
/// containers cannot multiply it.
struct Unwrapping {
    wrappers: Vec<Wrapper>,
    file_bytes: u64,
    inflate_left: u64,
    /// The part of the trace to keep.
    range: Option<TraceRange>,
}

impl Unwrapping {
    fn of_file(file_bytes: usize, range: Option<TraceRange>) -> Self {
        let file_bytes = file_bytes as u64;
        Self { wrappers: Vec::new(), file_bytes, inflate_left: container::inflate_budget(file_bytes), range }
    }
}

fn import_any(bytes: Bytes<'_>, progress: &dyn Progress, mut state: Unwrapping) -> Result<Imported> {
    let data = bytes.as_slice();
    let detected = detect(data).map_err(|e| inside(&state.wrappers, e))?;
    if matches!(detected, Detected::Compressed(_) | Detected::Html) && state.wrappers.len() >= MAX_WRAPPERS {
        return Err(Error::Structure(format!(
            "the content is wrapped more than {MAX_WRAPPERS} times ({} and more inside); refusing it",
            state.wrappers.iter().map(|w| w.name()).collect::<Vec<_>>().join(", then ")
        )));
    }
    let total = data.len() as u64;
    let mut imported = match detected {
        Detected::Vtrace => {
            let loaded = crate::vtrace::read(data, progress)?;
            let warnings = loaded.damage.iter().map(ToString::to_string).collect();
            Imported { trace: loaded.trace, warnings, format: SourceFormat::Vtrace, wrappers: Vec::new() }
        }
        Detected::Pickle => {
            let parsed = snapshot::parse(data, progress, state.range)?;
            // The bytes go before the trace is built: less memory at the peak.
            drop(bytes);
            parsed.build()?
        }
        Detected::Json => import_json(data, progress)?,
        Detected::Compressed(kind) => {
            let budget = container::Budget { left: state.inflate_left, file_bytes: state.file_bytes };
            let mut stream = container::Inflating::new(kind, data, budget, progress)?;
            state.wrappers.push(Wrapper::Compressed(kind));
            // What is inside decides: JSON is parsed as it is inflated (its bytes are never held
            // whole); anything else is inflated first.
            let head = container::read_head(&mut stream, HEAD_BYTES)?;
            if head.is_empty() {
                return Err(Error::Structure(format!("the {} data is empty once decompressed", kind.name())));
            }
            let inner_progress = container::Inner { outer: progress, outer_total: total };
            if detect(&head).map_err(|e| inside(&state.wrappers, e))? == Detected::Json {
                let failure = stream.failure();
                let text = head.strip_prefix(&[0xef, 0xbb, 0xbf]).unwrap_or(&head);
                let timeline = memory_timeline::looks_like_timeline(text);
                let reader = std::io::Read::chain(text, &mut stream);
                let result = if timeline {
                    memory_timeline::import_json_from(reader, total, &inner_progress)
                } else {
                    chrome::import_chrome_trace_from(reader, total, &inner_progress)
                };
                // A failure of the stream (over budget, corrupt, cancelled) is the real error.
                let mut imported = result.map_err(|e| failure.borrow_mut().take().unwrap_or(e))?;
                imported.wrappers = state.wrappers;
                check_devices(&imported.trace)?;
                return cut_to(imported, state.range);
            }
            // Anything else is held whole: the machine's memory bounds it too.
            stream.hold_within(crate::memory::Limit::of_machine());
            let mut inner = head;
            container::read_to_end(&mut stream, &mut inner)?;
            state.inflate_left = state.inflate_left.saturating_sub(stream.produced());
            drop(stream);
            drop(bytes);
            return import_any(Bytes::Owned(inner), &inner_progress, state);
        }
        Detected::Html => {
            state.wrappers.push(Wrapper::MemoryVizHtml);
            match html::embedded(data)? {
                html::Embedded::Pickle(inner) => {
                    drop(bytes);
                    let inner_progress = container::Inner { outer: progress, outer_total: total };
                    return import_any(Bytes::Owned(inner), &inner_progress, state);
                }
                html::Embedded::Plot(imported) => *imported,
            }
        }
    };
    imported.wrappers = state.wrappers;
    check_devices(&imported.trace)?;
    // A snapshot was cut while it was read.
    if detected == Detected::Pickle {
        imported.trace.settle_free_steps();
        return Ok(imported);
    }
    cut_to(imported, state.range)
}

/// Reads a JSON file (a Chrome trace or a memory timeline) from a stream, records as they are
/// parsed: a large file costs memory for what is kept, not for its bytes. `total` is the size
/// of the stream, for progress.
/// With `range`, the trace is then cut to it.
pub fn import_json_stream(
    reader: impl std::io::Read,
    total: u64,
    progress: &dyn Progress,
    range: Option<TraceRange>,
) -> Result<Imported> {
    /// Counts what the parser has read, for progress and cancellation.
    struct Counted<'a, R> {
        inner: R,
        read: u64,
        next_report: u64,
        total: u64,
        progress: &'a dyn Progress,
        cancelled: bool,
    }
    impl<R: std::io::Read> std::io::Read for Counted<'_, R> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.inner.read(buf)?;
            self.read += n as u64;
            if self.read >= self.next_report {
                self.next_report = self.read + (4 << 20);
                if !self.progress.update(self.read.min(self.total) * 9 / 10, self.total) {
                    self.cancelled = true;
                    return Err(std::io::Error::other("cancelled"));
                }
            }
            Ok(n)
        }
    }
    let mut counted = Counted { inner: reader, read: 0, next_report: 0, total, progress, cancelled: false };
    let mut head = Vec::with_capacity(HEAD_BYTES);
    std::io::Read::read_to_end(&mut std::io::Read::take(&mut counted, HEAD_BYTES as u64), &mut head)?;
    if detect(&head)? != Detected::Json {
        return Err(Error::Structure("the file is not JSON".to_owned()));
    }
    let text = head.strip_prefix(&[0xef, 0xbb, 0xbf]).unwrap_or(&head);
    let timeline = memory_timeline::looks_like_timeline(text);
    let chained = std::io::Read::chain(text, &mut counted);
    let result = if timeline {
        memory_timeline::import_json_from(chained, total, progress)
    } else {
        chrome::import_chrome_trace_from(chained, total, progress)
    };
    if counted.cancelled {
        return Err(Error::Cancelled);
    }
    let imported = result?;
    check_devices(&imported.trace)?;
    cut_to(imported, range)
}

/// An error about the content of a container says what the container was.
fn inside(wrappers: &[Wrapper], error: Error) -> Error {
    match (wrappers.last(), error) {
        (Some(wrapper), Error::UnknownFormat(start)) => Error::Structure(format!(
            "the {} data holds none of the formats vramscope reads (a PyTorch memory snapshot pickle, a \
             PyTorch profiler Chrome trace or memory timeline, or a .vtrace); its content starts with {start}",
            wrapper.name()
        )),
        (Some(wrapper), Error::Empty) => Error::Structure(format!("the {} data is empty", wrapper.name())),
        (_, error) => error,
    }
}

fn import_json(data: &[u8], progress: &dyn Progress) -> Result<Imported> {
    let data = data.strip_prefix(&[0xef, 0xbb, 0xbf]).unwrap_or(data);
    let first = data.iter().copied().find(|b| !b.is_ascii_whitespace());
    match first {
        // The Chrome trace is an object with `traceEvents` (or, rarely, a bare array of events);
        // the memory timeline is `[times, sizes]` and the raw export a list of 4-number lists.
        Some(b'{') => chrome::import_chrome_trace(data, progress),
        _ => {
            if memory_timeline::looks_like_timeline(data) {
                memory_timeline::import_json(data, progress)
            } else {
                chrome::import_chrome_trace(data, progress)
            }
        }
    }
}
