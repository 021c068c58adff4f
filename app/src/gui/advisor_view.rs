//! The Advisor: what each remedy would do to the peak of the open trace (see
//! [`crate::query::advisor`]), worked out on a thread of its own.

use std::sync::Arc;

use egui_extras::{Column, TableBuilder};
use vramscope_trace_format::{DeviceId, Trace};

use super::context::ViewCtx;
use super::jobs::Job;
use crate::query::advisor::{Advice, Projection};
use crate::{units, words};

/// The advice shown, and the one being worked out.
#[derive(Default)]
pub struct AdvisorState {
    /// The trace (by address), device, GPU count and target the advice is for.
    key: Option<(usize, DeviceId, Option<u32>, Option<u64>)>,
    pending: Option<Job<Option<Advice>>>,
    advice: Option<Option<Advice>>,
    /// GPUs for the sharding remedies, when the user set them (else the trace's).
    gpus: Option<u32>,
    /// The memory to fit under, when the user set it (else the device's).
    target: Option<u64>,
}

impl AdvisorState {
    /// Whether the advice shown is the one asked for (none is being worked out).
    pub fn is_settled(&self) -> bool {
        self.pending.is_none() && self.advice.is_some()
    }

    fn refresh(&mut self, ctx: &egui::Context, trace: &Arc<Trace>, device: DeviceId) {
        let key = (Arc::as_ptr(trace) as usize, device, self.gpus, self.target);
        // Only the trace changed (a run followed live grew): the advice shown stays until the
        // new one is ready, and one job at a time works on the newest trace.
        let same_question = self.key.is_some_and(|k| (k.1, k.2, k.3) == (key.1, key.2, key.3));
        if self.key != Some(key) && !(same_question && self.pending.is_some()) {
            self.key = Some(key);
            if !same_question {
                self.advice = None;
            }
            let trace = Arc::clone(trace);
            let ctx = ctx.clone();
            let gpus = self.gpus;
            let target = self.target;
            self.pending = Some(Job::spawn(
                "advise",
                move || ctx.request_repaint(),
                move |_| crate::query::advice(&trace, Some(device), gpus, target),
                |_| None,
            ));
        }
        if let Some(result) = self.pending.as_ref().and_then(Job::poll) {
            self.advice = Some(result.ok().flatten());
            self.pending = None;
        }
    }
}

fn table(ui: &mut egui::Ui, id: &str, rows: &[Projection], advice: &Advice) {
    let baseline = advice.baseline.peak_allocated_bytes;
    TableBuilder::new(ui)
        .id_salt(id)
        .striped(true)
        // Fixed starting widths (resizable): auto-sized columns of truncated labels shrink to
        // each row's own text, and the rows no longer line up.
        .column(Column::initial(340.0).at_least(120.0).resizable(true).clip(true))
        .column(Column::initial(100.0).at_least(90.0))
        .column(Column::initial(100.0).at_least(90.0))
        .column(Column::initial(70.0).at_least(60.0))
        .column(Column::initial(50.0).at_least(40.0))
        .column(Column::initial(40.0).at_least(30.0))
        .column(Column::initial(235.0).at_least(120.0).resizable(true).clip(true))
        .column(Column::remainder().clip(true))
        .header(20.0, |mut header| {
            for title in ["remedy", "peak allocated", "peak reserved", "change", "±", "fits", "how", "cost"] {
                header.col(|ui| {
                    ui.strong(title);
                });
            }
        })
        .body(|body| {
            body.rows(20.0, rows.len(), |mut row| {
                let Some(p) = rows.get(row.index()) else { return };
                row.col(|ui| {
                    ui.add(egui::Label::new(words::remedies_named(&p.id)).truncate()).on_hover_text(format!(
                        "{}\n\n{}",
                        words::change(p, advice),
                        words::reason(p, advice)
                    ));
                });
                row.col(|ui| {
                    ui.monospace(units::bytes(p.projected_peak_allocated_bytes));
                });
                row.col(|ui| {
                    ui.monospace(units::bytes(p.projected_peak_reserved_bytes));
                });
                row.col(|ui| {
                    let change =
                        100.0 * (p.projected_peak_allocated_bytes as f64 - baseline as f64) / baseline.max(1) as f64;
                    ui.monospace(format!("{change:+.0}%"));
                });
                row.col(|ui| {
                    ui.monospace(format!("{:.0}%", 100.0 * p.uncertainty))
                        .on_hover_text("How far the projection may be off, as a share of it");
                });
                row.col(|ui| {
                    ui.label(if p.fits { "yes" } else { "" });
                });
                row.col(|ui| {
                    ui.add(egui::Label::new(words::method(p)).truncate()).on_hover_text(
                        "replayed: the trace's own allocations and frees, changed as the remedy would change them, \
                         replayed, so the projected peak and its phase come from the same replay as the baseline's; \
                         + rule: with memory the trace cannot show added by a rule (autocast's weight copies, \
                         ZeRO-3's gathered block); rule: the memory at a few instants changed by the remedy's rule",
                    );
                });
                row.col(|ui| {
                    ui.add(egui::Label::new(words::cost(p, advice)).truncate()).on_hover_text(words::reason(p, advice));
                });
            });
        });
}

