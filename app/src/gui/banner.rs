//! The banner under the toolbar that says what the open trace cannot show (a snapshot without
//! allocation history, a profiler trace blind to memory from before it began), so that no number
//! in the views is read as more than it is.

use super::document::Document;

/// Draws the document's caveats, one line each, in the warning colour; nothing when it has none.
pub fn caveats_ui(ui: &mut egui::Ui, doc: &Document) {
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
