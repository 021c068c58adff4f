//! Out of memory: the trace's out-of-memory error explained on one screen (see
//! [`crate::query::postmortem`]): the request, what the device and the allocator had free,
//! what was alive by category and site, when, and the smallest change projected to have fitted.
//! Worked out on a thread of its own (the last part asks the advisor).

use std::sync::Arc;

use vramscope_trace_format::Trace;

use super::context::{Command, ViewCtx};
use super::jobs::Job;
use super::palette;
use crate::query::postmortem::{self, PostMortem};
use crate::{units, words};

/// The OOM shown, and the one being worked out.
#[derive(Default)]
pub struct OomState {
    /// The trace (by address) and OOM the explanation is for.
    key: Option<(usize, usize)>,
    /// The OOM chosen (index into the trace's OOMs; `None`: the first of the device shown).
    pub chosen: Option<usize>,
    pending: Option<Job<Option<PostMortem>>>,
    shown: Option<Option<PostMortem>>,
}

impl OomState {
    /// Works out OOM `index` of `trace`; `whole` is the recording of every process when `trace`
    /// is one of them (who held the device is read from it).
    fn refresh(&mut self, ctx: &egui::Context, trace: &Arc<Trace>, whole: Option<&Arc<Trace>>, index: usize) {
        let key = (Arc::as_ptr(trace) as usize, index);
        if self.key != Some(key) {
            self.key = Some(key);
            self.shown = None;
            let trace = Arc::clone(trace);
            let whole = whole.map(Arc::clone);
            let ctx = ctx.clone();
            self.pending = Some(Job::spawn(
                "oom",
                move || ctx.request_repaint(),
                move |_| {
                    let oom = trace.ooms.get(index)?;
                    let process = whole.as_ref().and_then(|w| {
                        let pid = trace.metadata.processes.first()?.pid?;
                        let i = w.metadata.processes.iter().position(|p| p.pid == Some(pid))?;
                        Some((w, vramscope_trace_format::ProcessId(u32::try_from(i).ok()?)))
                    });
                    let holders = match process {
                        Some((w, p)) => postmortem::holders(w, oom.device, p, oom.time_ns),
                        None => postmortem::holders(&trace, oom.device, oom.process, oom.time_ns),
                    };
                    postmortem::postmortem_sharing(&trace, index, holders)
                },
                |_| None,
            ));
        }
        if let Some(result) = self.pending.as_ref().and_then(Job::poll) {
            self.shown = Some(result.ok().flatten());
            self.pending = None;
        }
    }
}

/// The OOMs of the device shown, in time order (index into the trace's OOMs).
/// Draws the view.
pub fn view_ui(ui: &mut egui::Ui, ctx: &ViewCtx<'_>, state: &mut OomState, out: &mut Vec<Command>) {
    let trace = &ctx.doc.trace;
    let ooms = crate::query::oom::on_device(trace, ctx.device.device);
    let Some(&first) = ooms.first() else {
        let elsewhere: Vec<String> = trace.ooms.iter().map(|o| trace.metadata.device_label(o.device)).collect();
        ui.label(format!(
            "No out-of-memory error on this device; the trace has {} on {}.",
            units::count(elsewhere.len()),
            elsewhere.join(", ")
        ));
        return;
    };
    let index = state.chosen.filter(|c| ooms.contains(c)).unwrap_or(first);
    if ooms.len() > 1 {
        ui.horizontal(|ui| {
            ui.label(format!("{} out-of-memory errors on this device; showing", units::count(ooms.len())));
            let start = trace.origin_ns();
            let label = |i: usize| {
                let o = &trace.ooms[i];
                format!("+{}: {}", units::duration_ns(o.time_ns - start), units::bytes(o.requested_bytes))
            };
            egui::ComboBox::from_id_salt("oom-chosen").selected_text(label(index)).show_ui(ui, |ui| {
                for &i in &ooms {
                    if ui.selectable_label(i == index, label(i)).clicked() {
                        state.chosen = Some(i);
                    }
                }
            });
        });
    }
    let egui_ctx = ui.ctx().clone();
    state.refresh(&egui_ctx, trace, ctx.whole, index);
    let Some(shown) = &state.shown else {
        ui.horizontal(|ui| {
            ui.spinner();
            ui.label("Working out what failed and what would have fitted…");
        });
        return;
    };
    let Some(pm) = shown else {
        ui.label("This out-of-memory error could not be explained.");
        return;
    };
    egui::ScrollArea::vertical().show(ui, |ui| {
        ui.horizontal_wrapped(|ui| {
            ui.heading(egui::RichText::new(words::postmortem_heading(trace, pm)).color(palette::OOM));
            if ui
                .button("Select that instant")
                .on_hover_text("The other views show the memory as it was when the allocation failed")
                .clicked()
            {
                out.push(Command::Select(ctx.device.timeline.point_at(pm.time_ns)));
            }
        });
        ui.add_space(6.0);
        egui::Grid::new("oom-sections").num_columns(2).spacing([16.0, 8.0]).striped(true).show(ui, |ui| {
            for (heading, lines) in words::postmortem_sections(pm) {
                ui.strong(heading);
                ui.vertical(|ui| {
                    for line in lines {
                        ui.label(line);
                    }
                });
                ui.end_row();
            }
        });
    });
}
