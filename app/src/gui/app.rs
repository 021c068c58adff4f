//! The application: opening files, the menus, the views and their shared selection.

use std::path::{Path, PathBuf};

use super::advisor_view::AdvisorState;
use super::breakdown_view::BreakdownState;
use super::compare_view::CompareState;
use super::context::{Command, ViewCtx};
use super::document::Document;
use super::loader::Loader;
use super::picker::FilePicker;
use super::session::{Change, Session};
use super::settings::Settings;
pub use super::views::View;
use super::views::{Needs, ViewStates};
use super::widgets::timeline;
use super::{banner, ranks_view, shortcuts};
use crate::units;

mod bars;
mod live;
mod range;

const SETTINGS_KEY: &str = "vramscope-settings";

/// The vramscope window: the session it shows, the views' states and the chrome around them
/// (menus, toolbar, status bar, help, welcome).
pub struct VramscopeApp {
    /// Persisted options.
    pub settings: Settings,
    /// The open trace, what is selected in it, and the jobs working on it.
    pub session: Session,
    /// What each view keeps between frames (its zoom, its scroll, its choices).
    pub views: ViewStates,
    show_help: bool,
    path_input: String,
    picker: Box<dyn FilePicker>,
    /// When set, the time from this instant to the first frame that shows a trace is printed
    /// to stderr (for benchmarks).
    pub report_first_frame_since: Option<std::time::Instant>,
    /// How many of a run's timings were said (first rank, all ranks).
    run_timings_said: u8,
    /// File > Open part of a trace…, while it is open.
    range_dialog: Option<range::RangeDialog>,
    /// The view `--view` asked for, until a comparison or a followed run the command line asked
    /// for opens (it wins over the view they open in).
    pub asked_view: Option<View>,
    /// The view `--view` asked for, until the first trace is shown: said when it has nothing to
    /// show there.
    pub asked_view_unshown: Option<View>,
}

impl VramscopeApp {
    /// A window with `settings`, opening `file` if given.
    pub fn new(settings: Settings, picker: Box<dyn FilePicker>) -> Self {
        Self {
            settings,
            session: Session::default(),
            views: ViewStates::default(),
            show_help: false,
            path_input: String::new(),
            picker,
            report_first_frame_since: None,
            run_timings_said: 0,
            range_dialog: None,
            asked_view: None,
            asked_view_unshown: None,
        }
    }

    /// Settings saved by an earlier run, if any.
    pub fn load_settings(storage: Option<&dyn eframe::Storage>) -> Settings {
        storage.and_then(|s| eframe::get_value(s, SETTINGS_KEY)).unwrap_or_default()
    }

    /// Starts loading `path` in the background: a trace, or a directory of a run's rank files.
    pub fn open(&mut self, ctx: &egui::Context, path: &Path) {
        self.open_paths(ctx, &[path.to_owned()]);
    }

    /// Starts loading what `paths` name, whole: one trace, or a run of several ranks (files, a
    /// directory of them), shown in the ranks view as its files are read.
    pub fn open_paths(&mut self, ctx: &egui::Context, paths: &[PathBuf]) {
        self.session.range = None;
        self.start_paths(ctx, paths);
    }

    /// [`Self::open_paths`] of the part the session reads ([`Session::range`]: the one the
    /// command line asked for, if it did).
    pub fn open_from_command_line(&mut self, ctx: &egui::Context, paths: &[PathBuf]) {
        self.start_paths(ctx, paths);
    }

    fn start_paths(&mut self, ctx: &egui::Context, paths: &[PathBuf]) {
        self.session.open_paths(ctx, paths);
        if self.session.run.as_ref().is_some_and(|r| r.is_reading()) {
            self.settings.view = View::Ranks;
        }
    }

    /// Shows a load started elsewhere (before the window existed).
    pub fn adopt_loader(&mut self, loader: Loader) {
        self.session.adopt_loader(loader);
    }

    /// Starts loading `path` as the run to compare the open one with.
    pub fn open_second(&mut self, ctx: &egui::Context, path: &Path) {
        self.session.open_second(ctx, path);
    }

