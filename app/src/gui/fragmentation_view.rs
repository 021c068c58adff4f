//! The fragmentation map: the allocator's segments at the selected instant, one row per
//! segment, blocks at their offsets coloured by category, free ranges left empty.

use egui::{CornerRadius, Rect, Sense, Stroke, StrokeKind, pos2, vec2};
use vramscope_trace_format::{SegmentPool, Trace};

use super::context::{Command, ViewCtx};
use super::palette;
use super::settings::SegmentOrder;
use super::widgets::block::{allocation_site, stack_ui};
use super::worker::InstantView;
use crate::query::instant::SegmentAt;
use crate::query::segments::Fragmentation;
use crate::query::timeline::Point;
use crate::units;

const LABEL_PX: f32 = 232.0;
const STATS_PX: f32 = 250.0;
const ROW_PX: f32 = 18.0;

fn totals_ui(ui: &mut egui::Ui, total: &Fragmentation, segments: usize) {
    ui.horizontal_wrapped(|ui| {
        let item = |ui: &mut egui::Ui, name: &str, value: String, tip: &str| {
            ui.label(format!("{name}:"));
            ui.strong(value).on_hover_text(tip);
            ui.add_space(10.0);
        };
        item(ui, "segments", units::count(segments), "Segments reserved from the driver at this instant");
        item(ui, "reserved", units::bytes(total.reserved_bytes), "Bytes of all segments");
        item(
            ui,
            "allocated",
            units::bytes(total.allocated_bytes),
            "Bytes of live blocks (PyTorch's memory_allocated())",
        );
        if total.awaiting_free_bytes > 0 {
            item(
                ui,
                "awaiting free",
                units::bytes(total.awaiting_free_bytes),
                "Blocks the program freed that still wait for the streams that used them (record_stream, NCCL): \
                 not allocated, and not free until those streams are done (hatched)",
            );
        }
        item(
            ui,
            "internal waste",
            units::bytes(total.free_internal_bytes),
            "Rounding inside live blocks: allocated minus requested",
        );
        item(
            ui,
            "free",
            units::bytes(total.free_external_bytes),
            "Bytes of segments in no block, live or awaiting its free",
        );
        item(
            ui,
            "largest free range",
            units::bytes(total.largest_free_bytes),
            "The largest contiguous free range of any segment",
        );
        let frag = total.external_fragmentation();
        item(
            ui,
            "external fragmentation",
            format!("{:.0}%", frag * 100.0),
            "1 - largest free range / total free: 0% when the free space is one range",
        );
    });
}

/// The fragmentation map at the instant of `view`.
pub fn fragmentation_ui(
    ui: &mut egui::Ui,
    trace: &Trace,
    view: &InstantView,
    order: &mut SegmentOrder,
    hide_noise: bool,
) {
    let instant = &view.instant;
    if instant.segments.is_empty() {
        ui.add_space(20.0);
        ui.vertical_centered(|ui| {
            ui.heading("No segment information in this trace");
            ui.label("PyTorch memory snapshots and vramscope recordings carry segments; profiler traces do not.");
        });
        return;
    }
    totals_ui(ui, &instant.total, instant.segments.len());
    ui.horizontal(|ui| {
        ui.label("order:");
        ui.selectable_value(order, SegmentOrder::Size, "size");
        ui.selectable_value(order, SegmentOrder::Free, "free bytes");
        ui.selectable_value(order, SegmentOrder::Address, "address");
        ui.separator();
        ui.weak("Each row is one segment drawn to its own width; blocks at their offsets, gaps are free.");
    });
    let mut rows: Vec<&SegmentAt> = instant.segments.iter().collect();
    match order {
        SegmentOrder::Size => rows.sort_by(|a, b| b.size_bytes.cmp(&a.size_bytes).then(a.address.cmp(&b.address))),
        SegmentOrder::Free => rows.sort_by(|a, b| {
            b.fragmentation
                .free_external_bytes
                .cmp(&a.fragmentation.free_external_bytes)
                .then(a.address.cmp(&b.address))
        }),
        SegmentOrder::Address => {}
    }
    egui::ScrollArea::vertical().id_salt("segments").auto_shrink([false, false]).show_rows(
        ui,
        ROW_PX,
        rows.len(),
        |ui, range| {
            for segment in rows.get(range).unwrap_or_default() {
                segment_row_ui(ui, trace, view, segment, hide_noise);
            }
        },
    );
}

