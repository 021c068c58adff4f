//! The bar over a run followed as it goes: what is followed, how fresh the view is, whether it
//! keeps to the newest data, and how the run ended.

use super::VramscopeApp;
use crate::gui::follow::Status;
use crate::units;

impl VramscopeApp {
    /// Under the toolbar while a run is followed.
    pub(super) fn live_bar(&mut self, ui: &mut egui::Ui) {
        let Some(live) = &self.session.live else { return };
        // Zooming or panning away leaves the newest data (End comes back to it).
        if self.views.timeline.view_ns.is_some() {
            self.session.follow_newest = false;
        }
        let following = self.session.follow_newest;
        let mut follow = false;
        let current = self
            .session
            .device()
            .map(|d| (d.timeline.values(d.timeline.last_point()), d.timeline.values(d.peak_point).0));
        egui::Panel::top("live").show(ui, |ui| {
            ui.horizontal_wrapped(|ui| {
                match &live.status {
                    Status::Live => {
                        let red = egui::Color32::from_rgb(220, 50, 47);
                        let (dot, _) = ui.allocate_exact_size(egui::vec2(10.0, 10.0), egui::Sense::hover());
                        ui.painter().circle_filled(dot.center(), 5.0, red);
                        ui.label(egui::RichText::new("LIVE").color(red).strong()).on_hover_text(format!(
                            "Following {}: {}",
                            live.label,
                            live.source.location()
                        ));
                        let short: String = live.label.chars().take(80).collect();
                        let more = if short.len() < live.label.len() { "…" } else { "" };
                        ui.label(format!("{short}{more}")).on_hover_text(live.source.location());
                        let age = live.last_update.map_or_else(
                            || "waiting for the first data".to_owned(),
                            |t| format!("updated {:.1} s ago", t.elapsed().as_secs_f64()),
                        );
                        ui.label(format!("{} events, {age}", units::count(live.events)));
                    }
                    Status::Ended(Some(path)) => {
                        ui.strong("The run ended.");
                        ui.label(format!("Its trace: {}", path.display()));
                    }
                    Status::Ended(None) => {
                        ui.strong("The run ended without a trace written.");
                    }
                }
                if let Some(((allocated, _, reserved), peak)) = current {
                    ui.separator();
                    ui.label(format!(
                        "now {} allocated, {} reserved; peak so far {}",
                        units::bytes(allocated),
                        units::bytes(reserved),
                        units::bytes(peak)
                    ));
                }
                if live.status == Status::Live {
                    ui.separator();
                    if following {
                        ui.weak("following the newest data")
                            .on_hover_text("Zoom, pan or pick an instant to stop here; End comes back to the newest");
                    } else {
                        follow = ui
                            .button("Follow the newest (End)")
                            .on_hover_text("Show the whole run and select its newest instant as it grows")
                            .clicked();
                    }
                }
                if let Some(note) = &live.note {
                    ui.separator();
                    ui.colored_label(ui.visuals().warn_fg_color, note);
                }
            });
        });
        if live.status == Status::Live {
            // The "updated … ago" keeps counting.
            ui.ctx().request_repaint_after(std::time::Duration::from_millis(500));
        }
        if follow {
            self.follow_newest();
        }
    }

    /// Shows the whole run followed and keeps to its newest instant.
    pub(super) fn follow_newest(&mut self) {
        self.views.timeline.reset();
        self.views.breakdown.picked = None;
        self.session.follow_newest_now();
    }

    /// The central panel while a followed run has shown nothing yet.
    pub(super) fn waiting_ui(&self, ui: &mut egui::Ui) -> bool {
        let Some(live) = &self.session.live else { return false };
        ui.centered_and_justified(|ui| {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label(format!("Waiting for the run's first allocations: {}", live.label));
            });
        });
        true
    }
}