    /// Picks up what the session's jobs finished and follows it in the views.
    fn poll(&mut self, ctx: &egui::Context) {
        for change in self.session.poll(ctx) {
            match change {
                Change::Opened(path) => self.settings.remember(&path),
                Change::NewDocument => self.new_document(),
                // The same run, further on: the views keep their zoom and choices.
                Change::Updated => {}
                Change::CompareStarted => {
                    self.views.compare = CompareState::default();
                    self.settings.view = self.asked_view.take().unwrap_or(View::Compare);
                }
            }
        }
    }

    /// The views start afresh on a new document.
    fn new_document(&mut self) {
        self.views.advisor = AdvisorState::default();
        if self.settings.view == View::Compare {
            self.settings.view = View::Timeline;
        }
        self.views.timeline.reset();
        self.views.breakdown = BreakdownState::default();
    }

    /// Shows a loaded document, selecting its first device's peak.
    pub fn set_document(&mut self, ctx: &egui::Context, doc: Document) {
        self.session.set_document(ctx, doc);
        self.new_document();
    }

    /// Shows `start_ns..end_ns` in the timeline (`None`: the whole trace).
    pub fn set_visible_time(&mut self, range_ns: Option<(f64, f64)>) {
        self.views.timeline.view_ns = range_ns;
    }

    /// Selects the allocated peak of the current device.
    pub fn jump_to_peak(&mut self) {
        self.views.breakdown.picked = None;
        self.session.follow_newest = false;
        self.session.jump_to_peak();
    }

    /// Selects a timeline point and asks for its analysis (a run followed stays there).
    pub fn select(&mut self, point: crate::query::timeline::Point) {
        self.views.breakdown.picked = None;
        self.session.follow_newest = false;
        self.session.select(point);
    }

    /// Follows a run as it goes (a recording in progress, or a file rewritten as it runs).
    pub fn follow(&mut self, ctx: &egui::Context, source: super::follow::Source) {
        self.session.follow(ctx, source);
        self.settings.view = self.asked_view.take().unwrap_or(View::Timeline);
    }

    fn close(&mut self, ctx: &egui::Context) {
        self.session.close(ctx);
    }

    fn compare_dialog(&mut self, ctx: &egui::Context) {
        if self.session.doc.is_some()
            && let Some(path) = self.picker.pick()
        {
            self.open_second(ctx, &path);
        }
    }

    fn open_folder_dialog(&mut self, ctx: &egui::Context) {
        if let Some(path) = self.picker.pick_folder() {
            self.open(ctx, &path);
        }
    }

    fn open_dialog(&mut self, ctx: &egui::Context) {
        if let Some(path) = self.picker.pick() {
            self.open(ctx, &path);
        }
    }

    /// Does what a command asks (the window applies each frame's commands once, after drawing).
    fn apply(&mut self, ctx: &egui::Context, command: Command) {
        match command {
            Command::Select(point) => self.select(point),
            Command::Step(by) => {
                if let Some(point) = self.session.selected_point {
                    let magnitude = usize::try_from(by.unsigned_abs()).unwrap_or(usize::MAX);
                    self.select(if by < 0 { point.earlier(magnitude) } else { point.later(magnitude) });
                }
            }
            Command::JumpToPeak if self.session.doc.is_some() => self.jump_to_peak(),
            Command::Device(index) if index != self.session.device_index => {
                self.session.choose_device(index);
                self.views.timeline.reset();
                self.views.breakdown.picked = None;
            }
            Command::Process(process) => self.session.choose_process(ctx, process),
            Command::OpenRank(rank) => self.session.open_rank(ctx, rank),
            Command::Show(view) => self.settings.view = view,
            Command::HideNoise(hide) => self.settings.hide_noise = hide,
            Command::PythonOnly(only) => self.settings.python_only = only,
            Command::SegmentOrder(order) => self.settings.segment_order = order,
            Command::DarkMode(dark) => self.settings.dark_mode = dark,
            Command::ToggleTheme => self.settings.dark_mode = !self.settings.dark_mode,
            Command::ToggleNoise => self.settings.hide_noise = !self.settings.hide_noise,
            Command::ResetZoom => self.views.timeline.reset(),
            Command::Zoom(factor) => self.zoom(factor),
            Command::FollowNewest if self.session.live.is_some() => self.follow_newest(),
            Command::OpenDialog => self.open_dialog(ctx),
            Command::OpenFolderDialog => self.open_folder_dialog(ctx),
            Command::CompareDialog => self.compare_dialog(ctx),
            Command::OpenRangeDialog => self.open_range_dialog(),
            Command::Close => self.close(ctx),
            Command::Quit => ctx.send_viewport_cmd(egui::ViewportCommand::Close),
            Command::Escape => {
                self.session.cancel_loads();
                self.show_help = false;
            }
            Command::ToggleHelp => self.show_help = !self.show_help,
            Command::ShowHelp => self.show_help = true,
            Command::JumpToPeak | Command::Device(_) | Command::FollowNewest => {}
        }
    }

