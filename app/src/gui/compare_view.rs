//! Two runs side by side: timelines one above the other on one time axis and one byte scale,
//! aligned where the user chooses, the high point of each phase of both (a click lines the runs
//! up at that phase and shows it), the deltas at each run's peak, and one sentence on top.

use egui::RichText;
use vramscope_trace_format::{AnnotationKind, Category};

use super::compare::Compare;
use super::context::{Command, ViewCtx};
use super::document::{DeviceData, Document};
use super::palette;
use super::widgets::swatch;
use super::widgets::timeline::{self, TimelineState};
use crate::query::diff::{self, Diff, PhaseDelta, SiteDelta};
use crate::units;

/// Where the two timelines are lined up.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Align {
    /// Each run's first event.
    #[default]
    Start,
    /// Each run's first iteration (its start when it has none).
    FirstIteration,
    /// Each run's allocated peak.
    Peak,
    /// The first annotation of this name in each run.
    Annotation(String),
    /// The start of a phase of both runs (a row of the comparison's phases, by its index).
    Phase(usize),
}

/// The time in `device` that `align` lines up.
fn anchor_ns(doc: &Document, device: &DeviceData, align: &Align) -> f64 {
    // The start of a run is its trace's first event, the origin its times are said from.
    let start = if doc.has_no_clock() { device.timeline.time_span_ns().0 } else { doc.trace.origin_ns() } as f64;
    let first = |pred: &dyn Fn(&vramscope_trace_format::Annotation) -> bool| {
        device
            .annotations
            .iter()
            .filter_map(|&i| doc.trace.annotations.get(i))
            .find(|a| pred(a))
            .map(|a| a.start_ns as f64)
    };
    match align {
        Align::Start => start,
        Align::Peak => device.timeline.time_ns(device.peak_point) as f64,
        Align::FirstIteration => first(&|a| a.kind == AnnotationKind::Iteration).unwrap_or(start),
        Align::Annotation(name) => first(&|a| doc.trace.interner.resolve(a.name) == name).unwrap_or(start),
        // Worked out from the comparison's rows (see `phase_row`).
        Align::Phase(_) => start,
    }
}

/// The row `align` names, when it names a phase both runs have.
fn phase_row<'a>(align: &Align, d: Option<&'a Diff>) -> Option<(&'a diff::PhaseSide, &'a diff::PhaseSide)> {
    let Align::Phase(k) = align else { return None };
    let row = d?.phases.get(*k)?;
    Some((row.a.as_ref()?, row.b.as_ref()?))
}

/// The compare view's own state: how the runs are lined up and viewed, and how sites are grouped.
#[derive(Clone, Debug, Default)]
pub struct CompareState {
    /// The alignment chosen.
    pub align: Align,
    /// A's timeline (B's view follows it, shifted by the alignment).
    pub timeline: TimelineState,
    /// B's timeline.
    b_timeline: TimelineState,
    /// The sites panel groups by tag or module name instead of by site.
    pub by_name: bool,
}

