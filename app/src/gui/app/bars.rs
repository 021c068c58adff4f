//! The window's bars: the menu bar, the toolbar (views, device and process, the peak) and the
//! status bar.

use std::path::Path;

use super::{View, VramscopeApp};
use crate::gui::context::Command;
use crate::gui::shortcuts::menu_label;
use crate::units;

impl VramscopeApp {
    pub(super) fn menu_bar(&mut self, ui: &mut egui::Ui, commands: &mut Vec<Command>) {
        egui::Panel::top("menu").show(ui, |ui| {
            egui::MenuBar::new().ui(ui, |ui| {
                ui.menu_button("File", |ui| {
                    let item =
                        |command: Command, label: &str| egui::Button::new(label).shortcut_text(menu_label(command));
                    if ui.add(item(Command::OpenDialog, "Open…")).clicked() {
                        ui.close();
                        commands.push(Command::OpenDialog);
                    }
                    if ui
                        .button("Open part of a trace…")
                        .on_hover_text(
                            "A range of time or of events only (+2s..+3.5s, #1000000..#2000000): for traces too \
                             long to look at whole, or too large for this machine's memory",
                        )
                        .clicked()
                    {
                        ui.close();
                        commands.push(Command::OpenRangeDialog);
                    }
                    if ui
                        .add(item(Command::OpenFolderDialog, "Open a run's folder…"))
                        .on_hover_text("A directory of a distributed run's per-rank files, opened as one run")
                        .clicked()
                    {
                        ui.close();
                        commands.push(Command::OpenFolderDialog);
                    }
                    ui.menu_button("Open recent", |ui| {
                        if self.settings.recent.is_empty() {
                            ui.weak("nothing yet");
                        }
                        let mut chosen = None;
                        for path in &self.settings.recent {
                            if ui.button(path.display().to_string()).clicked() {
                                chosen = Some(path.clone());
                            }
                        }
                        if let Some(path) = chosen {
                            ui.close();
                            let ctx = ui.ctx().clone();
                            self.open(&ctx, &path);
                        }
                    });
                    if ui.button("Open the built-in sample").on_hover_text(crate::sample::TITLE).clicked() {
                        ui.close();
                        let ctx = ui.ctx().clone();
                        self.open(&ctx, Path::new(crate::sample::PATH));
                    }
                    if ui
                        .add_enabled(
                            self.session.doc.is_some() || self.session.run.is_some(),
                            item(Command::Close, "Close"),
                        )
                        .clicked()
                    {
                        ui.close();
                        commands.push(Command::Close);
                    }
                    ui.separator();
                    if ui.add(item(Command::Quit, "Quit")).clicked() {
                        commands.push(Command::Quit);
                    }
                });
                ui.menu_button("View", |ui| {
                    for info in View::available(self.session.open_kinds()) {
                        let selected = self.settings.view == info.view;
                        if ui
                            .add(egui::Button::selectable(selected, info.label).shortcut_text(info.key_label))
                            .clicked()
                        {
                            commands.push(Command::Show(info.view));
                            ui.close();
                        }
                    }
                    ui.separator();
                    let mut hide_noise = self.settings.hide_noise;
                    let label = format!("Hide interpreter frames ({})", menu_label(Command::ToggleNoise));
                    if ui.checkbox(&mut hide_noise, label).changed() {
                        commands.push(Command::HideNoise(hide_noise));
                    }
                    let mut dark_mode = self.settings.dark_mode;
                    if ui
                        .checkbox(&mut dark_mode, format!("Dark theme ({})", menu_label(Command::ToggleTheme)))
                        .changed()
                    {
                        commands.push(Command::DarkMode(dark_mode));
                    }
                    if ui.add(egui::Button::new("Reset zoom").shortcut_text(menu_label(Command::ResetZoom))).clicked() {
                        commands.push(Command::ResetZoom);
                        ui.close();
                    }
                });
                ui.menu_button("Help", |ui| {
                    let shortcut = menu_label(Command::ToggleHelp);
                    if ui.add(egui::Button::new("Keyboard shortcuts").shortcut_text(shortcut)).clicked() {
                        commands.push(Command::ShowHelp);
                        ui.close();
                    }
                    ui.label(format!("vramscope {}", env!("CARGO_PKG_VERSION")));
                });
            });
        });
    }

