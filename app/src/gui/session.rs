//! What the window is looking at, apart from how it is drawn: the open document and the run to
//! compare it with, the process and device chosen, the selected instant, and the background jobs
//! that load, switch and analyse. The window's chrome (menus, toolbar, status bar, help) and the
//! views read it and call its methods; none of it draws.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use vramscope_trace_format::{ProcessId, Trace};

use super::compare_view::Compare;
use super::document::{DeviceData, Document};
use super::jobs::Job;
use super::loader::{Loader, Poll};
use super::worker::{InstantView, Request, Worker};

/// The processes of a distributed run as it was opened, while the document may show one.
struct Processes {
    /// The whole run (shared with the document while it shows all processes).
    whole: Arc<Trace>,
    /// The process shown (`None`: all).
    chosen: Option<usize>,
}

/// Another process of the run being prepared.
struct Switch {
    /// The process shown before (restored if the switch fails).
    previous: Option<usize>,
    job: Job<Result<Document, String>>,
}

/// What changed in a poll, for the window to follow.
#[derive(Debug, PartialEq, Eq)]
pub enum Change {
    /// A file finished loading (for the recent files).
    Opened(PathBuf),
    /// A new document is shown (a file, or another process of the run): views start afresh.
    NewDocument,
    /// A second run is loaded and being compared.
    CompareStarted,
}

/// The open trace and everything worked out about it.
#[derive(Default)]
pub struct Session {
    /// The open trace.
    pub doc: Option<Document>,
    processes: Option<Processes>,
    loader: Option<Loader>,
    /// A second trace loading, to compare with the first.
    second_loader: Option<Loader>,
    /// A second trace loaded before the first was: compared once the first is there.
    pending_second: Option<Document>,
    /// Another process of the run being prepared, and the one shown before it.
    switching: Option<Switch>,
    /// The second run, when comparing.
    pub compare: Option<Compare>,
    /// Errors to show until dismissed.
    pub errors: Vec<String>,
    /// Index into the document's devices.
    pub device_index: usize,
    /// The selected timeline point (`None`: none yet).
    pub selected_point: Option<usize>,
    worker: Option<Worker>,
    /// The analysis of the selected instant, once ready.
    pub instant: Option<Arc<InstantView>>,
}

fn repainter(ctx: &egui::Context) -> impl Fn() + Send + Sync + 'static {
    let ctx = ctx.clone();
    move || ctx.request_repaint()
}

impl Session {
    /// Starts loading `path` in the background (a load under way is cancelled).
    pub fn open(&mut self, ctx: &egui::Context, path: &Path) {
        self.adopt_loader(Loader::start(path, repainter(ctx)));
    }

    /// Shows a load started elsewhere (before the window existed).
    pub fn adopt_loader(&mut self, loader: Loader) {
        if let Some(old) = self.loader.replace(loader) {
            old.cancel();
        }
    }

    /// Starts loading `path` as the run to compare the open one with.
    pub fn open_second(&mut self, ctx: &egui::Context, path: &Path) {
        if let Some(old) = self.second_loader.replace(Loader::start(path, repainter(ctx))) {
            old.cancel();
        }
    }

    /// Cancels every load under way.
    pub fn cancel_loads(&self) {
        for loader in self.loader.iter().chain(self.second_loader.iter()) {
            loader.cancel();
        }
    }

    /// The load to show progress for, if any.
    pub fn loading(&self) -> Option<&Loader> {
        self.loader.as_ref().or(self.second_loader.as_ref())
    }

    /// Whether a file is loading or another process is being prepared.
    pub fn is_loading(&self) -> bool {
        self.loader.is_some() || self.second_loader.is_some() || self.pending_second.is_some() || self.is_switching()
    }

    /// Whether another process of the run is being prepared.
    pub fn is_switching(&self) -> bool {
        self.switching.is_some()
    }

    /// Whether the selected instant's analysis (or a comparison) is still being computed.
    pub fn is_analysing(&self) -> bool {
        self.worker.as_ref().is_some_and(Worker::is_busy) || self.compare.as_ref().is_some_and(Compare::is_busy)
    }

    /// Picks up what the background jobs finished; says what changed.
    pub fn poll(&mut self, ctx: &egui::Context) -> Vec<Change> {
        let mut changes = Vec::new();
        if let Some((path, result)) = take_finished(&mut self.loader) {
            match result {
                Ok(doc) => {
                    changes.push(Change::Opened(path));
                    self.processes = (doc.trace.metadata.processes.len() > 1)
                        .then(|| Processes { whole: Arc::clone(&doc.trace), chosen: None });
                    self.switching = None;
                    self.set_document(ctx, doc);
                    changes.push(Change::NewDocument);
                }
                Err(error) => self.errors.push(error),
            }
        }
        if let Some(switch) = &self.switching
            && let Some(result) = switch.job.poll()
        {
            let previous = switch.previous;
            self.switching = None;
            match result.and_then(|r| r) {
                Ok(doc) => {
                    self.set_document(ctx, doc);
                    changes.push(Change::NewDocument);
                }
                Err(error) => {
                    if let Some(processes) = &mut self.processes {
                        processes.chosen = previous;
                    }
                    self.errors.push(error);
                }
            }
        }
        if let Some((path, result)) = take_finished(&mut self.second_loader) {
            match result {
                Ok(doc) => {
                    changes.push(Change::Opened(path));
                    self.pending_second = Some(doc);
                }
                Err(error) => self.errors.push(error),
            }
        }
        // Nothing to compare with: the first run failed to load (its error is shown).
        if self.doc.is_none() && self.loader.is_none() {
            self.pending_second = None;
        }
        if self.loader.is_none()
            && let Some(a) = &self.doc
            && let Some(b) = self.pending_second.take()
        {
            self.compare = Some(Compare::new(a, self.device_index, b, repainter(ctx)));
            changes.push(Change::CompareStarted);
        }
        if let Some(compare) = &mut self.compare {
            compare.poll();
        }
        if let Some(view) = self.worker.as_mut().and_then(Worker::poll) {
            self.instant = Some(view);
        }
        changes
    }

