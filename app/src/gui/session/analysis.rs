//! The session's analyses that run after a document opens: the categories of a document opened
//! as an outline, then whether memory grows every iteration, each on a job of its own.

use super::{Arc, Document, Job, Session, Worker, repainter};

impl Session {
    /// Works out, on a job, whether the memory of `doc`'s devices grows every iteration.
    pub(super) fn start_growth(&mut self, ctx: &egui::Context, doc: &Document) {
        self.growth_wanted = false;
        let trace = Arc::clone(&doc.trace);
        let devices: Vec<_> = doc.devices.iter().map(|d| d.device).collect();
        let for_job = Arc::clone(&trace);
        let job = Job::spawn(
            "growth",
            repainter(ctx),
            move |_| devices.iter().map(|&d| crate::query::growth(&for_job, d)).collect(),
            |_| Vec::new(),
        );
        self.growth = Some((trace, job));
    }

    /// Starts the growth asked for once the instant selected and the timelines' categories are
    /// worked out (one replay of the whole trace at a time besides the instant's).
    pub(super) fn start_growth_when_free(&mut self, ctx: &egui::Context) {
        if !self.growth_wanted
            || self.growth.is_some()
            || self.worker.as_ref().is_some_and(Worker::is_busy)
            || self.categories.is_some()
            || self.working_out_categories()
        {
            return;
        }
        if let Some(doc) = self.doc.take() {
            self.start_growth(ctx, &doc);
            self.doc = Some(doc);
        }
    }

    /// Whether the timelines of the document shown are drawn without their categories yet.
    pub fn working_out_categories(&self) -> bool {
        self.doc.as_ref().is_some_and(Document::categories_pending)
    }

    /// Works out, on a job, the categories of the document's timelines that came without them.
    pub(super) fn start_categories(&mut self, ctx: &egui::Context) {
        let Some(doc) = &self.doc else { return };
        // Asked every frame: nothing is gathered unless there is something to work out.
        if !doc.categories_pending()
            || self.categories.as_ref().is_some_and(|(trace, _)| Arc::ptr_eq(trace, &doc.trace))
        {
            return;
        }
        let pending: Vec<_> = doc.devices.iter().map(|d| d.timeline.pending_categories()).collect();
        let trace = Arc::clone(&doc.trace);
        let for_job = Arc::clone(&trace);
        let started = std::time::Instant::now();
        let job = Job::spawn(
            "categories",
            repainter(ctx),
            move |_| {
                let categories = pending.iter().map(|p| p.as_ref().map(|p| p.work_out(&for_job))).collect();
                if std::env::var_os("VRAMSCOPE_TIMINGS").is_some() {
                    eprintln!(
                        "vramscope: the timelines' categories worked out in {:.0} ms after the curves were shown ({})",
                        started.elapsed().as_secs_f64() * 1e3,
                        crate::memory::resident_so_far()
                    );
                }
                categories
            },
            |_| Vec::new(),
        );
        self.categories = Some((trace, job));
    }

    /// Takes in the categories worked out, if they are for the document shown.
    pub(super) fn poll_categories(&mut self) {
        let Some((trace, job)) = &self.categories else { return };
        let Some(result) = job.poll() else { return };
        let for_trace = Arc::clone(trace);
        self.categories = None;
        let Some(doc) = &mut self.doc else { return };
        if !Arc::ptr_eq(&doc.trace, &for_trace) {
            return;
        }
        let failed = match result {
            Ok(categories) if categories.len() == doc.devices.len() => {
                let mut refused = false;
                for (d, c) in doc.devices.iter_mut().zip(categories) {
                    if let Some(c) = c {
                        refused |= !d.timeline.set_categories(c);
                    }
                }
                refused.then(|| "they do not fit the timeline".to_owned())
            }
            other => Some(other.err().unwrap_or_else(|| "not one set for each device".to_owned())),
        };
        // The job died, or what it made does not fit: the timelines stay without categories (not
        // tried again), and it is said, in the legend too.
        if let Some(why) = failed {
            self.errors.push(format!(
                "{}: the categories of the timeline could not be worked out ({why}); the curves are right",
                doc.file_name()
            ));
            doc.categories_failed = true;
        }
    }

    /// Takes in the growth worked out, if it is for the document shown (a run followed asks
    /// again for its newest state).
    pub(super) fn poll_growth(&mut self, ctx: &egui::Context) {
        let Some((trace, job)) = &self.growth else { return };
        let Some(result) = job.poll() else { return };
        let for_trace = Arc::clone(trace);
        self.growth = None;
        let Some(doc) = &mut self.doc else { return };
        if Arc::ptr_eq(&doc.trace, &for_trace) {
            for (d, growth) in doc.devices.iter_mut().zip(result.unwrap_or_default()) {
                d.growth = growth;
            }
        } else if let Some(doc) = self.doc.take() {
            // A newer state of a followed run came meanwhile: work it out for that one.
            self.start_growth(ctx, &doc);
            self.doc = Some(doc);
        }
    }
}
