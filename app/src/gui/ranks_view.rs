//! The ranks view: a run of several ranks side by side. The run's summary on top (which rank
//! peaks, how far above the median, what the ranks differ in, which ran out of memory first),
//! a table of each rank's peak, and a timeline per rank below, all on one byte scale and one time
//! axis, aligned at each rank's first iteration (ranks' clocks need not agree). A click on a rank
//! opens it in the other views; rows appear as their files are read.

use std::sync::Arc;

use egui::{Color32, Pos2, Rect, Sense, Stroke, pos2, vec2};
use egui_extras::{Column, TableBuilder};

use super::context::{Command, ViewCtx};
use super::palette;
use super::ranks::{RankRow, RunState};
use crate::{units, words};

/// Height of one rank's timeline.
const ROW_HEIGHT: f32 = 34.0;
/// The allocated area of a rank's timeline (no one category: the outline keeps totals).
const ALLOCATED: Color32 = Color32::from_rgb(0x5b, 0x84, 0xb1);
/// Width of the rank labels left of the timelines.
const LABEL_WIDTH: f32 = 70.0;

/// The view, from the window's dispatch.
pub fn view_ui(ui: &mut egui::Ui, ctx: &ViewCtx<'_>, out: &mut Vec<Command>) {
    if let Some(run) = ctx.run {
        run_ui(ui, run, out);
    }
}

/// Draws the run; a click on a rank asks to open it.
pub fn run_ui(ui: &mut egui::Ui, run: &RunState, out: &mut Vec<Command>) {
    let rows = run.rows();
    let mut clicked = None;
    ui.horizontal(|ui| {
        ui.heading(match run.finished.as_ref() {
            Some(_) => format!("A run of {} ranks", rows.len()),
            None => format!("Reading a run: {} ranks so far", rows.len()),
        });
        if run.is_reading() {
            let (read, total) = run.progress();
            let fraction = read as f32 / total.max(1) as f32;
            ui.add(
                egui::ProgressBar::new(fraction)
                    .desired_width(260.0)
                    .text(format!("{read} of {total} files read"))
                    .animate(false),
            );
            ui.weak("Esc stops");
        }
    });
    if let Some(finished) = &run.finished {
        if let Some(summary) = &finished.summary {
            ui.label(words::run_headline(summary));
            for line in words::site_spread(summary) {
                ui.weak(line);
            }
        }
        for note in &finished.notes {
            ui.colored_label(ui.visuals().warn_fg_color, note);
        }
    }
    ui.separator();
    let worst = run.finished.as_ref().and_then(|f| f.summary.as_ref()).map(|s| s.worst_rank);
    // Aligned at each rank's first iteration where the ranks recorded their phases, else at
    // their first events.
    let zero = if rows.iter().any(|(_, r)| r.figures.first_iteration_ns.is_some()) {
        "first iteration"
    } else {
        "first event"
    };
    let table_height = (ui.available_height() * 0.42).min(22.0 * (rows.len() as f32 + 1.5)).max(60.0);
    ui.allocate_ui(vec2(ui.available_width(), table_height), |ui| {
        if let Some(rank) = table(ui, &rows, run.shown, worst, zero) {
            clicked = Some(rank);
        }
    });
    ui.separator();
    if let Some(rank) = timelines(ui, &rows, run.shown, zero) {
        clicked = Some(rank);
    }
    out.extend(clicked.map(Command::OpenRank));
}

/// The categories largest at a rank's peak, in words: `activation 3.1 MiB, parameter 1.2 MiB`.
fn top_categories(row: &RankRow) -> String {
    let mut by_size = words::by_name(&row.figures.peak.categories_at_peak);
    by_size.sort_by_key(|&(_, b)| std::cmp::Reverse(b));
    let top = by_size.iter().take(3);
    top.map(|(c, b)| format!("{} {}", palette::category_label(*c), units::bytes(*b))).collect::<Vec<_>>().join(", ")
}

/// When, from the rank's first iteration (else its first event).
fn since_start(row: &RankRow, time_ns: i64) -> String {
    if !row.has_clock {
        return format!("event #{time_ns}");
    }
    let from = row.align_ns();
    let sign = if time_ns < from { "-" } else { "+" };
    format!("{sign}{}", units::duration_ns((time_ns - from).abs()))
}