    /// Zooms the timeline by `factor` around the selected instant (or the middle of the view).
    fn zoom(&mut self, factor: f64) {
        let Some(device) = self.session.doc.as_ref().and_then(|d| d.devices.get(self.session.device_index)) else {
            return;
        };
        let center = self.session.selected_point.map_or_else(
            || {
                let (a, b) = timeline::visible_span(&self.views.timeline, device);
                (a + b) / 2.0
            },
            |p| device.timeline.time_ns(p) as f64,
        );
        timeline::zoom(&mut self.views.timeline, device, center, factor);
    }

    /// Draws one frame (the whole window), then does what was asked in it.
    pub fn ui(&mut self, ui: &mut egui::Ui) {
        let ctx = ui.ctx().clone();
        ctx.set_theme(if self.settings.dark_mode { egui::Theme::Dark } else { egui::Theme::Light });
        self.poll(&ctx);
        let mut commands = Vec::new();
        shortcuts::commands(&ctx, self.session.open_kinds(), &mut commands);
        self.dropped_files(&ctx);
        self.menu_bar(ui, &mut commands);
        self.status_bar(ui);
        self.errors_panel(ui);
        if self.session.doc.is_some() {
            self.toolbar(ui, &mut commands);
            self.live_bar(ui);
            self.sample_banner(ui, &mut commands);
            if let Some(doc) = &self.session.doc {
                banner::caveats_ui(ui, doc, self.session.device_index, &mut commands);
            }
        }
        egui::CentralPanel::default().show(ui, |ui| {
            if self.session.doc.is_some() {
                self.document_ui(ui, &mut commands);
                if let Some(since) = self.report_first_frame_since.take() {
                    eprintln!(
                        "vramscope: first frame with the trace after {:.0} ms ({})",
                        since.elapsed().as_secs_f64() * 1e3,
                        crate::memory::resident_so_far()
                    );
                }
            } else if let Some(run) = &self.session.run {
                // The run's ranks as they arrive, before the first is shown in the other views.
                ranks_view::run_ui(ui, run, &mut commands);
            } else if !self.waiting_ui(ui) {
                self.welcome_ui(ui);
            }
        });
        self.report_run_timings();
        // What was asked this frame is done once, here: the windows drawn over the rest (a dialog
        // it opens, the progress of a load it starts) show it at once, the panels next frame.
        if !commands.is_empty() {
            ctx.request_repaint();
        }
        for command in commands {
            self.apply(&ctx, command);
        }
        self.loading_overlay(&ctx);
        self.range_window(&ctx);
        if self.show_help {
            self.help_window(&ctx);
        }
        if ctx.input(|i| !i.raw.hovered_files.is_empty()) {
            let screen = ctx.content_rect();
            let painter =
                ctx.layer_painter(egui::LayerId::new(egui::Order::Foreground, egui::Id::unique("vramscope-drop")));
            painter.rect_filled(screen, 0.0, egui::Color32::from_black_alpha(160));
            painter.text(
                screen.center(),
                egui::Align2::CENTER_CENTER,
                "Drop to open",
                egui::FontId::proportional(28.0),
                egui::Color32::WHITE,
            );
        }
    }

    /// With `VRAMSCOPE_TIMINGS`, when a run's first rank and all its ranks were first drawn.
    fn report_run_timings(&mut self) {
        let (Some(since), Some(run)) = (self.report_first_frame_since, &self.session.run) else { return };
        let rows = run.rows().len();
        let ms = since.elapsed().as_secs_f64() * 1e3;
        if self.run_timings_said == 0 && rows > 0 {
            eprintln!("vramscope: first rank of the run drawn after {ms:.0} ms");
            self.run_timings_said = 1;
        }
        if self.run_timings_said == 1 && run.finished.is_some() {
            eprintln!("vramscope: all {rows} ranks of the run drawn after {ms:.0} ms");
            self.run_timings_said = 2;
        }
    }

