//! Opening a run: several files (one per rank), a directory of them, or one recording of several
//! ranks. Files are read in parallel, as many at a time as there are cores.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Result, bail};

use crate::analysis::run::Run;
use crate::load::{self, LoadedTrace};

/// The names a directory's trace files end in.
const TRACE_ENDINGS: [&str; 8] =
    [".vtrace", ".pickle", ".pkl", ".json", ".json.gz", ".pt.trace.json", ".pickle.gz", ".html"];

/// The trace files in `dir`, sorted by name (not its subdirectories).
pub fn files_in(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| anyhow::anyhow!("cannot read the directory {}: {e}", dir.display()))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("").to_ascii_lowercase();
            TRACE_ENDINGS.iter().any(|end| name.ends_with(end)) && !name.starts_with('.')
        })
        .collect();
    files.sort();
    if files.is_empty() {
        bail!(
            "{}: a directory with no trace files in it (.vtrace, .pickle, profiler .json): give a trace, a directory \
             of them, or '-' for standard input",
            dir.display()
        );
    }
    Ok(files)
}

/// The files `paths` name: each file (true: named), and the trace files of each directory.
pub fn expand(paths: &[PathBuf]) -> Result<Vec<(PathBuf, bool)>> {
    let mut out = Vec::new();
    for path in paths {
        if path.is_dir() {
            out.extend(files_in(path)?.into_iter().map(|f| (f, false)));
        } else {
            out.push((path.clone(), true));
        }
    }
    Ok(out)
}

/// Loads `files`, as many at a time as there are cores; each result in its file's place.
pub fn load_all(files: &[PathBuf]) -> Vec<Result<LoadedTrace>> {
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).min(files.len()).max(1);
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<LoadedTrace>>>> = Mutex::new((0..files.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(path) = files.get(i) else { break };
                    let loaded = load::load(path);
                    if let Ok(mut results) = results.lock() {
                        results[i] = Some(loaded);
                    }
                }
            });
        }
    });
    let results = results.into_inner().unwrap_or_default();
    results.into_iter().map(|r| r.unwrap_or_else(|| Err(anyhow::anyhow!("the file was not read")))).collect()
}

/// A run, and the files of its directories that could not be read (skipped: a directory may
/// hold other JSON).
pub struct Opened {
    /// The run.
    pub run: Run,
    /// `file: why` for each file left out.
    pub skipped: Vec<String>,
}

/// The run the paths hold. A file named that cannot be read is an error; one found in a
/// directory is skipped and said.
pub fn open(paths: &[PathBuf]) -> Result<Opened> {
    let files = expand(paths)?;
    let names: Vec<PathBuf> = files.iter().map(|f| f.0.clone()).collect();
    let mut traces = Vec::new();
    let mut skipped = Vec::new();
    for ((path, named), loaded) in files.iter().zip(load_all(&names)) {
        match loaded {
            Ok(l) => traces.push((l.path.display().to_string(), l.trace)),
            Err(e) if *named => return Err(e),
            Err(e) => skipped.push(format!("{}: {e:#}", path.display())),
        }
    }
    if traces.is_empty() {
        bail!("no trace could be read: {}", skipped.join("; "));
    }
    Ok(Opened { run: Run::of(traces), skipped })
}
