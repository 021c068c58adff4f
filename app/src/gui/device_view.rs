//! Whole GPU: every process that held memory on the device shown, as the driver accounted it
//! (the NVML samples `record` takes, [`crate::query::whole`]): stacked over time against the
//! device's capacity, each process at the device's high point (the recorded ones split into
//! PyTorch's, their own allocations around it and their context), and the turns they took.
//! Worked out on a thread of its own (each recorded process's part is replayed at the high point).

use std::sync::Arc;

use egui::{Color32, Stroke};
use vramscope_trace_format::{CounterKind, DEVICE_SERIES, PROCESS_SERIES, Trace};

use super::context::{Command, ViewCtx};
use super::jobs::Job;
use super::palette;
use crate::query::whole::{self, WholeDevice};
use crate::units::{bytes, offset_ns};

/// Whether `trace` holds the driver's samples of a whole device.
pub fn sampled(trace: &Trace) -> bool {
    trace.counters.iter().any(|c| c.kind == CounterKind::DeviceUsed && trace.interner.resolve(c.name) == DEVICE_SERIES)
}

/// The devices worked out, and the job working them out.
#[derive(Default)]
pub struct DeviceState {
    /// The trace (by address) they are for.
    key: Option<usize>,
    pending: Option<Job<Vec<WholeDevice>>>,
    shown: Option<Vec<WholeDevice>>,
}

impl DeviceState {
    fn refresh(&mut self, ctx: &egui::Context, trace: &Arc<Trace>) {
        let key = Arc::as_ptr(trace) as usize;
        if self.key != Some(key) {
            self.key = Some(key);
            self.shown = None;
            let trace = Arc::clone(trace);
            let ctx = ctx.clone();
            self.pending = Some(Job::spawn(
                "device",
                move || ctx.request_repaint(),
                move |_| whole::whole_devices(&trace),
                |_| Vec::new(),
            ));
        }
        if let Some(result) = self.pending.as_ref().and_then(Job::poll) {
            self.shown = Some(result.unwrap_or_default());
            self.pending = None;
        }
    }
}

/// Each process's colour, in the table's order: the recorded ones from the processes' palette in
/// turn, the rest grey.
fn colours(w: &WholeDevice) -> Vec<Color32> {
    let mut next = 0;
    w.processes
        .iter()
        .map(|p| {
            if !p.recorded {
                return palette::NOT_RECORDED;
            }
            next += 1;
            palette::PROCESSES[(next - 1) % palette::PROCESSES.len()]
        })
        .collect()
}

/// Draws the view.
pub fn view_ui(ui: &mut egui::Ui, ctx: &ViewCtx<'_>, state: &mut DeviceState, _out: &mut Vec<Command>) {
    let trace = ctx.whole.unwrap_or(&ctx.doc.trace);
    let egui_ctx = ui.ctx().clone();
    state.refresh(&egui_ctx, trace);
    let Some(shown) = &state.shown else {
        ui.horizontal(|ui| {
            ui.spinner();
            ui.label("Working out each process's share of the device…");
        });
        return;
    };
    let device = ctx.device.device;
    let Some(w) = shown.iter().find(|w| w.device == device).or_else(|| shown.first()) else {
        ui.label("The recording did not sample the driver's account of any device.");
        return;
    };
    let start = trace.origin_ns();
    let capacity = w.capacity_bytes.map(|c| format!(" of {}", bytes(c))).unwrap_or_default();
    ui.heading(format!(
        "{} whole — {} process{} on it, {}{capacity} used at its highest, at {}",
        w.label,
        w.processes.len(),
        if w.processes.len() == 1 { "" } else { "es" },
        bytes(w.high_bytes),
        offset_ns(w.high_time_ns - start)
    ));
    if w.device != device {
        ui.label(format!("(the device shown, {}, was not sampled)", trace.metadata.device_label(device)));
    }
    ui.label(format!(
        "As the driver accounted it, {} samples: every process that held memory there, those the recording did not \
         see too (grey).",
        w.samples
    ));
    ui.add_space(4.0);
    let height = (ui.available_height() * 0.45).max(160.0);
    chart(ui, trace, w, egui::vec2(ui.available_width(), height));
    ui.add_space(6.0);
    egui::ScrollArea::vertical().show(ui, |ui| {
        egui::Grid::new("device-processes").num_columns(5).spacing([14.0, 6.0]).striped(true).show(ui, |ui| {
            for heading in ["process", "at the device's high point", "its most", "", "what it held there"] {
                ui.strong(heading);
            }
            ui.end_row();
            for (p, colour) in w.processes.iter().zip(colours(w)) {
                ui.horizontal(|ui| {
                    let (rect, _) = ui.allocate_exact_size(egui::vec2(10.0, 10.0), egui::Sense::hover());
                    ui.painter().rect_filled(rect, 2.0, colour);
                    ui.label(&p.name);
                });
                ui.label(bytes(p.at_high_bytes));
                ui.label(format!("{} at {}", bytes(p.peak_bytes), offset_ns(p.peak_time_ns - start)));
                ui.label(if p.recorded { "recorded" } else { "not recorded" });
                match &p.parts {
                    Some(parts) => ui.label(crate::words::process_parts(parts)),
                    None => ui.label("only the driver's account: nothing more is known"),
                };
                ui.end_row();
            }
        });
        if !w.turns.is_empty() {
            ui.add_space(8.0);
            ui.strong("In turns");
            for t in &w.turns {
                ui.label(format!(
                    "{}: {} to {}, its most {}",
                    t.name,
                    offset_ns(t.from_ns - start),
                    offset_ns(t.to_ns - start),
                    bytes(t.peak_bytes)
                ));
            }
        }
    });
}