/// The compare view; the point of run A clicked, if one was.
pub fn compare_ui(
    ui: &mut egui::Ui,
    a: &Document,
    a_device: usize,
    compare: &Compare,
    view: &mut CompareState,
    selected_a: Option<crate::query::timeline::Point>,
) -> Option<crate::query::timeline::Point> {
    let (Some(da), Some(db)) = (a.devices.get(a_device), compare.doc.devices.get(compare.device_index)) else {
        ui.label("One of the runs holds no memory events.");
        return None;
    };
    match &compare.diff {
        Some(d) => ui.label(RichText::new(crate::words::diff_summary(d)).size(17.0).strong()),
        None if compare.failed.is_some() => ui.colored_label(
            ui.visuals().error_fg_color,
            format!("The runs could not be compared: {}", compare.failed.as_deref().unwrap_or_default()),
        ),
        None => {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label("Comparing the runs at their peaks…");
            })
            .response
        }
    };
    let state = &mut view.timeline;
    let mut align = view.align.clone();
    ui.horizontal(|ui| {
        ui.label("align at:");
        ui.selectable_value(&mut align, Align::Start, "start");
        ui.selectable_value(&mut align, Align::FirstIteration, "first iteration");
        ui.selectable_value(&mut align, Align::Peak, "peak");
        let names = &compare.common_annotations;
        let current = match &align {
            Align::Annotation(name) => name.clone(),
            _ => "annotation…".to_owned(),
        };
        ui.add_enabled_ui(!names.is_empty(), |ui| {
            egui::ComboBox::from_id_salt("align-annotation").selected_text(current).show_ui(ui, |ui| {
                for name in names {
                    let chosen = Align::Annotation(name.clone());
                    ui.selectable_value(&mut align, chosen, name.as_str());
                }
            });
        })
        .response
        .on_disabled_hover_text("The runs share no annotation names");
        // Lined up at a phase (chosen in the phases below): say which.
        if let (Align::Phase(k), Some(d)) = (&align, compare.diff.as_deref())
            && let Some(row) = d.phases.get(*k)
        {
            let _ = ui.selectable_label(true, format!("phase: {}", crate::words::phase_row_label(row)));
        }
    });
    if align != view.align {
        view.align = align;
        state.view_ns = None;
    }
    // B's times are A's shifted so that the two anchors meet; one byte scale for both.
    let shift = match phase_row(&view.align, compare.diff.as_deref()) {
        Some((sa, sb)) => sb.start_ns as f64 - sa.start_ns as f64,
        None => anchor_ns(&compare.doc, db, &view.align) - anchor_ns(a, da, &view.align),
    };
    let y_top = timeline::y_extent_bytes(da).max(timeline::y_extent_bytes(db)) * 1.08;
    if state.view_ns.is_none() {
        let (a0, a1) = timeline::full_span(da);
        let (b0, b1) = timeline::full_span(db);
        state.view_ns = Some((a0.min(b0 - shift), a1.max(b1 - shift)));
        // Lined up at a phase: both runs' phase in view, a little either side.
        if let Some((sa, sb)) = phase_row(&view.align, compare.diff.as_deref()) {
            let (start, end) = (sa.start_ns as f64, (sa.end_ns as f64).max(sb.end_ns as f64 - shift));
            let pad = ((end - start) * 0.08).max(1.0);
            state.view_ns = Some((start - pad, end + pad));
        }
    }
    state.y_top_bytes = Some(y_top);
    let height = (ui.available_height() * 0.27).max(140.0);
    let width = ui.available_width();
    ui.strong(format!("A: {}", a.file_name()));
    let clicked = ui
        .push_id("timeline-a", |ui| timeline::timeline_ui(ui, a, da, state, selected_a, egui::vec2(width, height)))
        .inner;
    ui.strong(format!("B: {}", compare.doc.file_name()));
    let (v0, v1) = state.view_ns.unwrap_or_default();
    let b_state = &mut view.b_timeline;
    b_state.view_ns = Some((v0 + shift, v1 + shift));
    b_state.y_top_bytes = Some(y_top);
    let before = b_state.view_ns;
    ui.push_id("timeline-b", |ui| {
        timeline::timeline_ui(ui, &compare.doc, db, b_state, None, egui::vec2(width, height))
    });
    // Zooming or panning B moves both.
    if b_state.view_ns != before {
        state.view_ns = b_state.view_ns.map(|(x0, x1)| (x0 - shift, x1 - shift));
    }
    ui.separator();
    if let Some(d) = compare.diff.clone() {
        // The phases and the tables below the timelines scroll together.
        egui::ScrollArea::vertical().id_salt("compare-below").auto_shrink([false, false]).show(ui, |ui| {
            if let Some(chosen) = phases_ui(ui, &d, &view.align) {
                view.align = chosen;
                state.view_ns = None;
            }
            ui.separator();
            ui.columns(2, |columns| {
                let [left, right] = columns else { return };
                delta_table_ui(left, &d);
                sites_ui(right, &d, &mut view.by_name);
            });
        });
    }
    clicked
}

fn pct(p: Option<f64>) -> String {
    units::percent(p)
}

fn delta_color(ui: &egui::Ui, delta: i64) -> egui::Color32 {
    match delta {
        d if d > 0 => ui.visuals().error_fg_color,
        d if d < 0 => egui::Color32::from_rgb(0x4c, 0xaf, 0x50),
        _ => ui.visuals().weak_text_color(),
    }
}

fn delta_table_ui(ui: &mut egui::Ui, d: &Diff) {
    ui.heading("At each run's peak");
    egui::Grid::new("compare-deltas").num_columns(5).striped(true).spacing([16.0, 4.0]).show(ui, |ui| {
        for title in ["", "A", "B", "B - A", "%"] {
            ui.strong(title);
        }
        ui.end_row();
        let row = |ui: &mut egui::Ui, label: &str, category: Option<Category>, a: u64, b: u64| {
            ui.horizontal(|ui| {
                if let Some(c) = category {
                    swatch(ui, palette::category_color(c));
                }
                ui.label(label);
            });
            ui.monospace(units::bytes(a));
            ui.monospace(units::bytes(b));
            let delta = b as i64 - a as i64;
            ui.colored_label(delta_color(ui, delta), RichText::new(units::signed_bytes(delta)).monospace());
            ui.colored_label(delta_color(ui, delta), pct(diff::percent(a, b)));
            ui.end_row();
        };
        row(ui, "peak allocated", None, d.a.peak_allocated_bytes, d.b.peak_allocated_bytes);
        row(ui, "peak reserved", None, d.a.peak_reserved_bytes, d.b.peak_reserved_bytes);
        for c in &d.categories {
            row(ui, palette::category_label(c.category), Some(c.category), c.a, c.b);
        }
    });
}

