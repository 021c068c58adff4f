//! The banner under the toolbar that says what the open trace cannot show (a snapshot without
//! allocation history, a profiler trace blind to memory from before it began), so that no number
//! in the views is read as more than it is.

use super::context::Command;
use super::document::Document;
use super::settings::View;

/// Draws the document's caveats, one line each, in the warning colour; nothing when it has none.
/// Above them, memory that grows every iteration and the first out-of-memory error, with a link
/// that asks for that error explained.
pub fn caveats_ui(ui: &mut egui::Ui, doc: &Document, out: &mut Vec<Command>) {
    growth_ui(ui, doc);
    if oom_ui(ui, doc) {
        out.push(Command::Show(View::Oom));
    }
    if doc.caveats.is_empty() {
        return;
    }
    egui::Panel::top("caveats").show(ui, |ui| {
        for caveat in &doc.caveats {
            ui.horizontal_wrapped(|ui| {
                ui.colored_label(ui.visuals().warn_fg_color, egui::RichText::new("Note:").strong());
                ui.label(caveat);
            });
        }
    });
}

/// The first out-of-memory error, in a line with a link to its explanation; whether it was clicked.
fn oom_ui(ui: &mut egui::Ui, doc: &Document) -> bool {
    let Some(first) = doc.trace.ooms.iter().min_by_key(|o| o.time_ns) else { return false };
    let start = doc.trace.events.first().map_or(first.time_ns, |e| e.time_ns);
    let mut explain = false;
    egui::Panel::top("oom").show(ui, |ui| {
        ui.horizontal_wrapped(|ui| {
            ui.colored_label(super::palette::OOM, egui::RichText::new("Out of memory").strong());
            ui.label(format!(
                "on {} at +{}: tried to allocate {}{}.",
                doc.trace.metadata.device_label(first.device),
                crate::units::duration_ns((first.time_ns - start).max(0)),
                crate::units::bytes(first.requested_bytes),
                match doc.trace.ooms.len() {
                    1 => String::new(),
                    n => format!(" ({} errors in all)", crate::units::count(n)),
                }
            ));
            explain = ui.link("Why, and what would have fitted (7)").clicked();
        });
    });
    explain
}

/// Memory that grows every iteration on a device, said on top of every view: what grows, by how
/// much, where, and when the device would be full.
fn growth_ui(ui: &mut egui::Ui, doc: &Document) {
    let growing: Vec<_> = doc.devices.iter().filter_map(|d| d.growth.as_ref().filter(|g| g.alarms())).collect();
    if growing.is_empty() {
        return;
    }
    egui::Panel::top("growth").show(ui, |ui| {
        for growth in growing {
            let label = doc.trace.metadata.device_label(growth.device);
            let lines = crate::words::growth_lines(growth, &label);
            let Some((headline, rest)) = lines.split_first() else { continue };
            ui.horizontal_wrapped(|ui| {
                ui.colored_label(ui.visuals().error_fg_color, egui::RichText::new(format!("{label}:")).strong());
                ui.colored_label(ui.visuals().error_fg_color, headline);
            });
            for line in rest.iter().take(3) {
                ui.horizontal_wrapped(|ui| {
                    ui.add_space(16.0);
                    ui.label(line);
                });
            }
        }
    });
}
