//! The timeline: memory over time, allocated stacked by category, requested and reserved as
//! lines, annotations in a band below, OOMs and the peak marked.
//!
//! The view transform is a visible time range; zoom keeps the time under the cursor in place.
//! Each frame asks the timeline's level-of-detail index for one column per pixel, so a frame
//! costs the same on any trace at any zoom.

use egui::{Color32, CornerRadius, Mesh, Pos2, Rect, Sense, Shape, Stroke, StrokeKind, Vec2, pos2, vec2};
use vramscope_trace_format::{AnnotationKind, Category, Trace};

use super::axis::{self, x_span};
use super::{line_swatch, swatch, unrecorded};
use crate::gui::document::{DeviceData, Document};
use crate::gui::palette;
use crate::query::timeline::{CATEGORIES, Column, Point};
use crate::units;

/// The timeline's view state (what persists while a trace is open).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TimelineState {
    /// Visible time range in ns; `None` shows everything.
    pub view_ns: Option<(f64, f64)>,
    /// Where a box zoom started (screen x).
    box_start_x: Option<f32>,
    /// The top of the byte scale, when it is shared with another timeline (else this one's own).
    pub y_top_bytes: Option<f64>,
}

impl TimelineState {
    /// Shows the whole trace again.
    pub fn reset(&mut self) {
        self.view_ns = None;
    }
}

const AXIS_LEFT_PX: f32 = 72.0;
const AXIS_BOTTOM_PX: f32 = 18.0;
const BAND_ROW_PX: f32 = 14.0;
const BAND_ROWS: usize = 3;

/// The largest value of any curve of a device.
pub fn y_extent_bytes(device: &DeviceData) -> f64 {
    let whole = device.timeline.range(0, device.timeline.len());
    whole.allocated_max.max(whole.reserved_max).max(whole.requested_max).max(1) as f64
}

/// The device's whole time range, with a little room after the last event.
pub fn full_span(device: &DeviceData) -> (f64, f64) {
    let (a, b) = device.timeline.time_span_ns();
    let (a, b) = (a as f64, b as f64);
    // A little room after the last event, and a non-empty span for one-event traces.
    let pad = ((b - a) * 0.01).max(1.0);
    (a, b + pad)
}

/// The visible time range.
pub fn visible_span(state: &TimelineState, device: &DeviceData) -> (f64, f64) {
    state.view_ns.unwrap_or_else(|| full_span(device))
}

/// Zooms by `factor` (>1 zooms in) around time `center_ns`.
pub fn zoom(state: &mut TimelineState, device: &DeviceData, center_ns: f64, factor: f64) {
    let (a, b) = visible_span(state, device);
    let (fa, fb) = full_span(device);
    let new_width = ((b - a) / factor).clamp(10.0, (fb - fa) * 1.5);
    let t = if b > a { (center_ns - a) / (b - a) } else { 0.5 };
    let start = center_ns - t * new_width;
    state.view_ns = Some((start, start + new_width));
}

