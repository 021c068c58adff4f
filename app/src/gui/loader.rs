//! Loading a file as a background job, with progress and cancellation.

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::document::Document;
use super::jobs::Job;

/// A load in progress.
pub struct Loader {
    /// The file being loaded.
    pub path: PathBuf,
    job: Job<anyhow::Result<Document>>,
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
        let thread_path = path.to_owned();
        let job = Job::spawn(
            "load",
            repaint,
            move |progress| {
                let started = Instant::now();
                let loaded = crate::load::load_with(&thread_path, &|done, total| progress.report(done, total));
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
                document
            },
            |why| Err(anyhow::anyhow!(why)),
        );
        Self { path: path.to_owned(), job }
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
            Some(Ok(result)) => Poll::Done(result),
            Some(Err(why)) => Poll::Done(Err(anyhow::anyhow!(why))),
        }
    }
}
