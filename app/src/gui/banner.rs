//! The banner under the toolbar that says what the open trace cannot show (a snapshot without
//! allocation history, a profiler trace blind to memory from before it began), so that no number
//! in the views is read as more than it is.

use super::document::Document;

/// Draws the document's caveats, one line each, in the warning colour; nothing when it has none.
pub fn caveats_ui(ui: &mut egui::Ui, doc: &Document) {
    growth_ui(ui, doc);
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

/// Memory that grows every iteration on a device, said on top of every view: what grows, by how
/// much, where, and when the device would be full.
fn growth_ui(ui: &mut egui::Ui, doc: &Document) {
    let growing: Vec<_> = doc.devices.iter().filter_map(|d| d.growth.as_ref().filter(|g| g.grows)).collect();
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