/// Draws the Advisor for `device` of `trace`.
pub fn advisor_ui(ui: &mut egui::Ui, trace: &Arc<Trace>, device: DeviceId, state: &mut AdvisorState) {
    let ctx = ui.ctx().clone();
    state.refresh(&ctx, trace, device);
    let Some(advice) = &state.advice else {
        ui.horizontal(|ui| {
            ui.spinner();
            ui.label("Projecting each remedy from the trace…");
        });
        return;
    };
    let Some(advice) = advice else {
        ui.label("This device holds no memory events to advise on.");
        return;
    };
    if state.pending.is_some() {
        ui.horizontal(|ui| {
            ui.spinner();
            ui.weak("Updating for the newest data of the run…");
        });
    }
    let shown_gpus = advice.gpus.map_or(1, |g| g.count);
    let b = &advice.baseline;
    ui.horizontal_wrapped(|ui| {
        ui.strong("Baseline:");
        let phase = words::phase(b.peak_phase).map_or_else(String::new, |p| format!(", its peak in {p}"));
        let blocks = match b.repeated_blocks {
            0 => String::new(),
            n => format!("; {} (the model's layers)", units::counted(n, "repeated block", "repeated blocks")),
        };
        ui.label(format!(
            "peak {} allocated{}{phase}{blocks}.",
            units::bytes(b.peak_allocated_bytes),
            words::baseline_reserved(b),
        ));
        match (advice.target_bytes, state.target) {
            (Some(target), None) => {
                ui.label(format!("Target: the device's {}.", units::bytes(target)));
            }
            (Some(target), Some(_)) => {
                ui.label(format!("Target: {}.", units::bytes(target)));
            }
            (None, _) => {
                ui.label("Target: none (the trace does not say the device's memory; set one below).");
            }
        }
        match &advice.smallest_change_that_fits {
            _ if advice.baseline_fits => {
                ui.strong("The baseline fits already.");
            }
            Some(_) => {
                let line = words::smallest_change(advice).unwrap_or_default();
                let mut chars = line.chars();
                let line: String = chars.next().map(|c| c.to_uppercase().chain(chars).collect()).unwrap_or_default();
                ui.strong(format!("{line}."));
            }
            None if advice.target_bytes.is_some() => {
                ui.colored_label(ui.visuals().warn_fg_color, "No single remedy or pair fits under the target.");
            }
            None => {}
        }
    });
    if let Some(fragmentation) = &advice.fragmentation {
        ui.label(format!("Fragmentation: {}", words::fragmentation(fragmentation)));
    }
    ui.horizontal(|ui| {
        let mut gpus = state.gpus.unwrap_or(shown_gpus);
        ui.label("Shard over");
        let changed = ui
            .add(egui::DragValue::new(&mut gpus).range(1..=4096))
            .on_hover_text("The GPUs the ZeRO/FSDP remedies shard over (default: the ranks or GPUs the trace shows)")
            .changed();
        ui.label(if gpus == 1 { "GPU (ZeRO/FSDP)" } else { "GPUs (ZeRO/FSDP)" });
        if changed {
            state.gpus = Some(gpus);
        }
        ui.separator();
        const GIB: f64 = (1u64 << 30) as f64;
        // Without a target (none set, the device's not known) the field starts at the peak, and
        // says it is not one yet (the reserved peak, or the allocated one where reserved memory
        // is not recorded).
        let shown = state.target.or(advice.target_bytes).unwrap_or(b.peak_reserved_bytes.max(b.peak_allocated_bytes));
        let mut gib = shown as f64 / GIB;
        ui.label("Fit under");
        let unset = state.target.is_none() && advice.target_bytes.is_none();
        let changed = ui
            .add(egui::DragValue::new(&mut gib).range(0.001..=1.0e6).speed(0.1).max_decimals(3).suffix(if unset {
                " GiB (not set: drag or type)"
            } else {
                " GiB"
            }))
            .on_hover_text(
                "The memory the reserved peak must fit under (default: the device's, when the trace says it)",
            )
            .changed();
        if changed {
            state.target = Some((gib * GIB).round() as u64);
        }
        let device_known = trace.metadata.devices.iter().any(|d| d.device == device && d.total_memory_bytes.is_some());
        let (reset, tip) = if device_known {
            ("Device's", "Fit under the device's memory again")
        } else {
            ("No target", "Project the remedies without a memory to fit under")
        };
        if state.target.is_some() && ui.button(reset).on_hover_text(tip).clicked() {
            state.target = None;
        }
    });
    for note in words::advice_notes(advice, "set Shard over") {
        ui.weak(note);
    }
    for line in words::left_out_lines(advice) {
        ui.weak(line);
    }
    if let Some(line) = words::without_effect(advice) {
        ui.weak(line);
    }
    if let (false, Some(target)) = (advice.plan.is_empty(), advice.target_bytes) {
        ui.strong(words::plan_heading(advice, target));
        for (i, step) in advice.plan.iter().enumerate() {
            ui.horizontal(|ui| {
                ui.monospace(format!("{}.", i + 1));
                ui.label(words::remedy_name(step.remedy)).on_hover_text(words::remedy_change(step.remedy, advice));
                ui.monospace(format!(
                    "{} reserved (±{:.0}%)",
                    units::bytes(step.projected_peak_reserved_bytes),
                    100.0 * step.uncertainty
                ));
                if step.fits {
                    ui.strong("fits");
                }
                ui.add(
                    egui::Label::new(egui::RichText::new(words::remedy_change(step.remedy, advice)).weak()).truncate(),
                );
            });
        }
    }
    ui.weak("Hover a remedy for what to change and the reasoning from this trace.");
    ui.add_space(4.0);
    egui::ScrollArea::vertical().show(ui, |ui| {
        table(ui, "advisor-remedies", &advice.remedies, advice);
        if !advice.combinations.is_empty() {
            ui.add_space(8.0);
            ui.strong("Best combinations (pairs lower than either alone, threes lower than their pairs)");
            let best: Vec<Projection> = advice.combinations.iter().take(6).cloned().collect();
            table(ui, "advisor-pairs", &best, advice);
        }
        if !advice.checkpointing_by_blocks.is_empty() {
            ui.add_space(8.0);
            ui.strong(words::SOME_BLOCKS_HEADING);
            for some in &advice.checkpointing_by_blocks {
                ui.monospace(words::some_blocks_checkpointed(some, advice.baseline.peak_allocated_bytes));
            }
        }
    });
}

/// The advisor view.
pub fn view_ui(ui: &mut egui::Ui, ctx: &ViewCtx<'_>, state: &mut AdvisorState) {
    advisor_ui(ui, &ctx.doc.trace, ctx.device.device, state);
}
