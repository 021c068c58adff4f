//! The analysis of a selected instant, as a background job: the newest request wins.
//!
//! Working out what was alive at an instant replays the trace up to it, which takes a while on
//! millions of events; the UI thread only sends requests and picks up results.

use std::sync::Arc;

use vramscope_trace_format::{DeviceId, Trace};

use super::jobs::Job;
use crate::query::instant::{self, Instant, StackNode};

/// What an instant's analysis is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// Index into the document's devices.
    pub device_index: usize,
    /// The device.
    pub device: DeviceId,
    /// The timeline point.
    pub point: crate::query::timeline::Point,
    /// The event the point follows.
    pub event: Option<usize>,
    /// The point's time.
    pub time_ns: i64,
}

/// An instant's analysis, ready to show.
#[derive(Debug)]
pub struct InstantView {
    /// What it answers.
    pub request: Request,
    /// Everything alive.
    pub instant: Instant,
    /// Live bytes by allocating stack, interpreter and recorder frames hidden.
    pub tree: StackNode,
    /// The same with every frame.
    pub tree_all_frames: StackNode,
    /// The same with Python frames only.
    pub tree_python: StackNode,
    /// Live bytes and blocks by allocation site (`function  file:line`), largest first.
    pub by_site: Vec<instant::SiteBytes>,
}

/// The instant being analysed, and the newest one asked for meanwhile.
pub struct Worker {
    trace: Arc<Trace>,
    repaint: Arc<dyn Fn() + Send + Sync>,
    running: Option<(Request, Job<InstantView>)>,
    /// Asked for while another was running: started when that one ends. Requests in between
    /// (a scrubber sends many) are dropped.
    queued: Option<Request>,
    /// The last request made.
    pending: Option<Request>,
}

impl Worker {
    /// A worker over `trace`; `repaint` is called when a result is ready.
    pub fn start(trace: Arc<Trace>, repaint: impl Fn() + Send + Sync + 'static) -> Self {
        Self { trace, repaint: Arc::new(repaint), running: None, queued: None, pending: None }
    }

    /// Asks for an instant (nothing happens if it is the one pending).
    pub fn request(&mut self, request: Request) {
        if self.pending != Some(request) {
            self.pending = Some(request);
            if self.running.is_some() {
                self.queued = Some(request);
            } else {
                self.run(request);
            }
        }
    }

    fn run(&mut self, request: Request) {
        let trace = Arc::clone(&self.trace);
        let repaint = Arc::clone(&self.repaint);
        // Without a thread the UI still works, only slower: the analysis runs here then.
        let fallback_trace = Arc::clone(&self.trace);
        let job = Job::spawn(
            "instant",
            move || repaint(),
            move |_| analyse(&trace, request),
            move |_| analyse(&fallback_trace, request),
        );
        self.running = Some((request, job));
    }

    /// The newest finished result, if one came in.
    pub fn poll(&mut self) -> Option<Arc<InstantView>> {
        let (request, job) = self.running.as_ref()?;
        let request = *request;
        let result = job.poll()?;
        self.running = None;
        if let Some(next) = self.queued.take() {
            self.run(next);
        }
        if self.pending == Some(request) {
            self.pending = None;
        }
        // A thread that died leaves the instant unanswered; asking again retries.
        result.ok().map(Arc::new)
    }

    /// Whether a request is still being worked on.
    pub fn is_busy(&self) -> bool {
        self.pending.is_some()
    }
}

/// Analyses one instant (what the worker runs; public for tests and screenshots).
pub fn analyse(trace: &Trace, request: Request) -> InstantView {
    let instant = instant::instant(trace, request.device, request.event, request.time_ns);
    let tree = instant::stack_tree(trace, &instant.blocks, &|file, function| !instant::is_noise_frame(file, function));
    let tree_all_frames = instant::stack_tree(trace, &instant.blocks, &|_, _| true);
    let tree_python = instant::stack_tree(trace, &instant.blocks, &|file, function| {
        (file.ends_with(".py") || file.starts_with('<')) && !instant::is_noise_frame(file, function)
    });
    let by_site = instant::by_site(trace, &instant.blocks);
    InstantView { request, instant, tree, tree_all_frames, tree_python, by_site }
}