fn table(
    ui: &mut egui::Ui,
    rows: &[(Option<u32>, Arc<RankRow>)],
    shown: Option<u32>,
    worst: Option<u32>,
    zero: &str,
) -> Option<u32> {
    let mut clicked = None;
    let nodes = rows.iter().any(|(_, r)| r.figures.node.is_some() || r.figures.host.is_some());
    let mut builder = TableBuilder::new(ui)
        .id_salt("ranks")
        .striped(true)
        .sense(Sense::click())
        .column(Column::auto().at_least(76.0))
        .column(Column::auto().at_least(if nodes { 120.0 } else { 0.0 }))
        .column(Column::auto().at_least(100.0))
        .column(Column::auto().at_least(100.0))
        .column(Column::auto().at_least(90.0))
        .column(Column::auto().at_least(95.0))
        .column(Column::auto().at_least(320.0))
        .column(Column::auto().at_least(80.0))
        .column(Column::remainder().clip(true));
    builder = builder.min_scrolled_height(0.0);
    builder
        .header(20.0, |mut header| {
            for (title, tip) in [
                ("rank", "Its number, from the trace (else its device or file name, a guess said above)"),
                ("node", "Its node (torchrun's GROUP_RANK) and host, when recorded"),
                ("peak allocated", "The highest allocated bytes on its busiest device"),
                ("peak reserved", "The highest bytes its allocator held from the driver"),
                (
                    &*format!("when, after its {zero}"),
                    "When the peak was reached, from its first iteration (else its first event)",
                ),
                ("phase", "The recorded phase of the peak"),
                ("largest at the peak", "The categories holding most at its peak"),
                ("first OOM", "When it first failed an allocation, from its first iteration (else its first event)"),
                ("file", "Where it was read from"),
            ] {
                header.col(|ui| {
                    ui.strong(title).on_hover_text(tip);
                });
            }
        })
        .body(|body| {
            body.rows(20.0, rows.len(), |mut row| {
                let Some((rank, r)) = rows.get(row.index()) else { return };
                row.set_selected(rank.is_some() && *rank == shown);
                let f = &r.figures;
                row.col(|ui| {
                    let Some(n) = rank else {
                        ui.weak("…").on_hover_text("Numbered once every file is read");
                        return;
                    };
                    let text = egui::RichText::new(format!("rank {n}")).monospace();
                    let text = if *rank == worst { text.strong() } else { text };
                    let tip = if *rank == worst {
                        "The rank that peaks highest; click to open it"
                    } else {
                        "Click to open it"
                    };
                    if ui.add(egui::Button::selectable(*rank == shown, text)).on_hover_text(tip).clicked() {
                        clicked = Some(*n);
                    }
                });
                row.col(|ui| {
                    let node = f.node.map_or_else(String::new, |n| format!("node {n}"));
                    let host = f.host.as_deref().map_or_else(String::new, |h| format!(" {h}"));
                    ui.label(format!("{node}{host}"));
                });
                row.col(|ui| {
                    ui.monospace(units::bytes(f.peak.peak_allocated_bytes));
                });
                row.col(|ui| {
                    ui.monospace(units::bytes(f.peak.peak_reserved_bytes));
                });
                row.col(|ui| {
                    ui.monospace(since_start(r, f.peak.peak_allocated_time_ns));
                });
                row.col(|ui| {
                    ui.label(f.peak_phase.map_or("-", words::run_phase));
                });
                row.col(|ui| {
                    ui.add(egui::Label::new(top_categories(r)).truncate());
                });
                row.col(|ui| {
                    let oom = f.first_oom_ns.map_or_else(String::new, |ns| since_start(r, ns));
                    ui.colored_label(palette::OOM, oom);
                });
                row.col(|ui| {
                    ui.add(egui::Label::new(&f.source).truncate()).on_hover_text(&f.source);
                });
                if row.response().clicked() {
                    clicked = *rank;
                }
                if rank.is_some() {
                    row.response().on_hover_text("Click to open this rank in the other views");
                }
            });
        });
    clicked
}

/// The shared time axis (ns from each rank's alignment point) and byte scale.
fn extent(rows: &[(Option<u32>, Arc<RankRow>)]) -> (f64, f64, u64) {
    let (mut lo, mut hi, mut top) = (f64::MAX, f64::MIN, 1u64);
    for (_, r) in rows {
        if r.outline.columns.is_empty() {
            continue;
        }
        let align = r.align_ns();
        lo = lo.min((r.outline.span_ns.0 - align) as f64);
        hi = hi.max((r.outline.span_ns.1 - align) as f64);
        let most = r.outline.columns.iter().flatten().map(|c| c.0.max(c.1)).max().unwrap_or(0);
        top = top.max(most);
    }
    if lo > hi {
        return (0.0, 1.0, top);
    }
    (lo, hi.max(lo + 1.0), top)
}

/// One timeline per rank; the rank clicked, if any.
fn timelines(ui: &mut egui::Ui, rows: &[(Option<u32>, Arc<RankRow>)], shown: Option<u32>, zero: &str) -> Option<u32> {
    let (lo, hi, top) = extent(rows);
    let mut clicked = None;
    ui.horizontal(|ui| {
        ui.strong("Allocated over time");
        ui.weak(format!(
            "one byte scale (0 to {}) and one time axis, each rank from its {zero}; reserved as a line",
            units::bytes(top)
        ));
    });
    let has_clock = rows.iter().any(|(_, r)| r.has_clock);
    time_axis(ui, (lo, hi), has_clock, zero);
    egui::ScrollArea::vertical().id_salt("rank timelines").auto_shrink([false, false]).show_rows(
        ui,
        ROW_HEIGHT,
        rows.len(),
        |ui, range| {
            for (rank, r) in &rows[range] {
                let (rect, response) = ui.allocate_exact_size(vec2(ui.available_width(), ROW_HEIGHT), Sense::click());
                paint_row(ui, rect, rank.as_ref(), r, (lo, hi, top), rank.is_some() && *rank == shown);
                if response.clicked() {
                    clicked = *rank;
                }
                if let Some(n) = rank {
                    response.on_hover_text(format!(
                        "rank {n}: peak {} allocated, {} reserved at {}; click to open it",
                        units::bytes(r.figures.peak.peak_allocated_bytes),
                        units::bytes(r.figures.peak.peak_reserved_bytes),
                        since_start(r, r.figures.peak.peak_allocated_time_ns)
                    ));
                }
            }
        },
    );
    clicked
}

