//! Opening a run: several files (one per rank), a directory of them, or one recording of several
//! ranks. Files are read in parallel, as many at a time as there are cores.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Result, bail};

use crate::load::{self, LoadedTrace};
use crate::query::run::Run;

/// The names a directory's trace files end in.
const TRACE_ENDINGS: [&str; 7] = [".vtrace", ".pickle", ".pkl", ".pickle.gz", ".json", ".json.gz", ".html"];

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

/// Whether `path` is a directory of trace files (a recording's directory is one trace).
fn directory_of_files(path: &Path) -> bool {
    path.is_dir() && !vramscope_collector::session::is_recording_dir(path)
}

/// The files `paths` name: each file (true: named), and the trace files of each directory.
pub fn expand(paths: &[PathBuf]) -> Result<Vec<(PathBuf, bool)>> {
    let mut out = Vec::new();
    for path in paths {
        if path.is_dir() && vramscope_collector::session::is_recording_dir(path) {
            // A recording's directory is one run, merged as `record` merges it.
            out.push((path.clone(), true));
        } else if path.is_dir() {
            out.extend(files_in(path)?.into_iter().map(|f| (f, false)));
        } else {
            out.push((path.clone(), true));
        }
    }
    Ok(out)
}

/// What reading a file can hold at once, as a multiple of its size: the bytes, the decoded
/// model and the interner's tables (measured: about 2-3x for snapshots, less for `.vtrace`).
const RESIDENT_PER_FILE_BYTE: u64 = 4;

/// How many files to read at once: one per core (`VRAMSCOPE_READ_THREADS` sets it), and no more
/// than the available memory holds while the largest is read.
fn readers(files: &[PathBuf]) -> usize {
    let cores = std::env::var("VRAMSCOPE_READ_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let largest = files.iter().filter_map(|f| std::fs::metadata(f).ok()).map(|m| m.len()).max().unwrap_or(0);
    let by_memory = match vramscope_trace_format::memory::available() {
        Some(available) if largest > 0 => (available / (largest * RESIDENT_PER_FILE_BYTE)).max(1) as usize,
        _ => usize::MAX,
    };
    cores.min(by_memory).min(files.len()).max(1)
}

/// `read` applied to each file, [`readers`] of them at a time; each result in its file's place.
fn in_parallel<T: Send>(files: &[(PathBuf, bool)], read: impl Fn(&Path) -> Result<T> + Sync) -> Vec<Result<T>> {
    let paths: Vec<PathBuf> = files.iter().map(|f| f.0.clone()).collect();
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<T>>>> = Mutex::new((0..files.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..readers(&paths) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(path) = paths.get(i) else { break };
                    let result = read(path);
                    if let Ok(mut results) = results.lock() {
                        results[i] = Some(result);
                    }
                }
            });
        }
    });
    let results = results.into_inner().unwrap_or_default();
    results.into_iter().map(|r| r.unwrap_or_else(|| Err(anyhow::anyhow!("the file was not read")))).collect()
}

/// What was read from the paths: each file's item; a file named that cannot be read is an
/// error, one found in a directory is left out and said (`file: why`; a directory may hold
/// other JSON). `read` runs on the reader that read the file, as soon as it is read.
pub fn read_all<T: Send>(
    paths: &[PathBuf],
    range: Option<vramscope_trace_format::TraceRange>,
    read: impl Fn(LoadedTrace) -> T + Sync,
) -> Result<(Vec<T>, Vec<String>, Vec<String>)> {
    let files = expand(paths)?;
    let results = in_parallel(&files, |path| {
        let loaded = load::load(path, range)?;
        let warnings: Vec<String> = loaded.warnings.iter().map(|w| format!("{}: {w}", path.display())).collect();
        Ok((read(loaded), warnings))
    });
    let (mut items, mut warnings, mut skipped) = (Vec::new(), Vec::new(), Vec::new());
    for ((path, named), result) in files.iter().zip(results) {
        match result {
            Ok((item, w)) => {
                items.push(item);
                warnings.extend(w);
            }
            Err(e) if *named => return Err(e),
            Err(e) => skipped.push(format!("{}: {e:#}", path.display())),
        }
    }
    if items.is_empty() {
        bail!("no trace could be read: {}", skipped.join("; "));
    }
    Ok((items, warnings, skipped))
}

/// A run's ranks' figures (each trace dropped once its figures are taken, so a run of many ranks
/// holds one trace per reader at a time), the notes on its numbering, and the files left out.
pub struct Summed {
    /// The run summed up.
    pub summary: Option<crate::query::run::RunSummary>,
    /// How its ranks were numbered.
    pub notes: Vec<crate::query::run::RunNote>,
    /// `file: why` for each file of a directory left out.
    pub skipped: Vec<String>,
    /// Where each rank is: its file, and its process there when the file holds several.
    pub origins: Vec<(u32, Origin)>,
}

/// Where a rank of a run is read from.
#[derive(Clone, Debug)]
pub struct Origin {
    /// The file.
    pub path: PathBuf,
    /// Its process in the file, when the file is a recording of several ranks.
    pub process: Option<u32>,
    /// The part of the file read (`None`: the whole).
    pub range: Option<vramscope_trace_format::TraceRange>,
}