    fn dropped_files(&mut self, ctx: &egui::Context) {
        let dropped: Vec<PathBuf> = ctx.input(|i| {
            i.raw.dropped_files.iter().map(|f| f.path().to_owned()).filter(|p| !p.as_os_str().is_empty()).collect()
        });
        // Several files dropped at once: a run of several ranks.
        if !dropped.is_empty() {
            self.open_paths(ctx, &dropped);
        }
    }

    /// Under the toolbar while the built-in sample is shown: what it is and how to get your own.
    fn sample_banner(&mut self, ui: &mut egui::Ui, commands: &mut Vec<Command>) {
        if !self.session.doc.as_ref().is_some_and(Document::is_sample) {
            return;
        }
        egui::Panel::top("sample").show(ui, |ui| {
            ui.horizontal_wrapped(|ui| {
                ui.strong("This is a built-in sample:");
                ui.label(
                    "three training steps of a GPT recorded with `vramscope record` on an H200, with every \
                     tensor tagged. Record your own with `vramscope record -- python train.py`, or",
                );
                let tip = format!("{}, or drop a file on the window", shortcuts::menu_label(Command::OpenDialog));
                if ui.button("Open a trace…").on_hover_text(tip).clicked() {
                    commands.push(Command::OpenDialog);
                }
            });
        });
    }

    fn errors_panel(&mut self, ui: &mut egui::Ui) {
        if self.session.errors.is_empty() {
            return;
        }
        let mut dismiss = None;
        egui::Panel::bottom("errors").show(ui, |ui| {
            for (i, error) in self.session.errors.iter().enumerate() {
                ui.horizontal(|ui| {
                    if ui.small_button("Dismiss").clicked() {
                        dismiss = Some(i);
                    }
                    ui.colored_label(ui.visuals().error_fg_color, error);
                });
            }
        });
        if let Some(i) = dismiss {
            self.session.errors.remove(i);
        }
    }

    fn loading_overlay(&mut self, ctx: &egui::Context) {
        let Some(loader) = self.session.loading() else { return };
        let (done, total) = loader.progress();
        let name = loader
            .path
            .file_name()
            .map_or_else(|| loader.path.display().to_string(), |n| n.to_string_lossy().into_owned());
        let mut cancel = false;
        egui::Modal::new(egui::Id::unique("vramscope-loading")).show(ctx, |ui| {
            ui.set_width(380.0);
            ui.heading(format!("Opening {name}"));
            let fraction = if total > 0 { done as f32 / total as f32 } else { 0.0 };
            let text = if total > 0 && done >= total {
                "analysing…".to_owned()
            } else {
                format!("{} of {}", units::bytes(done), units::bytes(total))
            };
            ui.add(egui::ProgressBar::new(fraction).text(text));
            ui.horizontal(|ui| {
                ui.weak(format!("{:.1} s", loader.started().elapsed().as_secs_f32()));
                if ui.button("Cancel").on_hover_text("Esc").clicked() {
                    cancel = true;
                }
            });
        });
        if cancel {
            loader.cancel();
        }
        // Two frames a second: the bar and the seconds move, and drawing (on a software
        // renderer, every pixel on the CPU, tens of milliseconds of both cores a frame) leaves
        // the cores to the load.
        ctx.request_repaint_after(std::time::Duration::from_millis(500));
    }

    fn help_window(&mut self, ctx: &egui::Context) {
        let mut open = true;
        egui::Window::new("Keyboard shortcuts").open(&mut open).collapsible(false).resizable(false).show(ctx, |ui| {
            egui::Grid::new("shortcuts").num_columns(2).striped(true).show(ui, |ui| {
                for (keys, what) in shortcuts::help_rows() {
                    ui.monospace(keys);
                    ui.label(what);
                    ui.end_row();
                }
            });
        });
        if !open {
            self.show_help = false;
        }
    }