/// Draws the timeline in `size` and handles its input (zoom and pan change `state`); the point
/// clicked this frame, if one was.
pub fn timeline_ui(
    ui: &mut egui::Ui,
    doc: &Document,
    device: &DeviceData,
    state: &mut TimelineState,
    selected_point: Option<Point>,
    size: Vec2,
) -> Option<Point> {
    let (rect, _) = ui.allocate_exact_size(size, Sense::hover());
    let band_px = BAND_ROW_PX * BAND_ROWS as f32;
    let plot = Rect::from_min_max(
        pos2(rect.left() + AXIS_LEFT_PX, rect.top() + 6.0),
        pos2(rect.right() - 8.0, rect.bottom() - AXIS_BOTTOM_PX - band_px - 4.0),
    );
    if plot.width() < 20.0 || plot.height() < 20.0 {
        return None;
    }
    let band =
        Rect::from_min_max(pos2(plot.left(), plot.bottom() + 2.0), pos2(plot.right(), plot.bottom() + 2.0 + band_px));
    let response = ui.interact(plot.union(band), ui.scope_id().with("timeline"), Sense::click_and_drag());
    response.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Canvas, true, "Memory timeline"));
    let clicked = input(ui, &response, plot, device, state);
    let (v0, v1) = visible_span(state, device);

    let painter = ui.painter_at(rect);
    let visuals = ui.visuals();
    painter.rect_filled(plot, CornerRadius::ZERO, visuals.extreme_bg_color);

    let columns_n = plot.width().max(1.0) as usize;
    // A trace of one instant (a snapshot without history) is that state across the whole width.
    let single = device.timeline.len() == 1;
    let columns = if single {
        let state = device.timeline.columns(v0, v1, 1).into_iter().next().flatten();
        vec![state; columns_n]
    } else {
        device.timeline.columns(v0, v1, columns_n)
    };
    let y_top_bytes = state.y_top_bytes.unwrap_or_else(|| y_extent_bytes(device) * 1.08);
    let y_of = |bytes: u64| plot.bottom() - (bytes as f64 / y_top_bytes * f64::from(plot.height())) as f32;

    axis::y_axis(&painter, plot, y_top_bytes, visuals);
    if single {
        let what = if doc.trace.metadata.source_format == vramscope_trace_format::SourceFormat::PytorchSnapshot {
            "one instant: the allocator's state when the snapshot was taken (no history was recorded)"
        } else {
            "one instant: the trace holds a single sample of this device"
        };
        painter.text(
            pos2(plot.center().x, plot.bottom() + BAND_ROW_PX * BAND_ROWS as f32 + 8.0),
            egui::Align2::CENTER_TOP,
            what,
            egui::FontId::proportional(11.0),
            visuals.text_color(),
        );
    } else {
        // Times from the trace's first event (of any device), as every face says them.
        let origin = if doc.has_no_clock() { device.timeline.time_span_ns().0 } else { doc.trace.origin_ns() } as f64;
        let label_y = plot.bottom() + BAND_ROW_PX * BAND_ROWS as f32 + 8.0;
        axis::x_axis(&painter, plot, origin, doc.has_no_clock(), (v0, v1), label_y, visuals);
    }

    // Stacked categories, one quad per category per column; before the categories are worked
    // out, allocated memory in one colour of its own.
    let pending = !device.timeline.has_categories();
    let mut mesh = Mesh::default();
    let mut present = [false; CATEGORIES];
    let mut requested_line = Vec::with_capacity(columns.len());
    let mut reserved_line = Vec::with_capacity(columns.len() * 2);
    for (c, column) in columns.iter().enumerate() {
        let Some(Column { range, categories }) = column else { continue };
        let x = plot.left() + c as f32;
        if pending && range.allocated_max > 0 {
            let r = Rect::from_min_max(pos2(x, y_of(range.allocated_max)), pos2(x + 1.0, y_of(0)));
            mesh.add_colored_rect(r, palette::ALLOCATED_PENDING);
        }
        let mut base = 0u64;
        for (i, &bytes) in categories.iter().enumerate() {
            if bytes == 0 {
                continue;
            }
            present[i] = true;
            let top = base + bytes;
            let r = Rect::from_min_max(pos2(x, y_of(top)), pos2(x + 1.0, y_of(base)));
            mesh.add_colored_rect(r, palette::category_color_index(i));
            base = top;
        }
        // The lowest allocated in the column, so fast churn shows as a band, not a solid fill.
        if range.allocated_min < range.allocated_max {
            let r = Rect::from_min_max(pos2(x, y_of(range.allocated_max)), pos2(x + 1.0, y_of(range.allocated_min)));
            mesh.add_colored_rect(r, Color32::from_white_alpha(if visuals.dark_mode { 18 } else { 40 }));
        }
        requested_line.push(pos2(x + 0.5, y_of(range.requested_max)));
        reserved_line.push(pos2(x + 0.5, y_of(range.reserved_max)));
        if range.reserved_min < range.reserved_max {
            painter.vline(
                x + 0.5,
                y_of(range.reserved_max)..=y_of(range.reserved_min),
                Stroke::new(1.0, palette::RESERVED),
            );
        }
    }
    painter.add(Shape::mesh(mesh));
    if requested_line.len() > 1 {
        painter.add(Shape::line(requested_line, Stroke::new(1.2, palette::REQUESTED)));
    }
    if reserved_line.len() > 1 {
        painter.add(Shape::line(reserved_line, Stroke::new(1.5, palette::RESERVED)));
    }
    if let Some(total) = device.total_memory_bytes.filter(|&t| (t as f64) < y_top_bytes) {
        let y = y_of(total);
        painter.hline(plot.x_range(), y, Stroke::new(1.0, visuals.warn_fg_color));
        painter.text(
            pos2(plot.right() - 4.0, y - 2.0),
            egui::Align2::RIGHT_BOTTOM,
            "device memory",
            egui::FontId::proportional(11.0),
            visuals.warn_fg_color,
        );
    }

    unrecorded::overlay(&painter, &doc.trace, device, plot, (v0, v1), visuals);
    marks(&painter, doc, device, plot, (v0, v1), y_top_bytes, selected_point);
    annotation_band(&painter, &doc.trace, device, band, (v0, v1), visuals);
    if let Some(start_x) = state.box_start_x
        && let Some(p) = response.hover_pos().or(response.interact_pointer_pos())
    {
        let r = Rect::from_x_y_ranges(start_x.min(p.x)..=start_x.max(p.x), plot.y_range());
        painter.rect_filled(r, CornerRadius::ZERO, palette::SELECTION.gamma_multiply(0.15));
        painter.rect_stroke(r, CornerRadius::ZERO, Stroke::new(1.0, palette::SELECTION), StrokeKind::Inside);
    }
    painter.rect_stroke(plot, CornerRadius::ZERO, visuals.widgets.noninteractive.bg_stroke, StrokeKind::Inside);

    hover_ui(&painter, &response, doc, device, (plot, band), (v0, v1), visuals);
    legend_ui(ui, &present, pending.then_some(doc.categories_failed));
    clicked
}