/// Each rank's item by rank, with where the rank is; the notes on the numbering; the files left
/// out.
pub type EachRank<T> = (Vec<crate::query::run::Numbered<(Origin, T)>>, Vec<crate::query::run::RunNote>, Vec<String>);

/// What `pick` takes of each rank of the run the paths hold, read in parallel and each trace
/// dropped once taken: by rank, with where each rank is, the notes on the numbering, and the
/// files of its directories left out. The files' warnings are said on stderr.
pub fn each_rank<T: Send>(
    paths: &[PathBuf],
    range: Option<vramscope_trace_format::TraceRange>,
    pick: impl Fn(&Path, &vramscope_trace_format::Trace, &str) -> T + Sync,
) -> Result<EachRank<T>> {
    use crate::query::run;
    let (parts, warnings, skipped) = read_all(paths, range, |l| {
        let name = l.path.display().to_string();
        let path = l.path.clone();
        run::parts(&name, l.trace)
            .into_iter()
            .map(|p| {
                let origin = Origin { path: path.clone(), process: p.process(), range };
                p.map(|t, source| (origin, pick(&path, &t, source)))
            })
            .collect::<Vec<_>>()
    })?;
    for warning in &warnings {
        eprintln!("warning: {warning}");
    }
    let (numbered, notes) = run::number(parts.into_iter().flatten().collect());
    Ok((numbered, notes, skipped))
}

/// The figures of the run the paths hold, read in parallel and summed up as they come.
pub fn summaries(paths: &[PathBuf], range: Option<vramscope_trace_format::TraceRange>) -> Result<Summed> {
    use crate::query::run::{self, RankSummary};
    let (numbered, notes, skipped) = each_rank(paths, range, |_, trace, source| run::figures(trace, source))?;
    let mut origins = Vec::with_capacity(numbered.len());
    let mut ranks = Vec::with_capacity(numbered.len());
    for (rank, from, _, (origin, figures)) in numbered {
        origins.push((rank, origin));
        ranks.push(RankSummary { rank, rank_from: from, ..figures });
    }
    Ok(Summed { summary: run::sum_up(ranks), notes, skipped, origins })
}

/// What some paths hold, ready to summarise: one trace, or a run of several ranks summed up.
pub enum Held {
    /// One trace (of one process).
    Trace(Box<LoadedTrace>),
    /// A run of several ranks: several files, a directory of them, or a recording of several.
    Run(Summed),
}

/// What `paths` hold (`range` of each file): one trace, whole, or a run of several ranks summed
/// up with each rank's file dropped once its figures are taken. What `info` and every face that
/// summarises a file or a run start from.
pub fn open_for_summary(paths: &[PathBuf], range: Option<vramscope_trace_format::TraceRange>) -> Result<Held> {
    use crate::query::run;
    if let [one] = paths
        && !directory_of_files(one)
    {
        let loaded = load::load(one, range)?;
        if !run::holds_ranks(&loaded.trace) {
            return Ok(Held::Trace(Box::new(loaded)));
        }
        let name = loaded.path.display().to_string();
        let whole = Run::of(vec![(name, loaded.trace)]);
        let summary = run::summarize(&whole);
        return Ok(Held::Run(Summed { summary, notes: whole.notes, skipped: Vec::new(), origins: Vec::new() }));
    }
    // Each file's figures taken as it is read, and the file dropped.
    Ok(Held::Run(summaries(paths, range)?))
}

/// One rank of a run, read again from where [`summaries`] found it (its file's warnings were
/// said when it was first read).
pub fn read_rank(origin: &Origin) -> Result<vramscope_trace_format::Trace> {
    let trace = load::load(&origin.path, origin.range)?.trace;
    Ok(match origin.process {
        Some(p) => trace.of_process(vramscope_trace_format::ProcessId(p)),
        None => trace,
    })
}

/// A run, what was odd about its files, and the files of its directories left out.
pub struct Opened {
    /// The run.
    pub run: Run,
    /// `file: what` for each file's warnings.
    pub warnings: Vec<String>,
    /// `file: why` for each file left out.
    pub skipped: Vec<String>,
}

impl Opened {
    /// Says the warnings and the files left out on stderr.
    pub fn warn(&self) {
        for warning in &self.warnings {
            eprintln!("warning: {warning}");
        }
        for note in crate::words::run_notes(&[], &self.skipped) {
            eprintln!("warning: {note}");
        }
    }
}

/// The run `range` of the files the paths hold make (one trace is a run of one rank).
pub fn open(paths: &[PathBuf], range: Option<vramscope_trace_format::TraceRange>) -> Result<Opened> {
    let (traces, warnings, skipped) = read_all(paths, range, |l| (l.path.display().to_string(), l.trace))?;
    Ok(Opened { run: Run::of(traces), warnings, skipped })
}