/// Each process's bytes over time, stacked (those not recorded at the bottom, then the recorded
/// ones in the table's order), with the device's capacity and the whole device's own account as
/// lines.
fn chart(ui: &mut egui::Ui, trace: &Trace, w: &WholeDevice, size: egui::Vec2) {
    let (whole_rect, response) = ui.allocate_exact_size(size, egui::Sense::hover());
    let painter = ui.painter_at(whole_rect);
    // The chart, and a strip below it for the times.
    let rect = egui::Rect::from_min_max(whole_rect.min, whole_rect.max - egui::vec2(0.0, 16.0));
    painter.rect_filled(rect, 2.0, ui.visuals().extreme_bg_color);
    let mut order: Vec<usize> = (0..w.processes.len()).collect();
    order.sort_by_key(|&i| (w.processes[i].recorded, i));
    // (index in the table, its series)
    let series: Vec<(usize, &vramscope_trace_format::CounterSeries)> = order
        .into_iter()
        .filter_map(|i| {
            let p = &w.processes[i];
            let s = trace.counters.iter().find(|c| {
                c.device == w.device
                    && c.kind == CounterKind::DeviceUsed
                    && c.process.0 == p.process
                    && trace.interner.resolve(c.name) == PROCESS_SERIES
            })?;
            Some((i, s))
        })
        .collect();
    let device_series = trace.counters.iter().find(|c| {
        c.device == w.device && c.kind == CounterKind::DeviceUsed && trace.interner.resolve(c.name) == DEVICE_SERIES
    });
    let Some(device_series) = device_series else { return };
    let (Some(first), Some(last)) = (device_series.samples.first(), device_series.samples.last()) else { return };
    let (t0, t1) = (first.time_ns, last.time_ns.max(first.time_ns + 1));
    let top = w.capacity_bytes.unwrap_or(w.high_bytes).max(w.high_bytes).max(1) as f32 * 1.05;
    let x_of = |t: i64| rect.left() + rect.width() * ((t - t0) as f32 / (t1 - t0) as f32);
    let y_of = |b: f32| rect.bottom() - rect.height() * (b / top);
    let value_at = |s: &vramscope_trace_format::CounterSeries, t: i64| {
        let i = s.samples.partition_point(|x| x.time_ns <= t);
        i.checked_sub(1).map_or(0.0, |i| s.samples[i].value.max(0) as f32)
    };
    let colours = colours(w);
    // One column per pixel, each process's value at the column's time, stacked.
    let columns = rect.width().max(1.0) as usize;
    for c in 0..columns {
        let t = t0 + ((t1 - t0) as f64 * c as f64 / columns as f64) as i64;
        let x = rect.left() + c as f32;
        let mut below = 0.0;
        for &(i, s) in &series {
            let v = value_at(s, t);
            if v > 0.0 {
                let column = egui::Rect::from_x_y_ranges(x..=x + 1.0, y_of(below + v)..=y_of(below));
                painter.rect_filled(column, 0.0, colours[i]);
            }
            below += v;
        }
    }
    // The device's own account (it counts what no process is listed with, too).
    let points: Vec<egui::Pos2> = device_series
        .samples
        .windows(2)
        .flat_map(|p| {
            let y = y_of(p[0].value.max(0) as f32);
            [egui::pos2(x_of(p[0].time_ns), y), egui::pos2(x_of(p[1].time_ns), y)]
        })
        .collect();
    painter.add(egui::Shape::line(points, Stroke::new(1.5, ui.visuals().strong_text_color())));
    if let Some(capacity) = w.capacity_bytes {
        let y = y_of(capacity as f32);
        painter.add(egui::Shape::dashed_line(
            &[egui::pos2(rect.left(), y), egui::pos2(rect.right(), y)],
            Stroke::new(1.5, palette::OOM),
            6.0,
            4.0,
        ));
        painter.text(
            egui::pos2(rect.left() + 4.0, y - 2.0),
            egui::Align2::LEFT_BOTTOM,
            format!("capacity {}", bytes(capacity)),
            egui::FontId::proportional(12.0),
            palette::OOM,
        );
    }
    let small = egui::FontId::proportional(12.0);
    let text = ui.visuals().weak_text_color();
    let origin = trace.origin_ns();
    painter.text(whole_rect.left_bottom(), egui::Align2::LEFT_BOTTOM, offset_ns(t0 - origin), small.clone(), text);
    painter.text(whole_rect.right_bottom(), egui::Align2::RIGHT_BOTTOM, offset_ns(t1 - origin), small.clone(), text);
    let y = y_of(w.high_bytes as f32);
    painter.text(
        egui::pos2(rect.right() - 4.0, y - 2.0),
        egui::Align2::RIGHT_BOTTOM,
        format!("highest {}", bytes(w.high_bytes)),
        small,
        text,
    );
    if let Some(pos) = response.hover_pos() {
        let t = t0 + ((pos.x - rect.left()) / rect.width() * (t1 - t0) as f32) as i64;
        let mut lines = vec![offset_ns(t - trace.origin_ns())];
        for &(i, s) in series.iter().rev() {
            if let Some(p) = w.processes.get(i) {
                lines.push(format!("{}: {}", p.name, bytes(value_at(s, t) as u64)));
            }
        }
        lines.push(format!("the device: {}", bytes(value_at(device_series, t) as u64)));
        response.on_hover_text(lines.join("\n"));
    }
}
