//! The breakdown of what was alive at the selected instant (the peak by default): bytes by
//! category, by name, by allocating stack, and the largest allocations with their evidence.

use egui::{RichText, Sense};
use egui_extras::{Column, TableBuilder};
use vramscope_trace_format::Trace;

use super::context::{Command, ViewCtx};
use super::palette;
use super::widgets::block::{allocation_site, block_details_ui, categories_ui};
use super::widgets::swatch;
use super::worker::InstantView;
use crate::query::instant::StackNode;
use crate::units;

/// The breakdown's own state.
#[derive(Clone, Debug, Default)]
pub struct BreakdownState {
    /// Text to look for in frames.
    pub search: String,
    /// The allocation picked in the table (index into the instant's blocks).
    pub picked: Option<usize>,
}

/// Bytes by tag name (parameters by qualified name, modules), the 30 largest; for traces
/// without tags, by the source line that allocated.
fn names_ui(ui: &mut egui::Ui, trace: &Trace, view: &InstantView) {
    let row = |ui: &mut egui::Ui, bytes: u64, label: &str, tip: String| {
        ui.horizontal(|ui| {
            ui.add_sized([72.0, 16.0], egui::Label::new(RichText::new(units::bytes(bytes)).monospace()));
            ui.add(egui::Label::new(label).truncate()).on_hover_text(tip);
        });
    };
    if view.instant.by_name.is_empty() {
        ui.heading("By source line");
        for s in view.by_site.iter().take(30) {
            row(ui, s.bytes, &s.site, format!("{}\n{}", s.site, units::counted(s.blocks, "block", "blocks")));
        }
        metadata_ui(ui, trace, view, row);
        return;
    }
    ui.heading("By name");
    for &(name, bytes) in view.instant.by_name.iter().take(30) {
        let name = trace.interner.resolve(name);
        row(ui, bytes, name, name.to_owned());
    }
    metadata_ui(ui, trace, view, row);
}

/// Bytes by the user metadata of their allocation (`torch.cuda.memory._set_memory_metadata`,
/// `_annotate_tensor`), when the trace has any.
fn metadata_ui(ui: &mut egui::Ui, trace: &Trace, view: &InstantView, row: impl Fn(&mut egui::Ui, u64, &str, String)) {
    if view.instant.by_metadata.is_empty() {
        return;
    }
    ui.add_space(6.0);
    ui.heading("By user metadata");
    for &(text, bytes, count) in view.instant.by_metadata.iter().take(30) {
        let text = trace.interner.resolve(text);
        row(ui, bytes, text, format!("{text}\n{count} blocks allocated with this metadata"));
    }
}

/// The full breakdown.
pub fn breakdown_ui(
    ui: &mut egui::Ui,
    trace: &Trace,
    view: &InstantView,
    state: &mut BreakdownState,
    hide_noise: &mut bool,
    python_only: &mut bool,
) {
    egui::Panel::left("breakdown-left").resizable(true).default_size(380.0).max_size(700.0).show(ui, |ui| {
        egui::ScrollArea::vertical().id_salt("breakdown-left-scroll").show(ui, |ui| {
            ui.set_min_width(340.0);
            ui.heading("By category");
            categories_ui(ui, view);
            ui.add_space(8.0);
            names_ui(ui, trace, view);
        });
    });
    egui::Panel::bottom("breakdown-table").resizable(true).default_size(200.0).show(ui, |ui| {
        ui.horizontal(|ui| {
            ui.heading("Largest live allocations");
            ui.weak(format!("{} blocks", units::count(view.instant.blocks.len())));
        });
        allocations_table_ui(ui, trace, view, state, *hide_noise);
    });
    egui::CentralPanel::default().show(ui, |ui| {
        ui.horizontal(|ui| {
            ui.heading("By allocation stack");
            ui.add(
                egui::TextEdit::singleline(&mut state.search).hint_text("search function or file").desired_width(200.0),
            );
            ui.checkbox(hide_noise, "hide interpreter frames").on_hover_text(
                "Hide CPython's and libc's C functions, the stack unwinder and the caching allocator (N)",
            );
            ui.checkbox(python_only, "Python frames only")
                .on_hover_text("Show only frames of Python source files in the tree");
        });
        if let Some(block) = state.picked.and_then(|i| view.instant.blocks.get(i)) {
            block_details_ui(ui, trace, block, view.instant.time_ns, *hide_noise);
            ui.separator();
        }
        let tree = if *python_only {
            &view.tree_python
        } else if *hide_noise {
            &view.tree
        } else {
            &view.tree_all_frames
        };
        egui::ScrollArea::both().id_salt("stack-tree").auto_shrink([false, false]).show(ui, |ui| {
            let query = state.search.to_lowercase();
            // The heaviest stack that has frames below it opens by default.
            let open = tree.children.iter().position(|c| !c.children.is_empty());
            for (i, child) in tree.children.iter().enumerate() {
                tree_node_ui(ui, child, tree.bytes, &query, Some(i) == open, &format!("{i}"));
            }
        });
    });
}

