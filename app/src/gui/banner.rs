//! The banner under the toolbar that says what the open trace cannot show (a snapshot without
//! allocation history, a profiler trace blind to memory from before it began), so that no number
//! in the views is read as more than it is.

use super::context::Command;
use super::document::Document;
use super::settings::View;

/// Draws the document's caveats, one line each, in the warning colour; nothing when it has none.
/// Above them, memory that grows every iteration on the device shown (`device`, an index into
/// the document's devices; other devices' growth is only mentioned) and the first out-of-memory
/// error, with a link that asks for that error explained.
pub fn caveats_ui(ui: &mut egui::Ui, doc: &Document, device: usize, out: &mut Vec<Command>) {
    growth_ui(ui, doc, device);
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
    let start = doc.trace.origin_ns();
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
fn growth_ui(ui: &mut egui::Ui, doc: &Document, device: usize) {
    let alarm = |d: &super::document::DeviceData| d.growth.as_ref().filter(|g| g.alarms()).cloned();
    let shown = doc.devices.get(device).and_then(alarm);
    // A finding belongs to its device: another device's is mentioned, not shouted.
    let elsewhere: Vec<String> = doc
        .devices
        .iter()
        .enumerate()
        .filter(|&(i, d)| i != device && alarm(d).is_some())
        .map(|(_, d)| doc.trace.metadata.device_label(d.device))
        .collect();
    if shown.is_none() && elsewhere.is_empty() {
        return;
    }
    egui::Panel::top("growth").show(ui, |ui| {
        if let Some(growth) = &shown {
            let label = doc.trace.metadata.device_label(growth.device);
            let lines = crate::words::growth_lines(growth, &label);
            if let Some((headline, rest)) = lines.split_first() {
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
        }
        if !elsewhere.is_empty() {
            let too = if shown.is_some() { " too" } else { "" };
            ui.label(format!(
                "Memory grows every iteration on {}{too} (choose the device to see what it keeps).",
                elsewhere.join(", ")
            ));
        }
    });
}
