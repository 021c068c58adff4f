//! Loading any supported file, with a progress bar on a terminal and errors that name the file.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use vramscope_trace_format::import::Wrapper;
use vramscope_trace_format::{Progress, SourceFormat, Trace, import, import_owned};

use crate::mapped::MappedFile;

/// Files at least this large are mapped rather than read.
const MAP_AT_BYTES: u64 = 64 << 20;
/// How far behind the parser's position pages stay resident (it may look back a little).
const KEEP_BEHIND_BYTES: u64 = 16 << 20;

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

/// A terminal progress bar over bytes; hidden when stderr is not a terminal.
pub fn progress_bar(total: u64, message: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{msg} [{bar:30}] {binary_bytes}/{binary_total_bytes} ({eta})") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(message.to_owned());
    bar
}

/// Reads a file of any supported format with a caller-provided progress sink.
pub fn load_with(path: &Path, progress: &dyn Progress) -> Result<LoadedTrace> {
    if crate::sample::is_sample(path) {
        let imported = import(crate::sample::BYTES, progress).context("cannot load the built-in sample")?;
        return Ok(LoadedTrace {
            trace: imported.trace,
            warnings: imported.warnings,
            path: path.to_owned(),
            file_bytes: crate::sample::BYTES.len() as u64,
            format: imported.format,
            wrappers: imported.wrappers,
        });
    }
    let cannot_read = || format!("cannot read {}", path.display());
    let file = std::fs::File::open(path).with_context(cannot_read)?;
    let file_bytes = file.metadata().with_context(cannot_read)?.len();
    if file_bytes == 0 {
        bail!("{}: the file is empty", path.display());
    }
    let cannot_load = || format!("cannot load {}", path.display());
    let imported = if file_bytes >= MAP_AT_BYTES {
        let mapped = MappedFile::map(&file).with_context(cannot_read)?;
        let progress = |done: u64, total: u64| {
            mapped.release_before(done.saturating_sub(KEEP_BEHIND_BYTES) as usize);
            progress.update(done, total)
        };
        import(mapped.bytes(), &progress).with_context(cannot_load)?
    } else {
        let mut data = Vec::with_capacity(file_bytes as usize);
        std::io::Read::read_to_end(&mut &file, &mut data).with_context(cannot_read)?;
        // The bytes are dropped as soon as they are parsed: less memory at the peak.
        import_owned(data, progress).with_context(cannot_load)?
    };
    if std::env::var_os("VRAMSCOPE_TIMINGS").is_some() {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let memory: Vec<&str> = status.lines().filter(|l| l.starts_with("VmHWM") || l.starts_with("VmRSS")).collect();
        eprintln!("vramscope: imported {}: {}", path.display(), memory.join(", "));
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

/// Reads a file of any supported format, showing a progress bar on a terminal.
pub fn load(path: &Path) -> Result<LoadedTrace> {
    let size = std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?.len();
    let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
    let bar = progress_bar(size, &format!("reading {name}"));
    let result = load_with(path, &|done: u64, _total: u64| {
        bar.set_position(done);
        true
    });
    bar.finish_and_clear();
    result
}
