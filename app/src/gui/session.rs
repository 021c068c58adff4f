//! What the window is looking at, apart from how it is drawn: the open document and the run to
//! compare it with, the process and device chosen, the selected instant, and the background jobs
//! that load, switch and analyse. The window's chrome (menus, toolbar, status bar, help) and the
//! views read it and call its methods; none of it draws.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use vramscope_trace_format::{ProcessId, Trace};

use super::compare::Compare;
use super::document::{DeviceData, Document};
use super::follow::{Follower, Source, Status, Update};
use super::jobs::Job;
use super::loader::{Loaded, Loader, Poll, Recording};
use super::ranks::{RunPoll, RunState};
use super::worker::{InstantView, Request, Worker};

/// The processes of a recording of several, as it was opened, while the document shows one.
struct Processes {
    /// The file.
    path: PathBuf,
    /// The whole recording.
    whole: Arc<Trace>,
    /// The process shown.
    chosen: usize,
}

/// Another process of the run being prepared.
struct Switch {
    /// The process shown before (restored if the switch fails).
    previous: usize,
    job: Job<Result<Document, String>>,
}

/// The growth of each device of a document, worked out on a job.
type GrowthJob = Job<Vec<Option<crate::query::growth::Growth>>>;

/// The categories of a document's timelines built without them, worked out on a job: for each
/// device (by index), its categories, when they were pending.
type CategoriesJob = Job<Vec<Option<crate::query::timeline::Categories>>>;

/// What changed in a poll, for the window to follow.
#[derive(Debug, PartialEq, Eq)]
pub enum Change {
    /// A file finished loading (for the recent files).
    Opened(PathBuf),
    /// A new document is shown (a file, or another process of the run): views start afresh.
    NewDocument,
    /// A second run is loaded and being compared.
    CompareStarted,
    /// The run followed live has a newer state: same document, more of it.
    Updated,
}

/// The open trace and everything worked out about it.
#[derive(Default)]
pub struct Session {
    /// The part of each file read (the files opened with it, a rank of their run, a comparison);
    /// `None`: the whole.
    pub range: Option<vramscope_trace_format::TraceRange>,
    /// The open trace (one rank, when a run of several is open).
    pub doc: Option<Document>,
    /// The run of several ranks open, if one is.
    pub run: Option<RunState>,
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
    pub selected_point: Option<crate::query::timeline::Point>,
    worker: Option<Worker>,
    /// The analysis of the selected instant, once ready.
    pub instant: Option<Arc<InstantView>>,
    /// A run followed as it goes (`record --live`, `open --follow`).
    pub live: Option<Follower>,
    /// Whether a followed run's newest state is selected as it arrives (until the user picks
    /// another instant).
    pub follow_newest: bool,
    /// The growth across iterations of the document's devices, being worked out (with the
    /// trace it is for).
    growth: Option<(Arc<Trace>, GrowthJob)>,
    /// The categories of the document's timelines, when it came without them (a file opened
    /// shows its curves first), being worked out (with the trace they are for).
    categories: Option<(Arc<Trace>, CategoriesJob)>,
    /// Whether a document just opened has its growth to be worked out once its first instant
    /// is: the two jobs one after the other, not both at once (each replays the whole trace, and
    /// on tens of millions of events their working memory together is hundreds of MB). A run
    /// followed live starts it with each state, as the instants keep coming.
    growth_wanted: bool,
}

fn repainter(ctx: &egui::Context) -> impl Fn() + Send + Sync + 'static {
    let ctx = ctx.clone();
    move || ctx.request_repaint()
}

impl Session {
    /// Starts loading `path` in the background (a load under way is cancelled): a trace, or a
    /// directory of one run's rank files.
    pub fn open(&mut self, ctx: &egui::Context, path: &Path) {
        self.open_paths(ctx, &[path.to_owned()]);
    }

    /// Starts loading what `paths` name: one trace, or a run of several (rank files, directories
    /// of them), whose ranks are read in parallel and shown as they arrive.
    pub fn open_paths(&mut self, ctx: &egui::Context, paths: &[PathBuf]) {
        self.live = None;
        if let [one] = paths
            && !one.is_dir()
        {
            self.adopt_loader(Loader::start(one, self.range, repainter(ctx)));
            return;
        }
        match RunState::start(paths, self.range, repainter(ctx)) {
            Ok(run) => {
                self.cancel_loads();
                self.loader = None;
                self.close_document(ctx);
                self.run = Some(run);
            }
            Err(error) => self.errors.push(format!("{error:#}")),
        }
    }

