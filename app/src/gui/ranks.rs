//! A run of several ranks in the app: its files read in the background, several at a time, each
//! rank shown as it arrives with its figures and an outline of its timeline (what the ranks
//! view draws), then numbered and summed up once all are read. The rank chosen opens in the
//! other views on its own: no view mixes the blocks of two processes.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use vramscope_trace_format::{Clock, DeviceId, Trace};

use super::jobs::Job;
use crate::query::replay;
use crate::query::run::{self, Part, RankFrom, RankSummary, RunSummary};

/// How many columns a rank's outline keeps: enough for a row of the ranks view, small enough
/// for a thousand ranks.
pub const OUTLINE_COLUMNS: usize = 480;

/// A rank's memory over time, boiled down to a row's worth of columns.
#[derive(Clone, Debug, Default)]
pub struct Outline {
    /// Its first and last point's times (ns on its clock).
    pub span_ns: (i64, i64),
    /// Per column of equal time: the most allocated and reserved bytes in it (`None`: no point
    /// falls in it; the one before holds).
    pub columns: Vec<Option<(u64, u64)>>,
}

/// A stretch of a replay: its first time, the most allocated and reserved bytes in it, and the
/// bytes at its end.
#[derive(Clone, Copy)]
struct Stretch {
    time_ns: i64,
    most: (u64, u64),
    end: (u64, u64),
}

impl Outline {
    /// The outline of `device`'s memory in `trace`: its replay (allocated and reserved only, no
    /// categories) folded into columns of equal time as it goes.
    pub fn of(trace: &Trace, device: DeviceId) -> Self {
        let mut stretches: Vec<Stretch> = Vec::new();
        let (mut first, mut last) = (i64::MAX, i64::MIN);
        replay::replay(trace, device, |_, p| {
            first = first.min(p.time_ns);
            last = last.max(p.time_ns);
            let now = (p.allocated_bytes, p.reserved_bytes);
            stretches.push(Stretch { time_ns: p.time_ns, most: now, end: now });
            // Bounded: folded into finer columns than drawn whenever it grows past a few
            // columns' worth (a peak moves by at most an eighth of a column).
            if stretches.len() >= OUTLINE_COLUMNS * 64 {
                stretches = fold(&stretches, first, last, OUTLINE_COLUMNS * 8);
            }
        });
        if stretches.is_empty() {
            return Self::default();
        }
        let mut columns: Vec<Option<(u64, u64)>> = vec![None; OUTLINE_COLUMNS];
        let mut ends: Vec<Option<(u64, u64)>> = vec![None; OUTLINE_COLUMNS];
        for s in fold(&stretches, first, last, OUTLINE_COLUMNS) {
            let c = column_of(s.time_ns, first, last, OUTLINE_COLUMNS);
            columns[c] = Some(s.most);
            ends[c] = Some(s.end);
        }
        // A column no event falls in holds what the one before ended with.
        let mut held = None;
        for (column, end) in columns.iter_mut().zip(&ends) {
            if column.is_none() {
                *column = held;
            }
            held = end.or(held);
        }
        Self { span_ns: (first, last), columns }
    }
}

/// The column of `columns` equal ones over `first..=last` that time `t` falls in.
fn column_of(t: i64, first: i64, last: i64, columns: usize) -> usize {
    let span = (last - first).max(1) as f64;
    (((t - first) as f64 / span * columns as f64) as usize).min(columns - 1)
}

/// The stretches merged into at most `columns` equal columns of time.
fn fold(stretches: &[Stretch], first: i64, last: i64, columns: usize) -> Vec<Stretch> {
    let mut out: Vec<(usize, Stretch)> = Vec::with_capacity(columns);
    for s in stretches {
        let c = column_of(s.time_ns, first, last, columns);
        match out.last_mut() {
            Some((col, merged)) if *col == c => {
                merged.most = (merged.most.0.max(s.most.0), merged.most.1.max(s.most.1));
                merged.end = s.end;
            }
            _ => out.push((c, *s)),
        }
    }
    out.into_iter().map(|(_, s)| s).collect()
}

/// One rank of the run: where it is read from, its figures and its outline.
#[derive(Debug)]
pub struct RankRow {
    /// Its file.
    pub path: PathBuf,
    /// Its process in that file, when the file is a recording of several ranks.
    pub process: Option<usize>,
    /// Its figures (their `rank` is the run's to set: see [`RunState::rows`]).
    pub figures: RankSummary,
    /// Its memory over time.
    pub outline: Outline,
    /// Whether its times are real (else event indices).
    pub has_clock: bool,
}

impl RankRow {
    /// Where its timeline is aligned with the others': its first iteration, else its first
    /// event.
    pub fn align_ns(&self) -> i64 {
        self.figures.first_iteration_ns.or(self.figures.first_event_ns).unwrap_or(self.outline.span_ns.0)
    }
}