/// Iteration rows shown before the rest are folded under "more iterations".
const ITERATION_ROWS: u32 = 3;

/// Rows shown under "more iterations" at most (a long run has thousands).
const MORE_ROWS: usize = 400;

/// The phases of both runs side by side: each kind's highest, then each iteration and its
/// phases. A click on a row lines the runs up at that phase (returned).
fn phases_ui(ui: &mut egui::Ui, d: &Diff, align: &Align) -> Option<Align> {
    let mut chosen = None;
    ui.horizontal(|ui| {
        ui.heading("Phase by phase");
        ui.label(
            RichText::new("the high point of allocated memory in each; click a row to line both runs up there").weak(),
        );
    });
    if d.phases.is_empty() {
        for (name, run) in [("A", &d.a), ("B", &d.b)] {
            if run.phases.is_empty() {
                ui.label(format!("{name} shows no phases: {}.", crate::words::phases_from(None)));
            }
        }
        if d.ranges.is_empty() {
            ui.label("Line the runs up at their start, first iteration, peak or a shared annotation instead (above).");
            return None;
        }
        ui.label("Named ranges both runs have, the high point inside the first of each (a click lines them up there):");
        egui::Grid::new("compare-range-grid").num_columns(5).striped(true).spacing([14.0, 3.0]).show(ui, |ui| {
            for title in ["range", "A", "B", "B - A", "%"] {
                ui.strong(title);
            }
            ui.end_row();
            for r in &d.ranges {
                let here = Align::Annotation(r.name.clone());
                if ui.add(egui::Button::selectable(*align == here, &r.name)).clicked() {
                    chosen = Some(here);
                }
                ui.monospace(units::bytes(r.a));
                ui.monospace(units::bytes(r.b));
                ui.colored_label(delta_color(ui, r.delta), RichText::new(units::signed_bytes(r.delta)).monospace());
                ui.colored_label(delta_color(ui, r.delta), pct(diff::percent(r.a, r.b)));
                ui.end_row();
            }
        });
        return chosen;
    }
    let from = |run: &diff::RunPeak| crate::words::phases_from(run.phases.from);
    ui.label(RichText::new(format!("A: {}. B: {}.", from(&d.a), from(&d.b))).weak());
    let more = d.phases.iter().filter_map(|r| r.iteration).max().unwrap_or(0) > ITERATION_ROWS;
    egui::Grid::new("compare-phase-grid").num_columns(6).striped(true).spacing([14.0, 3.0]).show(ui, |ui| {
        for title in ["phase", "A", "B", "B - A", "%", "most changed"] {
            ui.strong(title);
        }
        ui.end_row();
        for (k, r) in d.phases.iter().enumerate() {
            if r.iteration.is_some_and(|i| i > ITERATION_ROWS) {
                continue;
            }
            if phase_row_ui(ui, k, r, align) {
                chosen = Some(Align::Phase(k));
            }
        }
    });
    if more {
        ui.collapsing("more iterations", |ui| {
            egui::Grid::new("compare-phase-more").num_columns(6).striped(true).spacing([14.0, 3.0]).show(ui, |ui| {
                let later =
                    d.phases.iter().enumerate().filter(|(_, r)| r.iteration.is_some_and(|i| i > ITERATION_ROWS));
                for (k, r) in later.clone().take(MORE_ROWS) {
                    if phase_row_ui(ui, k, r, align) {
                        chosen = Some(Align::Phase(k));
                    }
                }
                let rest = later.count().saturating_sub(MORE_ROWS);
                if rest > 0 {
                    ui.label(
                        RichText::new(format!("… and {rest} more rows (all of them in vramscope diff --json)")).weak(),
                    );
                    ui.end_row();
                }
            });
        });
    }
    chosen
}

/// One row of the phases; whether it was clicked.
fn phase_row_ui(ui: &mut egui::Ui, k: usize, r: &PhaseDelta, align: &Align) -> bool {
    let indent = if r.iteration.is_some() && r.phase.is_some() { "    " } else { "" };
    let label = format!("{indent}{}", crate::words::phase_row_label(r));
    let both = r.a.is_some() && r.b.is_some();
    let response = ui
        .add_enabled(both, egui::Button::selectable(*align == Align::Phase(k), label))
        .on_hover_text("Line both runs up at the start of this phase and show it")
        .on_disabled_hover_text("Only one run has this phase");
    let side = |s: Option<&diff::PhaseSide>| s.map_or_else(|| "none".to_owned(), |s| units::bytes(s.high_bytes));
    ui.monospace(side(r.a.as_ref()));
    ui.monospace(side(r.b.as_ref()));
    match r.delta {
        Some(delta) => {
            ui.colored_label(delta_color(ui, delta), RichText::new(units::signed_bytes(delta)).monospace());
            ui.colored_label(delta_color(ui, delta), pct(r.percent));
        }
        None => {
            ui.label("");
            ui.label("");
        }
    }
    match r.categories.iter().find(|c| c.delta != 0) {
        Some(c) => {
            ui.horizontal(|ui| {
                swatch(ui, palette::category_color(c.category));
                ui.label(format!("{} {}", palette::category_label(c.category), units::signed_bytes(c.delta)));
            });
        }
        None => {
            ui.label("");
        }
    }
    ui.end_row();
    response.clicked()
}