    /// Follows a run as it goes: the document is its newest state, updated as it arrives.
    pub fn follow(&mut self, ctx: &egui::Context, source: Source) {
        self.cancel_loads();
        self.loader = None;
        self.run = None;
        self.close_document(ctx);
        match super::follow::start(source, repainter(ctx)) {
            Ok(follower) => {
                self.live = Some(follower);
                self.follow_newest = true;
            }
            Err(error) => self.errors.push(format!("cannot follow the run: {error:#}")),
        }
    }

    /// Selects the newest state of the run followed, and keeps doing so as it grows.
    pub fn follow_newest_now(&mut self) {
        self.follow_newest = true;
        if let Some(last) = self.device().map(|d| d.timeline.last_point()) {
            self.select(last);
        }
    }

    /// Shows a newer state of the run followed, keeping the device, and the instant chosen
    /// (by its time) unless the newest is followed.
    fn show_update(&mut self, ctx: &egui::Context, update: Update) -> Change {
        let Update { doc, whole, process, .. } = update;
        let switched = self.processes.as_ref().map(|p| p.chosen) != whole.as_ref().map(|_| process);
        self.processes = whole.map(|whole| Processes { path: doc.path.clone(), whole, chosen: process });
        let fresh = self.doc.is_none() || switched;
        let device = self.device().map(|d| d.device);
        let selected_ns = self.selected_point.zip(self.device()).map(|(p, d)| d.timeline.time_ns(p));
        if fresh {
            self.set_document(ctx, doc);
        } else {
            self.worker = Some(Worker::start(Arc::clone(&doc.trace), repainter(ctx)));
            self.device_index = doc.devices.iter().position(|d| Some(d.device) == device).unwrap_or(0);
            // Until the new answer comes, the last one stands (a run followed live grows).
            let mut doc = doc;
            if let Some(old) = &self.doc {
                for d in &mut doc.devices {
                    d.growth = old.devices.iter().find(|o| o.device == d.device).and_then(|o| o.growth.clone());
                }
            }
            if self.growth.is_none() {
                self.start_growth(ctx, &doc);
            }
            self.doc = Some(doc);
            self.instant = None;
        }
        if self.follow_newest {
            self.follow_newest_now();
        } else if let (Some(time), false) = (selected_ns, fresh)
            && let Some(point) = self.device().map(|d| d.timeline.point_at(time))
        {
            self.select(point);
        }
        if fresh { Change::NewDocument } else { Change::Updated }
    }

    /// Shows rank `rank` of the run open in the other views: another process of the recording
    /// open, or that rank's file, read in the background.
    pub fn open_rank(&mut self, ctx: &egui::Context, rank: u32) {
        let Some(run) = &mut self.run else { return };
        let Some(row) = run.row(rank) else { return };
        run.shown = Some(rank);
        match (&self.processes, row.process) {
            (Some(processes), Some(process)) if processes.path == row.path => self.choose_process(ctx, process),
            _ => self.adopt_loader(Loader::start_rank(&row.path, self.range, row.process, repainter(ctx))),
        }
    }

    /// Shows a load started elsewhere (before the window existed).
    pub fn adopt_loader(&mut self, loader: Loader) {
        self.live = None;
        if let Some(old) = self.loader.replace(loader) {
            old.cancel();
        }
    }

    /// Starts loading `path` as the run to compare the open one with.
    pub fn open_second(&mut self, ctx: &egui::Context, path: &Path) {
        if let Some(old) = self.second_loader.replace(Loader::start_second(path, self.range, repainter(ctx))) {
            old.cancel();
        }
    }

    /// Cancels every load under way.
    pub fn cancel_loads(&self) {
        for loader in self.loader.iter().chain(self.second_loader.iter()) {
            loader.cancel();
        }
        if let Some(run) = &self.run {
            run.cancel();
        }
    }