/// Under the pointer: the time, the curves and the categories over the plot, the annotations
/// over the band.
fn hover_ui(
    painter: &egui::Painter,
    response: &egui::Response,
    doc: &Document,
    device: &DeviceData,
    (plot, band): (Rect, Rect),
    (v0, v1): (f64, f64),
    visuals: &egui::Visuals,
) {
    let ns_per_px = (v1 - v0) / f64::from(plot.width());
    if let Some(pointer) = response.hover_pos().filter(|p| plot.contains(*p)) {
        painter.vline(pointer.x, plot.y_range(), Stroke::new(1.0, visuals.weak_text_color()));
        let t = time_at_x(pointer.x, plot, (v0, v1)).round() as i64;
        let point = device.timeline.point_at(t);
        let unseen = unrecorded::at(&doc.trace, device, t);
        response.clone().on_hover_ui_at_pointer(|ui| {
            if let Some(gap) = unseen {
                ui.colored_label(ui.visuals().warn_fg_color, crate::words::unrecorded_here(gap));
            }
            readout_ui(ui, doc, device, point);
        });
    } else if let Some(pointer) = response.hover_pos().filter(|p| band.contains(*p)) {
        let t = time_at_x(pointer.x, plot, (v0, v1));
        let row = ((pointer.y - band.top()) / BAND_ROW_PX) as usize;
        let names: Vec<String> = device
            .annotations
            .iter()
            .filter_map(|&i| doc.trace.annotations.get(i))
            .filter(|a| {
                band_row(a.kind) == Some(row)
                    && (a.start_ns as f64) <= t + ns_per_px * 2.0
                    && (a.end_ns as f64) >= t - ns_per_px * 2.0
            })
            .take(8)
            .map(|a| {
                format!(
                    "{}: {} ({})",
                    kind_label(a.kind),
                    doc.trace.interner.resolve(a.name),
                    units::duration_ns(a.end_ns - a.start_ns)
                )
            })
            .collect();
        if !names.is_empty() {
            response.clone().on_hover_ui_at_pointer(|ui| {
                for name in names {
                    ui.label(name);
                }
            });
        }
    }
}

