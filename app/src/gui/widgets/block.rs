//! What was alive, drawn the same way in every view: bytes by category as bars, a block's
//! numbers with the evidence for its category, and its stack.

use egui::Sense;
use vramscope_trace_format::{Category, StackId, Trace};

use super::swatch;
use crate::gui::palette;
use crate::gui::worker::InstantView;
use crate::query::instant::{self, AttributedBlock};
use crate::units;

/// Bytes by category as bars, largest first.
pub fn categories_ui(ui: &mut egui::Ui, view: &InstantView) {
    let total: u64 = view.instant.by_category.values().sum();
    let mut rows: Vec<(Category, u64)> = view.instant.by_category.iter().map(|(c, v)| (*c, *v)).collect();
    rows.sort_by_key(|b| std::cmp::Reverse(b.1));
    let width = ui.available_width();
    egui::Grid::new("by-category").num_columns(3).spacing([8.0, 4.0]).show(ui, |ui| {
        for (category, bytes) in rows {
            ui.horizontal(|ui| {
                swatch(ui, palette::category_color(category));
                ui.label(palette::category_label(category));
            });
            ui.monospace(units::bytes(bytes)).on_hover_text(format!("{} bytes", units::count(bytes as usize)));
            let fraction = if total > 0 { bytes as f32 / total as f32 } else { 0.0 };
            let (rect, _) = ui.allocate_exact_size(egui::vec2((width - 230.0).max(40.0), 12.0), Sense::hover());
            ui.painter().rect_filled(rect, 2.0, ui.visuals().faint_bg_color);
            let mut filled = rect;
            filled.set_width(rect.width() * fraction);
            ui.painter().rect_filled(filled, 2.0, palette::category_color(category));
            ui.painter().text(
                rect.right_center() - egui::vec2(4.0, 0.0),
                egui::Align2::RIGHT_CENTER,
                format!("{:.1}%", fraction * 100.0),
                egui::FontId::proportional(10.0),
                ui.visuals().text_color(),
            );
            ui.end_row();
        }
    });
}

/// Where a block was allocated, as `function  file:line`.
pub fn allocation_site(trace: &Trace, block: &AttributedBlock, hide_noise: bool) -> String {
    instant::allocation_site(trace, block.block.stack, hide_noise)
}

/// A block's numbers, the evidence for its category and its stack.
pub fn block_details_ui(ui: &mut egui::Ui, trace: &Trace, b: &AttributedBlock, now_ns: i64, hide_noise: bool) {
    ui.horizontal(|ui| {
        swatch(ui, palette::category_color(b.attribution.category));
        ui.strong(format!(
            "{} at {:#x} ({} requested), {}",
            units::bytes(b.block.size_bytes),
            b.block.address,
            units::bytes(b.block.requested_bytes),
            palette::category_label(b.attribution.category)
        ));
    });
    ui.label(format!("why: {}", crate::words::evidence(trace, b.attribution.evidence)));
    match b.alloc_ns {
        Some(t) => ui.label(format!("allocated {} before this instant", units::duration_ns(now_ns - t))),
        None => ui.label("allocated before the trace began"),
    };
    for line in crate::words::context_lines(trace, &b.block) {
        ui.label(line);
    }
    egui::CollapsingHeader::new("stack").id_salt("picked-stack").default_open(true).show(ui, |ui| {
        stack_ui(ui, trace, b.block.stack, hide_noise, 40);
    });
}

/// The frames of a stack, innermost first, `path:line` shown: with `hide_noise`, the program's
/// own line first (with the library call it made) and its callers ([`instant::stack_lines`]).
pub fn stack_ui(ui: &mut egui::Ui, trace: &Trace, stack: StackId, hide_noise: bool, limit: usize) {
    let lines = instant::stack_lines(trace, stack, hide_noise);
    if lines.is_empty() {
        ui.weak("(no stack recorded)");
    }
    for line in lines.iter().take(limit) {
        ui.monospace(line);
    }
    if lines.len() > limit {
        ui.weak(format!("… {} more frames", lines.len() - limit));
    }
}
