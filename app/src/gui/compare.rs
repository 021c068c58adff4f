//! A second run compared with the open one: its document, the device compared, and the
//! comparison worked out on a job (the compare view draws it; how it is lined up and grouped is
//! the view's own state).

use std::sync::Arc;

use super::document::Document;
use super::jobs::Job;
use crate::query::diff::{self, Diff};

/// The second run and what comparing it takes.
pub struct Compare {
    /// Run B.
    pub doc: Document,
    /// Its device compared.
    pub device_index: usize,
    /// The comparison at the peaks, once worked out.
    pub diff: Option<Arc<Diff>>,
    pending: Option<Job<Result<Diff, String>>>,
    /// Why the comparison could not be worked out.
    pub failed: Option<String>,
    /// Annotation names both runs have (for the alignment menu), found once.
    pub common_annotations: Vec<String>,
}

impl Compare {
    /// Starts comparing `b` with `a` (the open document) on a background thread.
    pub fn new(a: &Document, a_device: usize, b: Document, repaint: impl Fn() + Send + Sync + 'static) -> Self {
        let device_index = best_device(&b);
        let (trace_a, trace_b) = (Arc::clone(&a.trace), Arc::clone(&b.trace));
        let (name_a, name_b) = (a.file_name(), b.file_name());
        let (device_a, device_b) =
            (a.devices.get(a_device).map(|d| d.device), b.devices.get(device_index).map(|d| d.device));
        let job = Job::spawn(
            "compare",
            repaint,
            move |_| {
                let run_a = diff::compared_run(&trace_a, &name_a, device_a);
                let run_b = diff::compared_run(&trace_b, &name_b, device_b);
                Ok(diff::diff(run_a, run_b))
            },
            Err,
        );
        let common_annotations = common_annotations(a, &b);
        Self { common_annotations, doc: b, device_index, diff: None, pending: Some(job), failed: None }
    }

    /// Picks up the comparison when it is ready, or why there is none.
    pub fn poll(&mut self) {
        if let Some(result) = self.pending.as_ref().and_then(Job::poll) {
            match result.and_then(|r| r) {
                Ok(d) => self.diff = Some(Arc::new(d)),
                Err(why) => self.failed = Some(why),
            }
            self.pending = None;
        }
    }

    /// Whether the comparison is still being worked out.
    pub fn is_busy(&self) -> bool {
        self.pending.is_some()
    }
}

/// The device to compare on: the one to look at first, as the rest of the app chooses it.
fn best_device(doc: &Document) -> usize {
    let peaks = doc.devices.iter().map(|d| (d.device, d.timeline.values(d.peak_point).0));
    crate::query::summary::focus_device(&doc.trace, peaks)
        .and_then(|f| doc.devices.iter().position(|d| d.device == f))
        .unwrap_or(0)
}

/// Names of annotations both runs have, for the alignment menu.
fn common_annotations(a: &Document, b: &Document) -> Vec<String> {
    let names = |doc: &Document| -> std::collections::BTreeSet<String> {
        doc.trace
            .annotations
            .iter()
            .map(|x| doc.trace.interner.resolve(x.name).to_owned())
            .filter(|n| !n.is_empty())
            .collect()
    };
    names(a).intersection(&names(b)).take(200).cloned().collect()
}