fn sites_ui(ui: &mut egui::Ui, d: &Diff, by_name: &mut bool) {
    ui.horizontal(|ui| {
        ui.heading(if *by_name { "By tag or module, at each peak" } else { "By allocation site, at each peak" });
        if d.names.is_some() {
            ui.selectable_value(by_name, false, "site")
                .on_hover_text("Allocations matched by their whole call path, grouped by the line that allocated");
            ui.selectable_value(by_name, true, "name")
                .on_hover_text("Grouped by tag (a parameter's name) or the module whose forward allocated");
        }
    });
    if *by_name && let Some(names) = &d.names {
        names_ui(ui, names);
        return;
    }
    egui::Grid::new("compare-site-grid").num_columns(5).striped(true).spacing([12.0, 3.0]).show(ui, |ui| {
        for title in ["A", "B", "B - A", "%", "site"] {
            ui.strong(title);
        }
        ui.end_row();
        for (title, list) in
            [("grew", &d.grown), ("only in B", &d.only_in_b), ("shrank", &d.shrunk), ("only in A", &d.only_in_a)]
        {
            if list.is_empty() {
                continue;
            }
            ui.label(RichText::new(format!("{title} ({})", list.len())).italics());
            ui.end_row();
            for s in list.iter().take(12) {
                site_row(ui, s);
            }
        }
    });
}

fn names_ui(ui: &mut egui::Ui, names: &[diff::NameDelta]) {
    egui::Grid::new("compare-name-grid").num_columns(5).striped(true).spacing([12.0, 3.0]).show(ui, |ui| {
        for title in ["A", "B", "B - A", "%", "name"] {
            ui.strong(title);
        }
        ui.end_row();
        for n in names.iter().take(40) {
            let color = delta_color(ui, n.delta);
            ui.monospace(units::bytes(n.a));
            ui.monospace(units::bytes(n.b));
            ui.colored_label(color, RichText::new(units::signed_bytes(n.delta)).monospace());
            ui.colored_label(color, pct(diff::percent(n.a, n.b)));
            ui.add(egui::Label::new(&n.name).truncate()).on_hover_text(&n.name);
            ui.end_row();
        }
    });
}

fn site_row(ui: &mut egui::Ui, s: &SiteDelta) {
    let color = delta_color(ui, s.delta);
    ui.monospace(units::bytes(s.a));
    ui.monospace(units::bytes(s.b));
    ui.colored_label(color, RichText::new(units::signed_bytes(s.delta)).monospace());
    ui.colored_label(color, pct(diff::percent(s.a, s.b)));
    let mut label = s.site.clone();
    if s.paths.len() > 1 {
        label.push_str(&format!("  ({} paths)", s.paths.len()));
    }
    if s.moved_from.is_some() {
        label.push_str("  (moved)");
    }
    ui.add(egui::Label::new(label).truncate()).on_hover_ui(|ui| site_paths_ui(ui, s));
    ui.end_row();
}

/// A site's paths, for its tooltip: each call path's bytes and the caller that tells it apart.
fn site_paths_ui(ui: &mut egui::Ui, s: &SiteDelta) {
    ui.strong(&s.site);
    if let Some(m) = &s.moved_from {
        ui.label(format!("moved from {m}"));
    }
    for p in s.paths.iter().take(8) {
        ui.separator();
        ui.label(format!("{} -> {} ({})", units::bytes(p.a), units::bytes(p.b), units::signed_bytes(p.delta)));
        if let Some(via) = &p.via {
            ui.label(format!("via {via}"));
        }
        for frame in p.stack.iter().skip(1).take(6) {
            ui.label(RichText::new(frame).monospace().weak());
        }
    }
    if s.paths.len() > 8 {
        ui.label(format!("… and {} more paths", s.paths.len() - 8));
    }
}

/// The compare view, when a second run is open.
pub fn view_ui(ui: &mut egui::Ui, ctx: &ViewCtx<'_>, state: &mut CompareState, out: &mut Vec<Command>) {
    let Some(compare) = ctx.compare else { return };
    if let Some(point) = compare_ui(ui, ctx.doc, ctx.device_index, compare, state, ctx.selected_point) {
        out.push(Command::Select(point));
    }
}