/// The rows of one file: each rank of a recording of several, else the file.
fn rows_of(path: &Path, parts: Vec<Part<Trace>>) -> Vec<Part<Arc<RankRow>>> {
    parts
        .into_iter()
        .map(|part| {
            let process = part.process().map(|p| p as usize);
            part.map(|trace, source| {
                let figures = run::figures(&trace, source);
                let outline = Outline::of(&trace, figures.peak.device);
                let has_clock = trace.metadata.clock != Clock::EventIndex;
                Arc::new(RankRow { path: path.to_owned(), process, figures, outline, has_clock })
            })
        })
        .collect()
}

/// A run read and numbered.
#[derive(Clone)]
pub struct Finished {
    /// Its ranks, by number.
    pub rows: Vec<(u32, RankFrom, Arc<RankRow>)>,
    /// The run summed up.
    pub summary: Option<RunSummary>,
    /// What its reader should know (guessed numbers, repeated ranks, files left out), in words.
    pub notes: Vec<String>,
    /// `file: what` for the files' warnings.
    pub warnings: Vec<String>,
}

/// Numbers the parts and sums the run up.
fn finish(parts: Vec<Part<Arc<RankRow>>>, warnings: Vec<String>, skipped: &[String]) -> Finished {
    let (numbered, notes) = run::number(parts);
    let rows: Vec<(u32, RankFrom, Arc<RankRow>)> =
        numbered.into_iter().map(|(rank, from, _, row)| (rank, from, row)).collect();
    let figures =
        rows.iter().map(|(rank, from, row)| RankSummary { rank: *rank, rank_from: *from, ..row.figures.clone() });
    let summary = run::sum_up(figures.collect());
    Finished { rows, summary, notes: crate::words::run_notes(&notes, skipped), warnings }
}

/// The rows of a recording of several ranks already in memory (it is kept, for switching
/// between its ranks without reading it again).
pub fn of_recording(path: &Path, trace: &Trace) -> Option<Finished> {
    let parts = run::split(&path.display().to_string(), trace)?;
    Some(finish(rows_of(path, parts), Vec::new(), &[]))
}

/// The ranks read so far, each with the rank it says it is.
type Arrived = Arc<Mutex<Vec<(Option<u32>, Arc<RankRow>)>>>;

/// How reading a run ended.
pub enum RunPoll {
    /// Read: the rank to show first (the one that peaks highest).
    Read {
        /// Its number.
        worst: Option<u32>,
    },
    /// It could not be read.
    Failed(String),
    /// The user stopped it.
    Cancelled,
}

/// A run in the app: its ranks as far as they are read, and, once all are, the run summed up.
pub struct RunState {
    /// What was opened (files, directories).
    pub paths: Vec<PathBuf>,
    /// The ranks read so far, by the rank each says it is (`None`: not known until all are read).
    arrived: Arrived,
    files_read: Arc<AtomicU64>,
    files_total: u64,
    job: Option<Job<anyhow::Result<Finished>>>,
    /// The run, once read.
    pub finished: Option<Finished>,
    /// The rank shown in the other views.
    pub shown: Option<u32>,
}

impl RunState {
    /// Starts reading the run the paths hold (files, directories of them).
    pub fn start(
        paths: &[PathBuf],
        range: Option<vramscope_trace_format::TraceRange>,
        repaint: impl Fn() + Send + Sync + 'static,
    ) -> anyhow::Result<Self> {
        let files = crate::runs::expand(paths)?;
        let arrived: Arrived = Arc::default();
        let files_read = Arc::new(AtomicU64::new(0));
        let files_total = files.len() as u64;
        let (thread_arrived, thread_read) = (Arc::clone(&arrived), Arc::clone(&files_read));
        let thread_paths = paths.to_vec();
        let repaint = Arc::new(repaint);
        let thread_repaint = Arc::clone(&repaint);
        let job = Job::spawn(
            "run",
            move || repaint(),
            move |progress| {
                let (parts, warnings, skipped) = crate::runs::read_all(&thread_paths, range, |loaded| {
                    if progress.is_cancelled() {
                        return Vec::new();
                    }
                    let parts = run::parts(&loaded.path.display().to_string(), loaded.trace);
                    let rows = rows_of(&loaded.path, parts);
                    if let Ok(mut arrived) = thread_arrived.lock() {
                        arrived.extend(rows.iter().map(|p| (p.rank_hint(), Arc::clone(&p.item))));
                    }
                    thread_read.fetch_add(1, Ordering::Relaxed);
                    thread_repaint();
                    rows
                })?;
                if progress.is_cancelled() {
                    anyhow::bail!("cancelled");
                }
                Ok(finish(parts.into_iter().flatten().collect(), warnings, &skipped))
            },
            |why| Err(anyhow::anyhow!(why)),
        );
        Ok(Self {
            paths: paths.to_vec(),
            arrived,
            files_read,
            files_total,
            job: Some(job),
            finished: None,
            shown: None,
        })
    }

