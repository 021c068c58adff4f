//! The timeline view: the timeline, large (drawn by the window above every view that has one:
//! [`crate::gui::widgets::timeline`]), and under it the selected instant's categories and its
//! largest allocations.

use super::context::ViewCtx;
use super::palette;
use super::widgets::{block, swatch};
use crate::units;

/// Under the large timeline: the selected instant's categories and its largest allocations.
pub fn summary_ui(ui: &mut egui::Ui, ctx: &ViewCtx<'_>) {
    let Some(v) = ctx.instant else { return };
    let trace = &ctx.doc.trace;
    let hide_noise = ctx.settings.hide_noise;
    ui.columns(2, |columns| {
        let [left, right] = columns else { return };
        left.heading("By category");
        block::categories_ui(left, v);
        right.heading("Largest live allocations");
        egui::ScrollArea::vertical().id_salt("summary-largest").show(right, |ui| {
            egui::Grid::new("largest").num_columns(3).striped(true).show(ui, |ui| {
                for b in v.instant.blocks.iter().take(12) {
                    ui.monospace(units::bytes(b.block.size_bytes));
                    ui.horizontal(|ui| {
                        swatch(ui, palette::category_color(b.attribution.category));
                        ui.label(palette::category_label(b.attribution.category));
                    });
                    ui.label(block::allocation_site(trace, b, hide_noise));
                    ui.end_row();
                }
            });
        });
    });
}
