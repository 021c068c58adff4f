//! Widgets the views share: the timeline (with its axes and the stretches a recording did not
//! see), a block's details and stack, bytes by category, and colour swatches. A widget draws from
//! what it is given and returns what the user did; it never imports a view or the app.

pub mod axis;
pub mod block;
pub mod timeline;
pub mod unrecorded;

use egui::{Color32, CornerRadius, Sense, Stroke, vec2};

/// A small square of `color`.
pub fn swatch(ui: &mut egui::Ui, color: Color32) {
    let (rect, _) = ui.allocate_exact_size(vec2(10.0, 10.0), Sense::hover());
    ui.painter().rect_filled(rect, CornerRadius::same(2), color);
}

/// A short line of `color`, for a curve in a legend.
pub fn line_swatch(ui: &mut egui::Ui, color: Color32) {
    let (rect, _) = ui.allocate_exact_size(vec2(14.0, 10.0), Sense::hover());
    ui.painter().hline(rect.x_range(), rect.center().y, Stroke::new(2.0, color));
}
