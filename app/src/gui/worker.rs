//! The analysis of a selected instant, on a background thread: the newest request wins.
//!
//! Working out what was alive at an instant replays the trace up to it, which takes a while on
//! millions of events; the UI thread only sends requests and picks up results.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};

use vramscope_trace_format::Trace;

use crate::analysis::instant::{self, Instant, StackNode};

/// What an instant's analysis is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// Index into the document's devices.
    pub device_index: usize,
    /// The device.
    pub device: i16,
    /// The timeline point.
    pub point: usize,
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

/// The worker thread and its mailboxes.
pub struct Worker {
    requests: Sender<Request>,
    results: Receiver<Arc<InstantView>>,
    pending: Option<Request>,
    /// Set when no thread could be started: requests are then answered on the caller's thread.
    inline: Option<(Arc<Trace>, Sender<Arc<InstantView>>)>,
}

impl Worker {
    /// Starts a worker over `trace`; `repaint` is called when a result is ready.
    pub fn start(trace: Arc<Trace>, repaint: impl Fn() + Send + 'static) -> Self {
        let (requests, inbox) = channel::<Request>();
        let (outbox, results) = channel::<Arc<InstantView>>();
        let inline = Some((Arc::clone(&trace), outbox.clone()));
        let spawned = std::thread::Builder::new().name("vramscope-instant".to_owned()).spawn(move || {
            while let Ok(mut request) = inbox.recv() {
                // Skip to the newest request: a scrubber sends many.
                while let Ok(newer) = inbox.try_recv() {
                    request = newer;
                }
                let view = analyse(&trace, request);
                if outbox.send(Arc::new(view)).is_err() {
                    return;
                }
                repaint();
            }
        });
        // Without a thread the UI still works, only slower.
        let inline = if spawned.is_err() { inline } else { None };
        Self { requests, results, pending: None, inline }
    }

    /// Asks for an instant (nothing happens if it is the one pending).
    pub fn request(&mut self, request: Request) {
        if self.pending != Some(request) {
            self.pending = Some(request);
            match &self.inline {
                Some((trace, outbox)) => {
                    let _ = outbox.send(Arc::new(analyse(trace, request)));
                }
                None => {
                    let _ = self.requests.send(request);
                }
            }
        }
    }

    /// The newest finished result, if one came in.
    pub fn poll(&mut self) -> Option<Arc<InstantView>> {
        let mut newest = None;
        while let Ok(view) = self.results.try_recv() {
            newest = Some(view);
        }
        if let Some(view) = &newest
            && self.pending == Some(view.request)
        {
            self.pending = None;
        }
        newest
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
