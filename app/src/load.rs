//! Loading any supported file, with a progress bar on a terminal and errors that name the file.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use vramscope_trace_format::{Progress, SourceFormat, Trace, import};

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
    let data = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    if data.is_empty() {
        bail!("{}: the file is empty", path.display());
    }
    let imported = import(&data, progress).with_context(|| format!("cannot load {}", path.display()))?;
    Ok(LoadedTrace {
        trace: imported.trace,
        warnings: imported.warnings,
        path: path.to_owned(),
        file_bytes: data.len() as u64,
        format: imported.format,
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
