//! Loading a file as a background job, with progress and cancellation.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use vramscope_trace_format::{ProcessId, Trace, TraceRange};

use super::document::{Document, Origin};
use super::jobs::Job;
use super::ranks::{self, Finished};
use crate::load::LoadedTrace;

/// A load in progress.
pub struct Loader {
    /// The file being loaded.
    pub path: PathBuf,
    /// Whether it is one rank of the run open (which stays open).
    pub rank_of_run: bool,
    job: Job<anyhow::Result<Loaded>>,
}

/// A recording of several processes, read: the whole of it (kept, to switch between its
/// processes without reading it again), its run when they are ranks, and the process shown.
pub struct Recording {
    /// The recording.
    pub whole: Arc<Trace>,
    /// Its ranks (`None`: its processes have none; they are shown one at a time all the same).
    pub run: Option<Finished>,
    /// The process shown (the rank that peaks highest).
    pub process: usize,
}

/// A loaded file.
pub struct Loaded {
    /// What to show: the trace, or one rank of a recording of several.
    pub doc: Document,
    /// When it is a recording of several processes: the whole and its ranks.
    pub recording: Option<Recording>,
}

/// What a poll of a [`Loader`] found.
pub enum Poll {
    /// Still loading (see [`Loader::progress`]).
    Loading,
    /// Finished.
    Done(Box<anyhow::Result<Loaded>>),
}

/// The document of a loaded file: the trace, or (a recording of several processes) the one
/// that peaks highest alone, with the whole and its ranks. `outline`: its timelines' categories
/// are left for the window to work out once it shows them.
fn document(loaded: LoadedTrace, started: Instant, outline: bool) -> Loaded {
    if loaded.trace.metadata.recorded_processes() < 2 {
        let doc = if outline {
            Document::build_outline(loaded, started.elapsed())
        } else {
            Document::build(loaded, started.elapsed())
        };
        return Loaded { doc, recording: None };
    }
    let run = ranks::of_recording(&loaded.path, &loaded.trace);
    let process = match &run {
        Some(run) => {
            let worst = run.summary.as_ref().map(|s| s.worst_rank);
            run.rows.iter().find(|r| Some(r.0) == worst).and_then(|r| r.2.process).unwrap_or(0)
        }
        // Processes without ranks (a program's workers, forks): the one that peaks highest.
        None => crate::runs::highest_process(&loaded.trace),
    };
    let (whole, origin) = Origin::of(loaded, started.elapsed());
    let whole = Arc::new(whole);
    let shown = Arc::new(whole.of_process(ProcessId(process as u32)));
    let doc =
        if outline { Document::build_outline_shared(shown, origin) } else { Document::build_shared(shown, origin) };
    Loaded { doc, recording: Some(Recording { whole, run, process }) }
}

impl Loader {
    /// Starts loading `path` (only `range` of it, if given); `repaint` is called whenever there
    /// is something new to show. The document comes as soon as its timelines' curves are
    /// worked out; their categories are for the window to work out then
    /// ([`Document::categories_pending`]).
    pub fn start(path: &Path, range: Option<TraceRange>, repaint: impl Fn() + Send + Sync + 'static) -> Self {
        Self::spawn(path, range, None, true, repaint)
    }

    /// Starts loading `path` as the run to compare the open one with: its document comes whole.
    pub fn start_second(path: &Path, range: Option<TraceRange>, repaint: impl Fn() + Send + Sync + 'static) -> Self {
        Self::spawn(path, range, None, false, repaint)
    }

    /// Starts loading one rank of the run open: the file, or one process of it.
    pub fn start_rank(
        path: &Path,
        range: Option<TraceRange>,
        process: Option<usize>,
        repaint: impl Fn() + Send + Sync + 'static,
    ) -> Self {
        Self::spawn(path, range, Some(process), true, repaint)
    }

    fn spawn(
        path: &Path,
        range: Option<TraceRange>,
        rank: Option<Option<usize>>,
        outline: bool,
        repaint: impl Fn() + Send + Sync + 'static,
    ) -> Self {
        let thread_path = path.to_owned();
        let job = Job::spawn(
            "load",
            repaint,
            move |progress| {
                let started = Instant::now();
                let loaded =
                    crate::load::load_range_with(&thread_path, range, &|done, total| progress.report(done, total));
                let read = started.elapsed();
                let document = loaded.map(|mut loaded| match rank {
                    None => document(loaded, started, outline),
                    Some(process) => {
                        if let Some(p) = process {
                            loaded.trace = loaded.trace.of_process(ProcessId(p as u32));
                        }
                        Loaded { doc: Document::build_outline(loaded, started.elapsed()), recording: None }
                    }
                });
                if std::env::var_os("VRAMSCOPE_TIMINGS").is_some() {
                    let total = started.elapsed();
                    eprintln!(
                        "vramscope: read and imported in {:.0} ms, analysed in {:.0} ms",
                        read.as_secs_f64() * 1e3,
                        (total - read).as_secs_f64() * 1e3
                    );
                }
                document
            },
            |why| Err(anyhow::anyhow!(why)),
        );
        Self { path: path.to_owned(), rank_of_run: rank.is_some(), job }
    }

    /// When the load started.
    pub fn started(&self) -> Instant {
        self.job.started
    }

    /// Asks the load to stop; it ends with an error soon after.
    pub fn cancel(&self) {
        self.job.cancel();
    }

    /// Whether cancellation was asked for.
    pub fn is_cancelled(&self) -> bool {
        self.job.is_cancelled()
    }

    /// Done and total bytes so far.
    pub fn progress(&self) -> (u64, u64) {
        self.job.progress()
    }

    /// Checks on the load without blocking.
    pub fn poll(&self) -> Poll {
        match self.job.poll() {
            None => Poll::Loading,
            Some(Ok(result)) => Poll::Done(Box::new(result)),
            Some(Err(why)) => Poll::Done(Box::new(Err(anyhow::anyhow!(why)))),
        }
    }
}
