//! Stretches of a recording that were not seen (`metadata.unrecorded`) on the timeline: hatched
//! and labelled over the plot, and said under the pointer.

use egui::{CornerRadius, Rect, Stroke, pos2};
use vramscope_trace_format::{Trace, Unrecorded};

use crate::gui::document::DeviceData;

/// The stretch of `device` not recorded at `t`, if there is one.
pub fn at<'t>(trace: &'t Trace, device: &DeviceData, t: i64) -> Option<&'t Unrecorded> {
    trace.metadata.unrecorded.iter().find(|g| g.device == device.device && (g.begin_ns..=g.end_ns).contains(&t))
}

/// Stretches of the device's recording that were not seen: hatched over the plot, labelled
/// where there is room, so a flat stretch is never read as memory that did not change.
pub fn overlay(
    painter: &egui::Painter,
    trace: &Trace,
    device: &DeviceData,
    plot: Rect,
    (v0, v1): (f64, f64),
    visuals: &egui::Visuals,
) {
    let color = visuals.warn_fg_color;
    for gap in trace.metadata.unrecorded.iter().filter(|g| g.device == device.device) {
        let Some((x0, x1)) = super::axis::x_span(plot, (v0, v1), gap.begin_ns, gap.end_ns) else { continue };
        let r = Rect::from_x_y_ranges(x0..=x1, plot.y_range());
        painter.rect_filled(r, CornerRadius::ZERO, color.gamma_multiply(0.10));
        let hatch = painter.with_clip_rect(r.intersect(plot));
        let stroke = Stroke::new(1.0, color.gamma_multiply(0.35));
        let mut x = x0 - plot.height();
        while x < x1 {
            hatch.line_segment([pos2(x, plot.bottom()), pos2(x + plot.height(), plot.top())], stroke);
            x += 10.0;
        }
        if r.width() > 80.0 {
            painter.text(
                pos2(r.center().x, plot.top() + 4.0),
                egui::Align2::CENTER_TOP,
                "not recorded",
                egui::FontId::proportional(11.0),
                color,
            );
        }
    }
}