/// The peak, the OOMs and the selected instant, over the curves.
fn marks(
    painter: &egui::Painter,
    doc: &Document,
    device: &DeviceData,
    plot: Rect,
    (v0, v1): (f64, f64),
    y_top_bytes: f64,
    selected_point: Option<Point>,
) {
    let ns_per_px = (v1 - v0) / f64::from(plot.width());
    let x_of = |t: f64| plot.left() + ((t - v0) / ns_per_px) as f32;
    let y_of = |bytes: u64| plot.bottom() - (bytes as f64 / y_top_bytes * f64::from(plot.height())) as f32;
    // The peak.
    let peak_t = device.timeline.time_ns(device.peak_point) as f64;
    let (peak_bytes, _, _) = device.timeline.values(device.peak_point);
    let mut peak_label = Rect::NOTHING;
    if (v0..=v1).contains(&peak_t) {
        let p = pos2(x_of(peak_t), y_of(peak_bytes));
        painter.circle_filled(p, 4.0, palette::PEAK);
        let label = format!("peak {}", units::bytes(peak_bytes));
        let align = if p.x > plot.right() - 120.0 { egui::Align2::RIGHT_BOTTOM } else { egui::Align2::LEFT_BOTTOM };
        let offset = if p.x > plot.right() - 120.0 { vec2(-6.0, -4.0) } else { vec2(6.0, -4.0) };
        peak_label = painter.text(p + offset, align, label, egui::FontId::proportional(12.0), palette::PEAK);
    }

    // Memory that grows every iteration: the allocated bytes at each iteration's start, joined,
    // from the first after warm-up, and the rate at the last.
    if let Some(growth) = device.growth.as_ref().filter(|g| g.alarms()) {
        let points: Vec<Pos2> = growth
            .boundary_ns
            .iter()
            .zip(&growth.boundary_bytes)
            .skip(1)
            .map(|(&t, &bytes)| pos2(x_of(t as f64), y_of(bytes)))
            .collect();
        let stroke = Stroke::new(2.0, palette::OOM);
        painter.add(Shape::dashed_line(&points, stroke, 6.0, 4.0));
        for p in points.iter().filter(|p| plot.x_range().contains(p.x)) {
            painter.circle_filled(*p, 3.0, palette::OOM);
        }
        if let Some(last) = points.last().filter(|p| plot.x_range().contains(p.x)) {
            let label = format!("+{} per iteration", units::bytes(growth.bytes_per_iteration));
            let font = egui::FontId::proportional(12.0);
            // Above the last point, or below it where the peak's label already is (the peak is
            // often the last iteration's).
            let size = painter.layout_no_wrap(label.clone(), font.clone(), palette::OOM).size();
            let above = egui::Align2::RIGHT_BOTTOM.anchor_size(*last + vec2(-4.0, -6.0), size);
            let (at, align) = if above.intersects(peak_label) {
                (*last + vec2(-4.0, 6.0), egui::Align2::RIGHT_TOP)
            } else {
                (*last + vec2(-4.0, -6.0), egui::Align2::RIGHT_BOTTOM)
            };
            painter.text(at, align, label, font, palette::OOM);
        }
    }

    // OOMs.
    for oom in doc.trace.ooms.iter().filter(|o| o.device == device.device) {
        let t = oom.time_ns as f64;
        if (v0..=v1).contains(&t) {
            let x = x_of(t);
            painter.vline(x, plot.y_range(), Stroke::new(2.0, palette::OOM));
            painter.text(
                pos2(x + 3.0, plot.top() + 2.0),
                egui::Align2::LEFT_TOP,
                format!("OOM: {} requested", units::bytes(oom.requested_bytes)),
                egui::FontId::proportional(11.0),
                palette::OOM,
            );
        }
    }

    // The selected instant.
    if let Some(point) = selected_point {
        let t = device.timeline.time_ns(point) as f64;
        if (v0..=v1).contains(&t) {
            painter.vline(x_of(t), plot.y_range(), Stroke::new(1.5, palette::SELECTION));
        }
    }
}