/// Ticks of the shared time axis, above the timelines.
fn time_axis(ui: &mut egui::Ui, (lo, hi): (f64, f64), has_clock: bool, zero: &str) {
    let (rect, _) = ui.allocate_exact_size(vec2(ui.available_width(), 16.0), Sense::hover());
    let plot = Rect::from_min_max(pos2(rect.left() + LABEL_WIDTH, rect.top()), rect.right_bottom());
    let painter = ui.painter_at(rect);
    let color = ui.visuals().weak_text_color();
    let step = super::widgets::axis::nice_step((hi - lo) / 8.0);
    let mut t = (lo / step).ceil() * step;
    while t <= hi {
        let x = plot.left() + ((t - lo) / (hi - lo)) as f32 * plot.width();
        let text = if !has_clock {
            format!("{t:+.0}")
        } else if t == 0.0 {
            zero.to_owned()
        } else {
            let sign = if t < 0.0 { "-" } else { "+" };
            format!("{sign}{}", units::duration_ns(t.abs() as i64))
        };
        painter.line_segment([pos2(x, plot.bottom() - 4.0), pos2(x, plot.bottom())], Stroke::new(1.0, color));
        painter.text(pos2(x, plot.top()), egui::Align2::CENTER_TOP, text, egui::FontId::proportional(11.0), color);
        t += step;
    }
}

fn paint_row(ui: &egui::Ui, rect: Rect, rank: Option<&u32>, r: &RankRow, scale: (f64, f64, u64), shown: bool) {
    let painter = ui.painter_at(rect);
    let visuals = ui.visuals();
    if shown {
        painter.rect_filled(rect, 2.0, visuals.selection.bg_fill.gamma_multiply(0.35));
    }
    let label = rank.map_or_else(|| "…".to_owned(), |n| format!("rank {n}"));
    painter.text(
        pos2(rect.left() + 4.0, rect.center().y),
        egui::Align2::LEFT_CENTER,
        label,
        egui::FontId::monospace(12.0),
        visuals.text_color(),
    );
    let plot = Rect::from_min_max(pos2(rect.left() + LABEL_WIDTH, rect.top() + 2.0), rect.right_bottom());
    painter.rect_stroke(
        plot,
        0.0,
        Stroke::new(1.0, visuals.widgets.noninteractive.bg_stroke.color),
        egui::StrokeKind::Inside,
    );
    let (lo, hi, top) = scale;
    let n = r.outline.columns.len();
    if n == 0 {
        return;
    }
    let align = r.align_ns() as f64;
    let (start, end) = (r.outline.span_ns.0 as f64 - align, r.outline.span_ns.1 as f64 - align);
    let width = (end - start).max(1.0) / n as f64;
    let x = |t: f64| plot.left() + ((t - lo) / (hi - lo)) as f32 * plot.width();
    let y = |b: u64| plot.bottom() - (b as f64 / top as f64) as f32 * (plot.height() - 2.0);
    let fill = ALLOCATED;
    let mut reserved: Vec<Pos2> = Vec::with_capacity(n);
    for (i, column) in r.outline.columns.iter().enumerate() {
        let Some((allocated, held)) = *column else { continue };
        let (x0, x1) = (x(start + width * i as f64), x(start + width * (i + 1) as f64));
        painter.rect_filled(
            Rect::from_min_max(pos2(x0, y(allocated)), pos2(x1.max(x0 + 1.0), plot.bottom())),
            0.0,
            fill,
        );
        reserved.push(pos2((x0 + x1) / 2.0, y(held)));
    }
    painter.add(egui::Shape::line(reserved, Stroke::new(1.0, palette::RESERVED)));
    let peak_x = x(r.figures.peak.peak_allocated_time_ns as f64 - align);
    painter.line_segment([pos2(peak_x, plot.top()), pos2(peak_x, plot.bottom())], Stroke::new(1.5, palette::PEAK));
    if let Some(ns) = r.figures.first_oom_ns {
        let oom_x = x(ns as f64 - align);
        painter.line_segment([pos2(oom_x, plot.top()), pos2(oom_x, plot.bottom())], Stroke::new(2.0, palette::OOM));
    }
    if r.figures.first_iteration_ns.is_some() {
        let zero = x(0.0);
        painter.line_segment(
            [pos2(zero, plot.top()), pos2(zero, plot.bottom())],
            Stroke::new(1.0, Color32::from_gray(140).gamma_multiply(0.6)),
        );
    }
}