fn matches(node: &StackNode, query: &str) -> bool {
    query.is_empty() || node.label.to_lowercase().contains(query) || node.children.iter().any(|c| matches(c, query))
}

fn tree_node_ui(ui: &mut egui::Ui, node: &StackNode, total: u64, query: &str, heaviest: bool, path: &str) {
    if !matches(node, query) {
        return;
    }
    let percent = if total > 0 { node.bytes as f64 * 100.0 / total as f64 } else { 0.0 };
    let hit = !query.is_empty() && node.label.to_lowercase().contains(query);
    let mut text =
        RichText::new(format!("{:>10}  {:>5.1}%  {}", units::bytes(node.bytes), percent, node.label)).monospace();
    if hit {
        text = text.strong().color(palette::SELECTION);
    }
    if node.children.is_empty() {
        ui.horizontal(|ui| {
            ui.add_space(18.0);
            ui.label(text).on_hover_text(units::counted(node.blocks, "block", "blocks"));
        });
        return;
    }
    let header = egui::CollapsingHeader::new(text).id_salt(path).default_open(heaviest);
    let header = if query.is_empty() { header } else { header.open(Some(true)) };
    header.show(ui, |ui| {
        let open = node.children.iter().position(|c| !c.children.is_empty());
        for (i, child) in node.children.iter().enumerate() {
            tree_node_ui(ui, child, total, query, heaviest && Some(i) == open, &format!("{path}/{i}"));
        }
    });
}

fn allocations_table_ui(
    ui: &mut egui::Ui,
    trace: &Trace,
    view: &InstantView,
    state: &mut BreakdownState,
    hide_noise: bool,
) {
    let blocks = &view.instant.blocks;
    let row_height = ui.text_style_height(&egui::TextStyle::Monospace) + 4.0;
    TableBuilder::new(ui)
        .id_salt("allocations")
        .striped(true)
        .sense(Sense::click())
        .resizable(true)
        .column(Column::auto().at_least(80.0))
        .column(Column::auto().at_least(80.0))
        .column(Column::auto().at_least(110.0))
        .column(Column::auto().at_least(80.0))
        .column(Column::auto().at_least(120.0))
        .column(Column::remainder())
        .header(20.0, |mut header| {
            for title in ["size", "requested", "category", "age", "address", "allocated at"] {
                header.col(|ui| {
                    ui.strong(title);
                });
            }
        })
        .body(|body| {
            body.rows(row_height, blocks.len(), |mut row| {
                let index = row.index();
                let Some(b) = blocks.get(index) else { return };
                row.set_selected(state.picked == Some(index));
                row.col(|ui| {
                    ui.monospace(units::bytes(b.block.size_bytes));
                });
                row.col(|ui| {
                    ui.monospace(units::bytes(b.block.requested_bytes));
                });
                row.col(|ui| {
                    ui.horizontal(|ui| {
                        swatch(ui, palette::category_color(b.attribution.category));
                        ui.label(palette::category_label(b.attribution.category))
                            .on_hover_text(crate::words::evidence(trace, b.attribution.evidence));
                    });
                });
                row.col(|ui| {
                    match b.alloc_ns {
                        Some(t) => ui.monospace(units::duration_ns(view.instant.time_ns - t)),
                        None => ui.weak("before trace"),
                    };
                });
                row.col(|ui| {
                    ui.monospace(format!("{:#x}", b.block.address));
                });
                row.col(|ui| {
                    let response = ui.label(allocation_site(trace, b, hide_noise));
                    let context = crate::words::context_lines(trace, &b.block);
                    if !context.is_empty() {
                        response.on_hover_text(context.join("\n"));
                    }
                });
                if row.response().clicked() {
                    state.picked = if state.picked == Some(index) { None } else { Some(index) };
                }
            });
        });
}

/// The peak breakdown view: what was alive at the selected instant.
pub fn view_ui(ui: &mut egui::Ui, ctx: &ViewCtx<'_>, state: &mut BreakdownState, out: &mut Vec<Command>) {
    let Some(v) = ctx.instant else { return };
    let (mut hide_noise, mut python_only) = (ctx.settings.hide_noise, ctx.settings.python_only);
    breakdown_ui(ui, &ctx.doc.trace, v, state, &mut hide_noise, &mut python_only);
    if hide_noise != ctx.settings.hide_noise {
        out.push(Command::HideNoise(hide_noise));
    }
    if python_only != ctx.settings.python_only {
        out.push(Command::PythonOnly(python_only));
    }
}