/// The timeline's input: ctrl+wheel / pinch zooms around the cursor, wheel sideways pans, drag
/// pans, shift+drag or right-drag zooms to a box, click selects, double-click resets.
fn input(
    ui: &egui::Ui,
    response: &egui::Response,
    plot: Rect,
    device: &DeviceData,
    state: &mut TimelineState,
) -> Option<Point> {
    let mut clicked = None;
    let (v0, v1) = visible_span(state, device);
    let ns_per_px = (v1 - v0) / f64::from(plot.width());
    let time_at = |x: f32| v0 + f64::from(x - plot.left()) * ns_per_px;

    if let Some(pointer) = response.hover_pos() {
        let (zoom_delta, scroll) = ui.input(|i| (i.zoom_delta(), i.smooth_scroll_delta));
        if (zoom_delta - 1.0).abs() > 1e-4 {
            zoom(state, device, time_at(pointer.x), f64::from(zoom_delta));
        } else if scroll.x.abs() > 0.0 {
            let shift = -f64::from(scroll.x) * ns_per_px;
            state.view_ns = Some((v0 + shift, v1 + shift));
        }
    }
    let box_drag = ui.input(|i| i.modifiers.shift) || response.dragged_by(egui::PointerButton::Secondary);
    if response.drag_started() && box_drag {
        state.box_start_x = response.interact_pointer_pos().map(|p| p.x);
    }
    if response.dragged() && state.box_start_x.is_none() && response.dragged_by(egui::PointerButton::Primary) {
        let shift = -f64::from(response.drag_delta().x) * ns_per_px;
        state.view_ns = Some((v0 + shift, v1 + shift));
    }
    if response.drag_stopped()
        && let (Some(start_x), Some(end)) = (state.box_start_x.take(), response.interact_pointer_pos())
    {
        let (x0, x1) = (start_x.min(end.x), start_x.max(end.x));
        if x1 - x0 > 3.0 {
            state.view_ns = Some((time_at(x0), time_at(x1)));
        }
    }
    if response.double_clicked() {
        state.reset();
    } else if response.clicked()
        && let Some(p) = response.interact_pointer_pos()
    {
        clicked = Some(device.timeline.point_at(time_at(p.x).round() as i64));
    }
    clicked
}

fn time_at_x(x: f32, plot: Rect, (v0, v1): (f64, f64)) -> f64 {
    v0 + f64::from(x - plot.left()) / f64::from(plot.width()) * (v1 - v0)
}

/// The time, the curves and the categories at one point.
fn readout_ui(ui: &mut egui::Ui, doc: &Document, device: &DeviceData, point: Point) {
    let t = &device.timeline;
    let (allocated, requested, reserved) = t.values(point);
    let first = doc.trace.origin_ns();
    let when = if doc.has_no_clock() {
        format!("event #{}", t.time_ns(point))
    } else {
        format!("t = +{}", units::duration_ns(t.time_ns(point) - first))
    };
    ui.strong(when);
    egui::Grid::new("readout").num_columns(2).show(ui, |ui| {
        ui.label("allocated");
        ui.monospace(units::bytes(allocated));
        ui.end_row();
        ui.colored_label(palette::REQUESTED, "requested");
        ui.monospace(units::bytes(requested));
        ui.end_row();
        ui.colored_label(palette::RESERVED, "reserved");
        ui.monospace(units::bytes(reserved));
        ui.end_row();
        if !t.has_categories() {
            ui.weak("  categories");
            ui.weak(if doc.categories_failed { "could not be worked out" } else { "being worked out…" });
            ui.end_row();
        }
        let mut categories: Vec<(usize, u64)> =
            t.categories(point).into_iter().enumerate().filter(|c| c.1 > 0).collect();
        categories.sort_by_key(|b| std::cmp::Reverse(b.1));
        for (i, bytes) in categories {
            let Some(&category) = Category::ALL.get(i) else { continue };
            ui.colored_label(palette::category_color(category), format!("  {}", palette::category_label(category)));
            ui.monospace(units::bytes(bytes));
            ui.end_row();
        }
    });
    if let Some(e) = t.event(point).and_then(|i| doc.trace.events.get(i)) {
        ui.weak(format!("after {} of {} at {:#x}", e.kind.pytorch_name(), units::bytes(e.size_bytes), e.address));
    }
}