fn pool_label(pool: Option<SegmentPool>) -> &'static str {
    match pool {
        Some(SegmentPool::Small) => "small",
        Some(SegmentPool::Large) => "large",
        _ => "",
    }
}

fn segment_row_ui(ui: &mut egui::Ui, trace: &Trace, view: &InstantView, segment: &SegmentAt, hide_noise: bool) {
    let width = ui.available_width();
    let (rect, response) = ui.allocate_exact_size(vec2(width, ROW_PX), Sense::hover());
    let painter = ui.painter_at(rect);
    let visuals = ui.visuals();
    let private = segment.pool_id != (0, 0);
    let pool = if private { "private" } else { pool_label(segment.pool) };
    painter.text(
        pos2(rect.left() + 2.0, rect.center().y),
        egui::Align2::LEFT_CENTER,
        format!("{:#x} {:>9} {pool}", segment.address, units::bytes(segment.size_bytes)),
        egui::FontId::monospace(11.0),
        if private { visuals.warn_fg_color } else { visuals.text_color() },
    );
    let bar = Rect::from_min_max(
        pos2(rect.left() + LABEL_PX, rect.top() + 2.0),
        pos2((rect.right() - STATS_PX).max(rect.left() + LABEL_PX + 20.0), rect.bottom() - 2.0),
    );
    painter.rect_filled(bar, CornerRadius::ZERO, visuals.extreme_bg_color);
    let scale = f64::from(bar.width()) / segment.size_bytes.max(1) as f64;
    let x_of = |address: u64| bar.left() + (address.saturating_sub(segment.address) as f64 * scale) as f32;
    let mut hovered = None;
    for &i in &segment.blocks {
        let Some(b) = view.instant.blocks.get(i) else { continue };
        let x0 = x_of(b.block.address);
        let x1 = x_of(b.block.address.saturating_add(b.block.size_bytes)).min(bar.right()).max(x0 + 1.0);
        let r = Rect::from_x_y_ranges(x0..=x1, bar.y_range());
        painter.rect_filled(r, CornerRadius::ZERO, palette::category_color(b.attribution.category));
        // The requested part is solid, the rounding waste lighter.
        if b.block.requested_bytes < b.block.size_bytes && r.width() > 3.0 {
            let waste_x = x_of(b.block.address.saturating_add(b.block.requested_bytes));
            let w = Rect::from_x_y_ranges(waste_x..=x1, bar.y_range());
            painter.rect_filled(w, CornerRadius::ZERO, visuals.extreme_bg_color.gamma_multiply(0.6));
        }
        if r.width() > 2.0 {
            painter.vline(x1, bar.y_range(), Stroke::new(1.0, visuals.extreme_bg_color));
        }
        if response.hover_pos().is_some_and(|p| r.contains(p)) {
            hovered = Some(i);
        }
    }
    // Blocks the program freed that wait for their streams: taken, not allocated (hatched grey).
    let mut hovered_awaiting = None;
    for &i in &segment.awaiting {
        let Some(b) = view.instant.awaiting.get(i) else { continue };
        let x0 = x_of(b.address);
        let x1 = x_of(b.address.saturating_add(b.size_bytes)).min(bar.right()).max(x0 + 1.0);
        let r = Rect::from_x_y_ranges(x0..=x1, bar.y_range());
        let grey = visuals.weak_text_color();
        painter.rect_filled(r, CornerRadius::ZERO, grey.gamma_multiply(0.35));
        let mut x = x0;
        while x < x1 {
            painter
                .line_segment([pos2(x, r.bottom()), pos2((x + r.height()).min(x1), r.top())], Stroke::new(1.0, grey));
            x += 6.0;
        }
        if response.hover_pos().is_some_and(|p| r.contains(p)) {
            hovered_awaiting = Some(*b);
        }
    }
    // A private pool's segment is outlined: its free space serves only that pool.
    let outline =
        if private { Stroke::new(1.5, visuals.warn_fg_color) } else { visuals.widgets.noninteractive.bg_stroke };
    painter.rect_stroke(bar, CornerRadius::ZERO, outline, StrokeKind::Inside);
    let f = &segment.fragmentation;
    painter.text(
        pos2(bar.right() + 8.0, rect.center().y),
        egui::Align2::LEFT_CENTER,
        format!("free {:>9}  largest {:>9}", units::bytes(f.free_external_bytes), units::bytes(f.largest_free_bytes)),
        egui::FontId::monospace(11.0),
        visuals.text_color(),
    );
    if let Some(b) = hovered_awaiting {
        response.on_hover_ui_at_pointer(|ui| {
            ui.strong(format!(
                "{} block at {:#x} (+{}), freed, awaiting its streams",
                units::bytes(b.size_bytes),
                b.address,
                units::bytes(b.address - segment.address)
            ));
            ui.label(
                "The program freed it (PyTorch no longer counts it as allocated), but a stream that used it \
                 has not finished with it yet: its memory is not free until then.",
            );
            ui.separator();
            stack_ui(ui, trace, b.stack, hide_noise, 12);
        });
    } else if let Some(b) = hovered.and_then(|i| view.instant.blocks.get(i)) {
        response.on_hover_ui_at_pointer(|ui| {
            ui.strong(format!(
                "{} block at {:#x} (+{})",
                units::bytes(b.block.size_bytes),
                b.block.address,
                units::bytes(b.block.address - segment.address)
            ));
            ui.label(format!("requested {}", units::bytes(b.block.requested_bytes)));
            ui.label(format!(
                "{}: {}",
                palette::category_label(b.attribution.category),
                crate::words::evidence(trace, b.attribution.evidence)
            ));
            ui.label(format!("allocated at {}", allocation_site(trace, b, hide_noise)));
            ui.separator();
            stack_ui(ui, trace, b.block.stack, hide_noise, 12);
        });
    } else if response.hover_pos().is_some() {
        response.on_hover_ui_at_pointer(|ui| {
            ui.strong(format!("segment {:#x}, {}", segment.address, units::bytes(segment.size_bytes)));
            egui::Grid::new("segment-tip").num_columns(2).show(ui, |ui| {
                for (name, value) in [
                    ("allocated", f.allocated_bytes),
                    ("awaiting free", f.awaiting_free_bytes),
                    ("requested", f.requested_bytes),
                    ("internal waste", f.free_internal_bytes),
                    ("free", f.free_external_bytes),
                    ("largest free range", f.largest_free_bytes),
                ] {
                    ui.label(name);
                    ui.monospace(units::bytes(value));
                    ui.end_row();
                }
            });
            ui.label(format!(
                "{}, stream {:#x}",
                units::counted(segment.blocks.len(), "block", "blocks"),
                segment.stream
            ));
            if private {
                let (a, b) = segment.pool_id;
                ui.colored_label(
                    ui.visuals().warn_fg_color,
                    format!(
                        "private pool ({a}, {b}): a CUDA graph's or a MemPool's. Only that pool's allocations \
                         use its free space."
                    ),
                );
            }
        });
    }
}

