//! Background jobs: work that would stall the window (loading, advice, comparison, the analysis
//! of an instant) runs on a named thread of its own; the UI thread starts it, polls it once a
//! frame, shows its progress and may cancel it.
//!
//! Every job of the app goes through [`Job::spawn`], so each one is named, can be cancelled, and
//! reports a thread that could not start or that died as an error rather than hanging.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError, channel};
use std::time::Instant;

/// The least time between two repaints that progress asks for.
const REPAINT_EVERY_MS: u64 = 500;

/// What a job and the UI thread share.
#[derive(Default)]
struct Shared {
    done: AtomicU64,
    total: AtomicU64,
    cancel: AtomicBool,
    /// The last progress percentage that asked for a repaint.
    percent: AtomicU64,
    /// When progress last asked for a repaint, in milliseconds after the job started.
    repainted_ms: AtomicU64,
    /// When the job started.
    started: std::sync::OnceLock<Instant>,
}

/// The job's side: report progress, see whether to stop.
pub struct Progress {
    shared: Arc<Shared>,
    repaint: Arc<dyn Fn() + Send + Sync>,
}

impl Progress {
    /// Records `done` of `total` units; returns whether to go on (false once cancelled).
    /// Repaints at most once per percent and twice a second: on a software renderer a frame
    /// of the window costs tens of milliseconds of both cores, taken from the job.
    pub fn report(&self, done: u64, total: u64) -> bool {
        self.shared.done.store(done, Ordering::Relaxed);
        self.shared.total.store(total, Ordering::Relaxed);
        let percent = done.saturating_mul(100) / total.max(1);
        if self.shared.percent.swap(percent, Ordering::Relaxed) != percent {
            let now_ms = self.shared.started.get_or_init(Instant::now).elapsed().as_millis() as u64;
            let last = self.shared.repainted_ms.load(Ordering::Relaxed);
            if now_ms >= last + REPAINT_EVERY_MS || done >= total {
                self.shared.repainted_ms.store(now_ms, Ordering::Relaxed);
                (self.repaint)();
            }
        }
        !self.is_cancelled()
    }

    /// Whether the UI asked the job to stop.
    pub fn is_cancelled(&self) -> bool {
        self.shared.cancel.load(Ordering::Relaxed)
    }
}

/// A job in progress, or finished and not yet picked up.
pub struct Job<T> {
    /// When it started.
    pub started: Instant,
    shared: Arc<Shared>,
    result: Receiver<T>,
    name: &'static str,
}

impl<T: Send + 'static> Job<T> {
    /// Runs `work` on a thread named `vramscope-{name}`; `repaint` is called when it reports
    /// progress and when it is done, so the window polls it.
    ///
    /// If no thread can be started, the job is finished at once with `failed(why)`.
    pub fn spawn(
        name: &'static str,
        repaint: impl Fn() + Send + Sync + 'static,
        work: impl FnOnce(&Progress) -> T + Send + 'static,
        failed: impl FnOnce(String) -> T,
    ) -> Self {
        let shared = Arc::new(Shared { percent: AtomicU64::new(u64::MAX), ..Shared::default() });
        let (send, result) = channel();
        let progress = Progress { shared: Arc::clone(&shared), repaint: Arc::new(repaint) };
        let spawned = std::thread::Builder::new().name(format!("vramscope-{name}")).spawn(move || {
            let value = work(&progress);
            // The job may have been dropped (cancelled, or the window closed): nothing to do then.
            let _ = send.send(value);
            (progress.repaint)();
        });
        let result = match spawned {
            Ok(_) => result,
            Err(error) => {
                let (send, result) = channel();
                let _ = send.send(failed(format!("cannot start a thread for {name}: {error}")));
                result
            }
        };
        Self { started: Instant::now(), shared, result, name }
    }

    /// Asks the job to stop; it sees this through [`Progress`].
    pub fn cancel(&self) {
        self.shared.cancel.store(true, Ordering::Relaxed);
    }

    /// Whether cancellation was asked for.
    pub fn is_cancelled(&self) -> bool {
        self.shared.cancel.load(Ordering::Relaxed)
    }

    /// Units done and in all, as last reported.
    pub fn progress(&self) -> (u64, u64) {
        (self.shared.done.load(Ordering::Relaxed), self.shared.total.load(Ordering::Relaxed))
    }

    /// The result once there is one (`Err` with a message when the thread died without one).
    /// A job's result is handed out once.
    pub fn poll(&self) -> Option<Result<T, String>> {
        match self.result.try_recv() {
            Ok(value) => Some(Ok(value)),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => Some(Err(format!("the {} thread stopped unexpectedly", self.name))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn wait<T: Send + 'static>(job: &Job<T>) -> Result<T, String> {
        let started = Instant::now();
        loop {
            if let Some(result) = job.poll() {
                return result;
            }
            assert!(started.elapsed() < Duration::from_secs(10), "the job never finished");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_job_reports_progress_can_be_cancelled_and_a_death_is_an_error() {
        let job = Job::spawn("test", || {}, |_| 6 * 7, |_| 0);
        assert_eq!(wait(&job), Ok(42));
        assert!(job.poll().is_some_and(|r| r.is_err()), "a result is handed out once");

        let (go, gate) = channel::<()>();
        let job = Job::spawn(
            "test",
            || {},
            move |progress| {
                progress.report(3, 4);
                let _ = gate.recv();
                progress.is_cancelled()
            },
            |_| false,
        );
        while job.progress() != (3, 4) {
            std::thread::sleep(Duration::from_millis(1));
        }
        job.cancel();
        assert!(job.is_cancelled());
        go.send(()).expect("the job waits");
        assert_eq!(wait(&job), Ok(true), "the job saw the cancellation");

        let job: Job<u8> = Job::spawn("test", || {}, |_| panic!("the work fails"), |_| 0);
        let error = wait(&job).expect_err("a thread that died is an error");
        assert!(error.contains("test thread stopped"), "{error}");
    }
}