    /// Shows a loaded document, selecting the device where the question is and its peak.
    pub fn set_document(&mut self, ctx: &egui::Context, doc: Document) {
        self.worker = Some(Worker::start(Arc::clone(&doc.trace), repainter(ctx)));
        let title = format!("{} — vramscope", doc.file_name());
        ctx.send_viewport_cmd(egui::ViewportCommand::Title(title));
        // The device that ran out of memory first, else the one with the highest peak.
        let peaks = doc.devices.iter().map(|d| (d.device, d.timeline.values(d.peak_point).0));
        let focus = crate::analysis::summary::focus_device(&doc.trace, peaks);
        self.device_index = doc.devices.iter().position(|d| Some(d.device) == focus).unwrap_or(0);
        self.doc = Some(doc);
        self.compare = None;
        self.instant = None;
        self.jump_to_peak();
    }

    /// Closes the document (and the run compared with it).
    pub fn close(&mut self, ctx: &egui::Context) {
        self.doc = None;
        self.processes = None;
        self.switching = None;
        self.compare = None;
        self.worker = None;
        self.instant = None;
        self.selected_point = None;
        ctx.send_viewport_cmd(egui::ViewportCommand::Title("vramscope".to_owned()));
    }

    /// The device shown.
    pub fn device(&self) -> Option<&DeviceData> {
        self.doc.as_ref().and_then(|d| d.devices.get(self.device_index))
    }

    /// Shows another device of the document (its data is precomputed: nothing to wait for but
    /// the analysis of its peak).
    pub fn choose_device(&mut self, index: usize) {
        if index != self.device_index && self.doc.as_ref().is_some_and(|d| index < d.devices.len()) {
            self.device_index = index;
            self.jump_to_peak();
        }
    }

    /// The run's processes and the one shown (`None`: all), when it has several.
    pub fn processes(&self) -> Option<(&Trace, Option<usize>)> {
        self.processes.as_ref().map(|p| (&*p.whole, p.chosen))
    }

    /// Shows one process of the run (`None`: all of them), prepared on a background job; the
    /// document shown meanwhile stays. All processes share the trace as opened; one process is
    /// that process's part of it.
    pub fn choose_process(&mut self, ctx: &egui::Context, chosen: Option<usize>) {
        let (Some(processes), Some(doc)) = (&mut self.processes, &self.doc) else { return };
        if processes.chosen == chosen {
            return;
        }
        let previous = std::mem::replace(&mut processes.chosen, chosen);
        let whole = Arc::clone(&processes.whole);
        let origin = doc.origin();
        let job = Job::spawn(
            "process",
            repainter(ctx),
            move |_| {
                let trace = match chosen {
                    Some(index) => Arc::new(whole.of_process(ProcessId(index as u32))),
                    None => whole,
                };
                Ok(Document::build_shared(trace, origin))
            },
            Err,
        );
        self.switching = Some(Switch { previous, job });
    }

    /// Selects the allocated peak of the current device.
    pub fn jump_to_peak(&mut self) {
        if let Some(point) = self.device().map(|d| d.peak_point) {
            self.select(point);
        }
    }

    /// Selects a timeline point and asks for its analysis.
    pub fn select(&mut self, point: usize) {
        let Some(device) = self.device() else { return };
        let point = point.min(device.timeline.len().saturating_sub(1));
        let request = Request {
            device_index: self.device_index,
            device: device.device,
            point,
            event: device.timeline.event(point),
            time_ns: device.timeline.time_ns(point),
        };
        self.selected_point = Some(point);
        if let Some(worker) = &mut self.worker {
            worker.request(request);
        }
    }
}

/// A finished load's file and result (`Err` with the message to show; nothing when cancelled).
fn take_finished(slot: &mut Option<Loader>) -> Option<(PathBuf, Result<Document, String>)> {
    let loader = slot.as_ref()?;
    let Poll::Done(result) = loader.poll() else { return None };
    let cancelled = loader.is_cancelled();
    let path = loader.path.clone();
    *slot = None;
    // Cancelled: whatever came back is not wanted any more.
    if cancelled {
        return None;
    }
    Some((path, result.map_err(|error| format!("{error:#}"))))
}