    /// The load to show progress for, if any.
    pub fn loading(&self) -> Option<&Loader> {
        self.loader.as_ref().or(self.second_loader.as_ref())
    }

    /// Whether a file is loading or another process is being prepared.
    pub fn is_loading(&self) -> bool {
        self.loader.is_some()
            || self.second_loader.is_some()
            || self.pending_second.is_some()
            || self.is_switching()
            || self.run.as_ref().is_some_and(RunState::is_reading)
            || (self.doc.is_none() && self.live.as_ref().is_some_and(|l| l.last_update.is_none()))
    }

    /// Whether another process of the run is being prepared.
    pub fn is_switching(&self) -> bool {
        self.switching.is_some()
    }

    /// Whether the selected instant's analysis (or a comparison, or the timelines' categories)
    /// is still being computed.
    pub fn is_analysing(&self) -> bool {
        self.worker.as_ref().is_some_and(Worker::is_busy)
            || self.compare.as_ref().is_some_and(Compare::is_busy)
            || self.working_out_categories()
    }

    /// Picks up what the background jobs finished; says what changed.
    pub fn poll(&mut self, ctx: &egui::Context) -> Vec<Change> {
        let mut changes = Vec::new();
        if let Some(live) = self.live.as_mut()
            && let Some(update) = live.poll()
        {
            if let Status::Ended(Some(path)) = &live.status {
                changes.push(Change::Opened(path.clone()));
            }
            let change = self.show_update(ctx, update);
            changes.push(change);
        }
        let rank_of_run = self.loader.as_ref().is_some_and(|l| l.rank_of_run);
        if let Some((path, result)) = take_finished(&mut self.loader) {
            match result {
                Ok(loaded) => {
                    self.switching = None;
                    let Loaded { doc, recording } = loaded;
                    if !rank_of_run {
                        changes.push(Change::Opened(path.clone()));
                        self.adopt_run(path, recording);
                    }
                    self.set_document(ctx, doc);
                    changes.push(Change::NewDocument);
                }
                Err(error) => self.errors.push(error),
            }
        }
        if let Some(run) = &mut self.run
            && let Some(result) = run.poll()
        {
            match result {
                RunPoll::Read { worst } => {
                    if let [one] = run.paths.as_slice() {
                        changes.push(Change::Opened(one.clone()));
                    }
                    if let Some(rank) = worst {
                        self.open_rank(ctx, rank);
                    }
                }
                RunPoll::Failed(error) => {
                    self.errors.push(error);
                    self.run = None;
                }
                RunPoll::Cancelled => self.run = None,
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
                    self.show_rank_of_process(previous);
                    self.errors.push(error);
                }
            }
        }
        if let Some((path, result)) = take_finished(&mut self.second_loader) {
            match result {
                Ok(loaded) => {
                    changes.push(Change::Opened(path));
                    self.pending_second = Some(loaded.doc);
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
        self.poll_categories();
        self.start_categories(ctx);
        self.poll_growth(ctx);
        self.start_growth_when_free(ctx);
        changes
    }

    /// Shows a loaded document, selecting the device where the question is and its peak.
    pub fn set_document(&mut self, ctx: &egui::Context, doc: Document) {
        self.worker = Some(Worker::start(Arc::clone(&doc.trace), repainter(ctx)));
        let title = format!("{} — vramscope", doc.file_name());
        ctx.send_viewport_cmd(egui::ViewportCommand::Title(title));
        // The device that ran out of memory first, else the one with the highest peak.
        let peaks = doc.devices.iter().map(|d| (d.device, d.timeline.values(d.peak_point).0));
        let focus = crate::query::summary::focus_device(&doc.trace, peaks);
        self.device_index = doc.devices.iter().position(|d| Some(d.device) == focus).unwrap_or(0);
        self.growth_wanted = true;
        self.doc = Some(doc);
        self.compare = None;
        self.instant = None;
        self.jump_to_peak();
    }

    /// A file was opened on its own: it is the run now (a recording of several ranks), or no
    /// run is open any more.
    fn adopt_run(&mut self, path: PathBuf, recording: Option<Recording>) {
        self.processes = None;
        self.run = None;
        if let Some(Recording { whole, run, process }) = recording {
            if let Some(run) = run {
                let shown = run.rows.iter().find(|r| r.2.process == Some(process)).map(|r| r.0);
                self.run = Some(RunState::read(vec![path.clone()], run, shown));
            }
            self.processes = Some(Processes { path, whole, chosen: process });
        }
    }

    /// The run's rank shown follows the process shown.
    fn show_rank_of_process(&mut self, process: usize) {
        if let Some(run) = &mut self.run
            && let Some(rows) = &run.finished
        {
            run.shown = rows.rows.iter().find(|r| r.2.process == Some(process)).map(|r| r.0);
        }
    }

    /// Closes the document (and the run compared with it), keeping the run open.
    fn close_document(&mut self, ctx: &egui::Context) {
        self.doc = None;
        self.processes = None;
        self.switching = None;
        self.compare = None;
        self.worker = None;
        self.instant = None;
        self.growth = None;
        self.growth_wanted = false;
        self.selected_point = None;
        ctx.send_viewport_cmd(egui::ViewportCommand::Title("vramscope".to_owned()));
    }

    /// Closes the document (and the run compared with it).
    pub fn close(&mut self, ctx: &egui::Context) {
        self.live = None;
        self.cancel_loads();
        self.run = None;
        self.close_document(ctx);
    }

    /// What is open, for the views that need more than a trace.
    pub fn open_kinds(&self) -> super::context::Open {
        super::context::Open {
            second_run: self.compare.is_some(),
            run: self.run.is_some(),
            oom: self.doc.as_ref().is_some_and(|d| !d.trace.ooms.is_empty()),
            device_whole: self
                .processes
                .as_ref()
                .map(|p| &*p.whole)
                .or_else(|| self.doc.as_ref().map(|d| &*d.trace))
                .is_some_and(super::device_view::sampled),
        }
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

    /// The whole recording, when the document shows one of its several processes.
    pub fn whole(&self) -> Option<&Arc<Trace>> {
        self.processes.as_ref().map(|p| &p.whole)
    }

    /// The recording's processes and the one shown, when it has several.
    pub fn processes(&self) -> Option<(&Trace, usize)> {
        self.processes.as_ref().map(|p| (&*p.whole, p.chosen))
    }

    /// Shows one process of the recording, prepared on a background job; the document shown
    /// meanwhile stays. One process is that process's part of the recording as opened: no
    /// view shows two processes' blocks together (the ranks view shows them side by side).
    pub fn choose_process(&mut self, ctx: &egui::Context, chosen: usize) {
        let (Some(processes), Some(doc)) = (&mut self.processes, &self.doc) else { return };
        if processes.chosen == chosen {
            return;
        }
        // Following: the next update shows it (the follower is woken for it).
        if let Some(live) = &self.live {
            if let Some(pid) = processes.whole.metadata.processes.get(chosen).and_then(|p| p.pid) {
                live.choose_process(pid);
            }
            return;
        }
        let previous = std::mem::replace(&mut processes.chosen, chosen);
        let whole = Arc::clone(&processes.whole);
        let origin = doc.origin();
        let job = Job::spawn(
            "process",
            repainter(ctx),
            move |_| Ok(Document::build_shared(Arc::new(whole.of_process(ProcessId(chosen as u32))), origin)),
            Err,
        );
        self.switching = Some(Switch { previous, job });
        self.show_rank_of_process(chosen);
    }

    /// Selects the allocated peak of the current device.
    pub fn jump_to_peak(&mut self) {
        if let Some(point) = self.device().map(|d| d.peak_point) {
            self.select(point);
        }
    }

    /// Selects a timeline point and asks for its analysis.
    pub fn select(&mut self, point: crate::query::timeline::Point) {
        let Some(device) = self.device() else { return };
        let point = point.min(device.timeline.last_point());
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
fn take_finished(slot: &mut Option<Loader>) -> Option<(PathBuf, Result<Loaded, String>)> {
    let loader = slot.as_ref()?;
    let Poll::Done(result) = loader.poll() else { return None };
    let cancelled = loader.is_cancelled();
    let path = loader.path.clone();
    *slot = None;
    // Cancelled: whatever came back is not wanted any more.
    if cancelled {
        return None;
    }
    Some((path, (*result).map_err(|error| format!("{error:#}"))))
}

mod analysis;
#[cfg(test)]
mod tests;