/// The fragmentation view: a scrubber over the events, and the segments at the selected instant.
pub fn view_ui(ui: &mut egui::Ui, ctx: &ViewCtx<'_>, out: &mut Vec<Command>) {
    let Some(v) = ctx.instant else { return };
    scrubber_ui(ui, ctx, out);
    let mut order = ctx.settings.segment_order;
    fragmentation_ui(ui, &ctx.doc.trace, v, &mut order, ctx.settings.hide_noise);
    if order != ctx.settings.segment_order {
        out.push(Command::SegmentOrder(order));
    }
}

/// A slider over the trace's events that moves the selected instant.
fn scrubber_ui(ui: &mut egui::Ui, ctx: &ViewCtx<'_>, out: &mut Vec<Command>) {
    let last = ctx.device.timeline.last_point().0;
    // The slider moves over the points' numbers.
    let mut point = ctx.selected_point.unwrap_or_default().0;
    let before = point;
    ui.horizontal(|ui| {
        if ui.button("‹ prev").on_hover_text("Previous event (←)").clicked() {
            point = point.saturating_sub(1);
        }
        if ui.button("next ›").on_hover_text("Next event (→)").clicked() {
            point = (point + 1).min(last);
        }
        ui.spacing_mut().slider_width = (ui.available_width() - 140.0).max(100.0);
        ui.add(egui::Slider::new(&mut point, 0..=last).text("event").clamping(egui::SliderClamping::Always))
            .on_hover_text("Replay the allocator's state through the trace");
    });
    if point != before {
        out.push(Command::Select(Point(point)));
    }
}