/// The run the paths hold, one rank at a time in rank order, for writers whose output follows
/// that order: a file (a recording of several ranks is one file) is read once, whole; files of
/// several ranks are read twice, first in parallel to number the ranks (each trace dropped at
/// once), then one rank at a time, so a run of many ranks holds one trace at a time. Returns how
/// many ranks there were.
pub fn for_each_rank(
    paths: &[PathBuf],
    range: Option<vramscope_trace_format::TraceRange>,
    mut each: impl FnMut(&crate::query::run::Rank, usize) -> Result<()>,
) -> Result<usize> {
    use crate::query::run::Rank;
    if let [one] = paths
        && !directory_of_files(one)
    {
        let opened = open(paths, range)?;
        opened.warn();
        let count = opened.run.ranks.len();
        for rank in &opened.run.ranks {
            each(rank, count)?;
        }
        return Ok(count);
    }
    let (numbered, notes, skipped) = each_rank(paths, range, |_, _, _| ())?;
    for note in crate::words::run_notes(&notes, &skipped) {
        eprintln!("warning: {note}");
    }
    let count = numbered.len();
    // The last recording read, for its next rank (a recording's ranks are consecutive).
    let mut last: Option<(PathBuf, vramscope_trace_format::Trace)> = None;
    for (rank, from, source, (origin, ())) in numbered {
        let trace = match (origin.process, &last) {
            (Some(p), Some((path, whole))) if *path == origin.path => {
                whole.of_process(vramscope_trace_format::ProcessId(p))
            }
            (Some(p), _) => {
                let whole = read_rank(&Origin { process: None, ..origin.clone() })?;
                let trace = whole.of_process(vramscope_trace_format::ProcessId(p));
                last = Some((origin.path.clone(), whole));
                trace
            }
            (None, _) => read_rank(&origin)?,
        };
        each(&Rank { rank, from, source, trace }, count)?;
    }
    Ok(count)
}

pub use crate::query::documents::RankChosen;

/// The one trace to look at in what `path` holds (`advise`, `report`): the file's; of a run of
/// several ranks (a directory of rank files, or a recording of several), the rank that peaks
/// highest, each rank analysed alone. A directory's files are read for their figures, each
/// dropped once they are taken, and the rank chosen is read again: a run of many ranks holds one
/// trace per reader at a time.
pub fn highest_rank(
    path: &Path,
    range: Option<vramscope_trace_format::TraceRange>,
) -> Result<(LoadedTrace, Option<RankChosen>)> {
    let (summary, origin) = if directory_of_files(path) {
        let summed = summaries(&[path.to_path_buf()], range)?;
        for note in crate::words::run_notes(&summed.notes, &summed.skipped) {
            eprintln!("warning: {note}");
        }
        let Some(summary) = summed.summary else {
            bail!("{}: no rank holds memory events to advise on", path.display());
        };
        let origin = summed.origins.iter().find(|o| o.0 == summary.worst_rank).map(|o| o.1.clone());
        (summary, origin)
    } else {
        let mut loaded = load::load(path, range)?;
        for warning in &loaded.warnings {
            eprintln!("warning: {}: {warning}", path.display());
        }
        if !crate::query::run::holds_ranks(&loaded.trace) {
            return Ok((loaded, None));
        }
        let trace = std::mem::take(&mut loaded.trace);
        let mut run = Run::of(vec![(path.display().to_string(), trace)]);
        let Some(summary) = crate::query::run::summarize(&run) else {
            bail!("{}: no rank holds memory events to advise on", path.display());
        };
        let Some(at) = run.ranks.iter().position(|r| r.rank == summary.worst_rank) else {
            bail!("rank {} is gone", summary.worst_rank)
        };
        loaded.trace = run.ranks.swap_remove(at).trace;
        let peaks = summary.ranks.iter().map(|r| (r.rank, r.peak.peak_allocated_bytes)).collect();
        return Ok((loaded, (summary.ranks.len() > 1).then_some(RankChosen { rank: summary.worst_rank, peaks })));
    };
    let Some(origin) = origin else { bail!("rank {} is gone", summary.worst_rank) };
    let mut loaded = load::load(&origin.path, origin.range)?;
    if let Some(p) = origin.process {
        loaded.trace = std::mem::take(&mut loaded.trace).of_process(vramscope_trace_format::ProcessId(p));
    }
    if summary.ranks.len() == 1 {
        return Ok((loaded, None));
    }
    let peaks = summary.ranks.iter().map(|r| (r.rank, r.peak.peak_allocated_bytes)).collect();
    Ok((loaded, Some(RankChosen { rank: summary.worst_rank, peaks })))
}

/// The process of `trace` whose allocated peak is highest (the first, on ties).
pub fn highest_process(trace: &vramscope_trace_format::Trace) -> usize {
    let peaks = (0..trace.metadata.processes.len()).map(|p| {
        let one = trace.of_process(vramscope_trace_format::ProcessId(p as u32));
        let peak = one.devices().into_iter().map(|d| crate::query::peak::peaks(&one, d).allocated.bytes).max();
        (p, peak.unwrap_or(0))
    });
    crate::query::summary::highest_peak(peaks).unwrap_or(0)
}