    pub(super) fn toolbar(&mut self, ui: &mut egui::Ui, commands: &mut Vec<Command>) {
        let Some(doc) = &self.session.doc else { return };
        let mut device_index = self.session.device_index;
        let mut jump = false;
        let mut view = self.settings.view;
        let mut process = None;
        egui::Panel::top("toolbar").show(ui, |ui| {
            ui.horizontal(|ui| {
                for info in View::available(self.session.open_kinds()) {
                    ui.selectable_value(&mut view, info.view, info.label)
                        .on_hover_text(format!("{} ({})", info.about, info.key_label));
                }
                ui.separator();
                if let Some((whole, chosen)) = self.session.processes() {
                    process = process_combo(ui, whole, chosen).filter(|&p| p != chosen);
                    if self.session.is_switching() {
                        ui.spinner().on_hover_text("Preparing the process chosen");
                    }
                }
                if doc.devices.len() > 1 {
                    egui::ComboBox::from_id_salt("device").selected_text(doc.device_label(device_index)).show_ui(
                        ui,
                        |ui| {
                            for i in 0..doc.devices.len() {
                                ui.selectable_value(&mut device_index, i, doc.device_label(i));
                            }
                        },
                    );
                } else {
                    ui.label(doc.device_label(device_index));
                }
                let Some(device) = doc.devices.get(device_index) else { return };
                let (peak, _, _) = device.timeline.values(device.peak_point);
                jump = ui
                    .button(format!("Jump to peak ({})", units::bytes(peak)))
                    .on_hover_text("Select the instant of the highest allocated memory (P)")
                    .clicked();
                if let Some(point) = self.session.selected_point {
                    let (allocated, _, reserved) = device.timeline.values(point);
                    let at_peak = point == device.peak_point;
                    // From the trace's first event, as every face says a time.
                    let t = device.timeline.time_ns(point) - doc.trace.origin_ns();
                    let when = if doc.has_no_clock() {
                        format!("event #{}", device.timeline.time_ns(point))
                    } else {
                        format!("+{}", units::duration_ns(t))
                    };
                    // A trace without reserved memory (a profiler's CPU trace, a timeline) says so.
                    let recorded = device.reserved_recorded;
                    let reserved = if recorded { units::bytes(reserved) } else { "reserved not recorded".to_owned() };
                    let reserved = if recorded { format!("{reserved} reserved") } else { reserved };
                    ui.label(format!(
                        "{}: {} allocated, {reserved} at {}",
                        if at_peak { "peak" } else { "selected" },
                        units::bytes(allocated),
                        when
                    ));
                }
                if self.session.is_analysing() {
                    ui.spinner();
                }
            });
        });
        if view != self.settings.view {
            commands.push(Command::Show(view));
        }
        commands.extend(process.map(Command::Process));
        if device_index != self.session.device_index {
            commands.push(Command::Device(device_index));
        } else if jump {
            commands.push(Command::JumpToPeak);
        }
    }

    pub(super) fn status_bar(&mut self, ui: &mut egui::Ui) {
        egui::Panel::bottom("status").show(ui, |ui| {
            ui.horizontal(|ui| match &self.session.doc {
                Some(doc) => {
                    ui.label(doc.file_name()).on_hover_text(doc.path.display().to_string());
                    ui.separator();
                    ui.label(doc.format.name());
                    ui.separator();
                    ui.label(format!("{} records", units::count(doc.trace.record_count())))
                        .on_hover_text("Allocator events, annotations, counter samples, tags and OOMs");
                    ui.separator();
                    if self.session.live.as_ref().is_some_and(|l| !l.ended()) {
                        ui.label(format!("{} recorded so far", units::bytes(doc.file_bytes)));
                    } else {
                        ui.label(format!(
                            "{} ({} in {})",
                            units::bytes(doc.file_bytes),
                            "read and analysed",
                            units::duration_ns(doc.load_time.as_nanos() as i64)
                        ));
                    }
                    if !doc.warnings.is_empty() {
                        ui.separator();
                        ui.colored_label(
                            ui.visuals().warn_fg_color,
                            match doc.warnings.len() {
                                1 => "1 warning".to_owned(),
                                n => format!("{n} warnings"),
                            },
                        )
                        .on_hover_text(doc.warnings.join("\n"));
                    }
                }
                None => {
                    ui.weak("No trace open. Ctrl+O to open one, or drop a file on the window.");
                }
            });
        });
    }
}

/// The menu of a recording's processes; the one picked this frame, if any.
fn process_combo(ui: &mut egui::Ui, whole: &vramscope_trace_format::Trace, chosen: usize) -> Option<usize> {
    let label = |index: usize| crate::words::process_name(whole.metadata.processes.get(index), index);
    let mut picked = chosen;
    egui::ComboBox::from_id_salt("process")
        .selected_text(label(chosen))
        .show_ui(ui, |ui| {
            for i in 0..whole.metadata.processes.len() {
                ui.selectable_value(&mut picked, i, label(i));
            }
        })
        .response
        .on_hover_text("The process shown: one at a time, so no view mixes two processes' blocks (the Ranks view, 6, shows them side by side)");
    (picked != chosen).then_some(picked)
}