/// `without_categories`: `None` when the categories are drawn; else whether they could not be
/// worked out (`false`: not yet).
fn legend_ui(ui: &mut egui::Ui, present: &[bool; CATEGORIES], without_categories: Option<bool>) {
    ui.horizontal_wrapped(|ui| {
        ui.spacing_mut().item_spacing.x = 12.0;
        match without_categories {
            Some(false) => {
                swatch(ui, palette::ALLOCATED_PENDING);
                ui.label("allocated: categories being worked out…").on_hover_text(
                    "The curves are drawn first; the split of allocated memory by category (parameters, \
                     activations, …) follows as soon as every block's category is worked out.",
                );
            }
            Some(true) => {
                swatch(ui, palette::ALLOCATED_PENDING);
                ui.label("allocated: categories could not be worked out").on_hover_text(
                    "The curves are right; working out the split of allocated memory by category \
                     failed (the message at the bottom of the window says why).",
                );
            }
            None => {}
        }
        for (i, &shown) in present.iter().enumerate() {
            let Some(&category) = Category::ALL.get(i) else { continue };
            if shown {
                swatch(ui, palette::category_color(category));
                ui.label(palette::category_label(category));
            }
        }
        line_swatch(ui, palette::REQUESTED);
        ui.label("requested");
        line_swatch(ui, palette::RESERVED);
        ui.label("reserved");
    });
}

/// The band row an annotation kind goes in.
fn band_row(kind: AnnotationKind) -> Option<usize> {
    match kind {
        AnnotationKind::Iteration
        | AnnotationKind::Forward
        | AnnotationKind::Backward
        | AnnotationKind::OptimizerStep => Some(0),
        AnnotationKind::UserRange | AnnotationKind::Module => Some(1),
        AnnotationKind::Op | AnnotationKind::Snapshot | AnnotationKind::Marker => Some(2),
    }
}

fn kind_label(kind: AnnotationKind) -> &'static str {
    match kind {
        AnnotationKind::UserRange => "range",
        AnnotationKind::Op => "op",
        AnnotationKind::Iteration => "iteration",
        AnnotationKind::Forward => "forward",
        AnnotationKind::Backward => "backward",
        AnnotationKind::OptimizerStep => "optimizer step",
        AnnotationKind::Module => "module",
        AnnotationKind::Snapshot => "snapshot",
        AnnotationKind::Marker => "marker",
    }
}

fn kind_color(kind: AnnotationKind) -> Color32 {
    match kind {
        AnnotationKind::Iteration => Color32::from_rgb(0x99, 0x99, 0x99),
        AnnotationKind::Forward => palette::category_color(Category::Activation),
        AnnotationKind::Backward => palette::category_color(Category::Gradient),
        AnnotationKind::OptimizerStep => palette::category_color(Category::OptimizerState),
        AnnotationKind::UserRange | AnnotationKind::Module => Color32::from_rgb(0x6b, 0x8e, 0xc9),
        AnnotationKind::Op => Color32::from_rgb(0x8a, 0x9b, 0xa8),
        AnnotationKind::Snapshot | AnnotationKind::Marker => Color32::from_rgb(0xc9, 0x8a, 0x3d),
    }
}

fn annotation_band(
    painter: &egui::Painter,
    trace: &Trace,
    device: &DeviceData,
    band: Rect,
    (v0, v1): (f64, f64),
    visuals: &egui::Visuals,
) {
    painter.rect_filled(band, CornerRadius::ZERO, visuals.faint_bg_color);
    let px_per_ns = f64::from(band.width()) / (v1 - v0);
    for a in device.annotations.iter().filter_map(|&i| trace.annotations.get(i)) {
        let Some(row) = band_row(a.kind) else { continue };
        // Ops narrower than a pixel are noise at this zoom.
        if a.kind == AnnotationKind::Op && (a.end_ns - a.start_ns) as f64 * px_per_ns < 1.0 {
            continue;
        }
        let Some((x0, x1)) = x_span(band, (v0, v1), a.start_ns, a.end_ns) else { continue };
        let y0 = band.top() + row as f32 * BAND_ROW_PX + 1.0;
        let r = Rect::from_min_max(pos2(x0, y0), pos2(x1, y0 + BAND_ROW_PX - 2.0));
        painter.rect_filled(r, CornerRadius::same(2), kind_color(a.kind).gamma_multiply(0.8));
        if r.width() > 40.0 {
            let name = trace.interner.resolve(a.name);
            let text = if name.is_empty() { kind_label(a.kind) } else { name };
            let galley = painter.layout_no_wrap(text.to_owned(), egui::FontId::proportional(10.0), Color32::BLACK);
            if galley.size().x < r.width() - 4.0 {
                painter.galley(Pos2::new(r.left() + 2.0, r.top()), galley, Color32::BLACK);
            }
        }
    }
}