    /// A run already read (a recording of several ranks), showing `shown`.
    pub fn read(paths: Vec<PathBuf>, finished: Finished, shown: Option<u32>) -> Self {
        let files_total = paths.len() as u64;
        Self {
            paths,
            arrived: Arc::default(),
            files_read: Arc::new(AtomicU64::new(files_total)),
            files_total,
            job: None,
            finished: Some(finished),
            shown,
        }
    }

    /// Files read, of all.
    pub fn progress(&self) -> (u64, u64) {
        (self.files_read.load(Ordering::Relaxed), self.files_total)
    }

    /// Whether files are still being read.
    pub fn is_reading(&self) -> bool {
        self.job.is_some()
    }

    /// Stops reading.
    pub fn cancel(&self) {
        if let Some(job) = &self.job {
            job.cancel();
        }
    }

    /// Picks up the finished read.
    pub fn poll(&mut self) -> Option<RunPoll> {
        let job = self.job.as_ref()?;
        let result = job.poll()?;
        let cancelled = job.is_cancelled();
        self.job = None;
        if cancelled {
            return Some(RunPoll::Cancelled);
        }
        Some(match result.map_err(|e| e.to_string()).and_then(|r| r.map_err(|e| format!("{e:#}"))) {
            Ok(finished) => {
                let worst = finished.summary.as_ref().map(|s| s.worst_rank);
                self.finished = Some(finished);
                RunPoll::Read { worst }
            }
            Err(error) => RunPoll::Failed(error),
        })
    }

    /// The ranks to draw: numbered once all are read; before, as they arrive, by the rank each
    /// says (`None`: not yet known).
    pub fn rows(&self) -> Vec<(Option<u32>, Arc<RankRow>)> {
        if let Some(finished) = &self.finished {
            return finished.rows.iter().map(|(rank, _, row)| (Some(*rank), Arc::clone(row))).collect();
        }
        let mut rows = self.arrived.lock().map(|a| a.clone()).unwrap_or_default();
        rows.sort_by(|(ra, a), (rb, b)| {
            (ra.is_none(), ra).cmp(&(rb.is_none(), rb)).then_with(|| a.figures.source.cmp(&b.figures.source))
        });
        rows
    }

    /// The row of `rank`, once numbered.
    pub fn row(&self, rank: u32) -> Option<Arc<RankRow>> {
        let finished = self.finished.as_ref()?;
        finished.rows.iter().find(|r| r.0 == rank).map(|r| Arc::clone(&r.2))
    }
}

#[cfg(test)]
mod tests {
    use vramscope_trace_format::{Event, EventKind};

    use super::*;

    #[test]
    fn an_outline_keeps_each_columns_most_and_holds_through_quiet_columns() {
        // 100 B at t=0, 50 B more at t=10 (150), the first freed at t=11 (50), then nothing
        // until 50 more at t=960 (100): columns of 2 ns over 0..=960.
        let mut trace = Trace::default();
        for (kind, t, address, size) in [
            (EventKind::Alloc, 0, 0x100, 100),
            (EventKind::Alloc, 10, 0x200, 50),
            (EventKind::FreeCompleted, 11, 0x100, 100),
            (EventKind::Alloc, 960, 0x300, 50),
        ] {
            trace.events.push(Event::new(kind, t, 0, address, size));
        }
        let outline = Outline::of(&trace, DeviceId(0));
        assert_eq!(outline.span_ns, (0, 960));
        assert_eq!(outline.columns.len(), OUTLINE_COLUMNS);
        let allocated: Vec<u64> = outline.columns.iter().map(|c| c.map_or(0, |c| c.0)).collect();
        assert_eq!(allocated[0], 100);
        // t=10 and t=11 share column 5: its most is 150, and it ends at 50.
        assert_eq!(allocated[5], 150);
        // No event from t=12 to t=959: each column holds 50.
        assert!(allocated[6..OUTLINE_COLUMNS - 1].iter().all(|&b| b == 50), "{:?}", &allocated[..12]);
        assert_eq!(allocated[OUTLINE_COLUMNS - 1], 100);
        // A long replay is folded as it goes: the highest point survives.
        let mut long = Trace::default();
        for i in 0..200_000u64 {
            let size = if i == 123_457 { 1 << 20 } else { 64 };
            long.events.push(Event::new(EventKind::Alloc, 2 * i as i64, 0, 0x1000 + i * 0x100, size));
            long.events.push(Event::new(EventKind::FreeCompleted, 2 * i as i64 + 1, 0, 0x1000 + i * 0x100, size));
        }
        let outline = Outline::of(&long, DeviceId(0));
        let most = outline.columns.iter().flatten().map(|c| c.0).max();
        assert_eq!(most, Some(1 << 20));
    }
}