    fn welcome_ui(&mut self, ui: &mut egui::Ui) {
        let ctx = ui.ctx().clone();
        ui.vertical_centered(|ui| {
            ui.add_space(ui.available_height() * 0.12);
            ui.heading(egui::RichText::new("vramscope").size(34.0).strong());
            ui.label("GPU memory profiler and trace analyzer");
            ui.add_space(18.0);
            if ui.add(egui::Button::new(egui::RichText::new("Open a trace…").size(18.0)).min_size(egui::vec2(220.0, 36.0))).clicked() {
                self.open_dialog(&ctx);
            }
            ui.add_space(6.0);
            ui.weak("or drop a file on this window");
            ui.add_space(6.0);
            ui.horizontal(|ui| {
                let width = 460.0f32.min(ui.available_width() - 80.0);
                ui.add_space((ui.available_width() - width - 60.0).max(0.0) / 2.0);
                let edit = ui.add(egui::TextEdit::singleline(&mut self.path_input).hint_text("or type a path and press Enter").desired_width(width));
                let go = ui.button("Open").clicked() || (edit.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter)));
                if go && !self.path_input.trim().is_empty() {
                    let path = PathBuf::from(self.path_input.trim());
                    self.open(&ctx, &path);
                }
            });
            ui.add_space(18.0);
            ui.label("Reads PyTorch memory snapshots (torch.cuda.memory._dump_snapshot), profiler Chrome traces and memory timelines, and .vtrace recordings.");
            ui.add_space(18.0);
            if !self.settings.recent.is_empty() {
                ui.strong("Recent files");
                let mut chosen = None;
                for path in &self.settings.recent {
                    let exists = path.exists();
                    let button = ui.add_enabled(exists, egui::Button::new(path.display().to_string()).frame(false));
                    if button.clicked() {
                        chosen = Some(path.clone());
                    }
                }
                if let Some(path) = chosen {
                    self.open(&ctx, &path);
                }
            }
        });
    }

    fn document_ui(&mut self, ui: &mut egui::Ui, commands: &mut Vec<Command>) {
        let session = &self.session;
        let Some(doc) = &session.doc else { return };
        let Some(device) = doc.devices.get(session.device_index) else {
            ui.label("This trace holds no memory events.");
            return;
        };
        let asked = self.asked_view_unshown.take();
        if !self.settings.view.is_available(session.open_kinds()) {
            // A view asked for on the command line is not dropped without a word.
            if asked == Some(self.settings.view) {
                let info = self.settings.view.info();
                let why = match info.needs {
                    Needs::SecondRun => "a second run to compare with (vramscope compare A B)",
                    Needs::Run => "a run of several ranks",
                    Needs::Oom => "a trace with an out-of-memory error",
                    Needs::Device => {
                        "a recording that sampled the whole device (vramscope record, on an NVIDIA driver)"
                    }
                    Needs::Nothing => "nothing more",
                };
                eprintln!("vramscope: --view {} needs {why}: showing the timeline", info.cli_name);
            }
            self.settings.view = View::Timeline;
        }
        let info = self.settings.view.info();
        let instant = session.instant.clone().filter(|v| {
            Some(v.request.point) == session.selected_point && v.request.device_index == session.device_index
        });
        let view_ctx = ViewCtx {
            doc,
            device_index: session.device_index,
            device,
            selected_point: session.selected_point,
            instant: instant.as_deref(),
            compare: session.compare.as_ref(),
            run: session.run.as_ref(),
            settings: &self.settings,
            whole: session.whole(),
        };
        if let Some(share) = info.timeline_share {
            let height = (ui.available_height() * share).max(if share > 0.5 { 220.0 } else { 180.0 });
            let size = egui::vec2(ui.available_width(), height);
            let state = &mut self.views.timeline;
            if let Some(point) = timeline::timeline_ui(ui, doc, device, state, view_ctx.selected_point, size) {
                commands.push(Command::Select(point));
            }
            ui.separator();
        }
        if info.needs_instant && view_ctx.instant.is_none() {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label("Working out what is alive at the selected instant…");
            });
        } else {
            (info.draw)(ui, &view_ctx, &mut self.views, commands);
        }
    }
}

impl eframe::App for VramscopeApp {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        VramscopeApp::ui(self, ui);
    }

    fn save(&mut self, storage: &mut dyn eframe::Storage) {
        eframe::set_value(storage, SETTINGS_KEY, &self.settings);
    }
}
