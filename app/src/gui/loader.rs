//! Loading a file on a background thread, with progress and cancellation.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError, channel};
use std::time::Instant;

use super::document::Document;

/// How far a load has got.
#[derive(Debug, Default)]
struct Shared {
    done_bytes: AtomicU64,
    total_bytes: AtomicU64,
    cancel: AtomicBool,
}

/// A load in progress.
pub struct Loader {
    /// The file being loaded.
    pub path: PathBuf,
    /// When it started.
    pub started: Instant,
    shared: Arc<Shared>,
    result: Receiver<anyhow::Result<Document>>,
}

/// What a poll of a [`Loader`] found.
pub enum Poll {
    /// Still loading (see [`Loader::progress`]).
    Loading,
    /// Finished.
    Done(anyhow::Result<Document>),
}

impl Loader {
    /// Starts loading `path`; `repaint` is called whenever there is something new to show.
    pub fn start(path: &Path, repaint: impl Fn() + Send + Sync + 'static) -> Self {
        let shared = Arc::new(Shared::default());
        let (send, result) = channel();
        let thread_shared = Arc::clone(&shared);
        let thread_path = path.to_owned();
        let spawned = std::thread::Builder::new().name("vramscope-load".to_owned()).spawn(move || {
            let started = Instant::now();
            let last_percent = AtomicU64::new(u64::MAX);
            let progress = |done: u64, total: u64| {
                thread_shared.done_bytes.store(done, Ordering::Relaxed);
                thread_shared.total_bytes.store(total, Ordering::Relaxed);
                // A repaint per percent is plenty for a progress bar.
                let percent = done.saturating_mul(100) / total.max(1);
                if last_percent.swap(percent, Ordering::Relaxed) != percent {
                    repaint();
                }
                !thread_shared.cancel.load(Ordering::Relaxed)
            };
            let loaded = crate::load::load_with(&thread_path, &progress);
            let read = started.elapsed();
            let document = loaded.map(|loaded| Document::build(loaded, started.elapsed()));
            if std::env::var_os("VRAMSCOPE_TIMINGS").is_some() {
                let total = started.elapsed();
                eprintln!(
                    "vramscope: read and imported in {:.0} ms, analysed in {:.0} ms",
                    read.as_secs_f64() * 1e3,
                    (total - read).as_secs_f64() * 1e3
                );
            }
            // The receiver may be gone (cancelled, or the window closed): nothing to do then.
            let _ = send.send(document);
            repaint();
        });
        let (send_err, failed) = channel();
        if let Err(error) = spawned {
            let _ = send_err.send(Err(anyhow::anyhow!("cannot start a loading thread: {error}")));
            return Self { path: path.to_owned(), started: Instant::now(), shared, result: failed };
        }
        Self { path: path.to_owned(), started: Instant::now(), shared, result }
    }

    /// Asks the load to stop; it ends with an error soon after.
    pub fn cancel(&self) {
        self.shared.cancel.store(true, Ordering::Relaxed);
    }

    /// Whether cancellation was asked for.
    pub fn is_cancelled(&self) -> bool {
        self.shared.cancel.load(Ordering::Relaxed)
    }

    /// Done and total bytes so far.
    pub fn progress(&self) -> (u64, u64) {
        (self.shared.done_bytes.load(Ordering::Relaxed), self.shared.total_bytes.load(Ordering::Relaxed))
    }

    /// Checks on the load without blocking.
    pub fn poll(&self) -> Poll {
        match self.result.try_recv() {
            Ok(result) => Poll::Done(result),
            Err(TryRecvError::Empty) => Poll::Loading,
            Err(TryRecvError::Disconnected) => {
                Poll::Done(Err(anyhow::anyhow!("the loading thread stopped unexpectedly")))
            }
        }
    }
}
