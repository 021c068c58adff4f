//! The desktop app (egui/eframe): timeline, peak breakdown and fragmentation map of a trace.
//!
//! The analysis it shows comes from [`crate::query`]; this module only lays out and paints.
//! Loading and the analysis of a selected instant run on background threads.

pub mod advisor_view;
pub mod app;
pub mod banner;
pub mod breakdown_view;
pub mod compare;
pub mod compare_view;
pub mod context;
pub mod device_view;
pub mod document;
pub mod follow;
pub mod fragmentation_view;
pub mod jobs;
pub mod loader;
pub mod oom_view;
pub mod palette;
pub mod picker;
pub mod ranks;
pub mod ranks_view;
pub mod screenshot;
pub mod session;
pub mod settings;
pub mod shortcuts;
pub mod timeline_view;
pub mod views;
pub mod widgets;
pub mod worker;

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use anyhow::{Result, anyhow};

pub use app::VramscopeApp;
pub use picker::{FilePicker, NativePicker};
pub use settings::{Settings, View};

/// How to start the window.
#[derive(Clone, Debug, Default)]
pub struct GuiOptions {
    /// What to open at once: a trace, or a run of several ranks (files, a directory of them).
    pub files: Vec<PathBuf>,
    /// A second file to compare with the first.
    pub compare: Option<PathBuf>,
    /// Render the window once the file is shown, save it here as PNG, and exit.
    pub screenshot: Option<PathBuf>,
    /// The view to show first.
    pub view: Option<View>,
    /// Window size in points.
    pub size: Option<[f32; 2]>,
    /// Dark (or light) theme instead of the saved choice.
    pub dark_mode: Option<bool>,
    /// When the process started: with `VRAMSCOPE_TIMINGS=1`, the time from it to the first frame
    /// showing the trace is printed.
    pub started: Option<std::time::Instant>,
    /// Open only this part of the files (and of those opened with them: a rank, a comparison).
    pub range: Option<vramscope_trace_format::TraceRange>,
    /// Follow a run as it goes instead of opening files.
    pub follow: Option<follow::Source>,
}

/// Runs the window until it is closed.
/// What the windowing library says went wrong, without the source path it puts in front
/// ("os error at /root/.cargo/registry/.../linux/mod.rs:788: Failed to open connection to X server").
fn windowing_reason(error: &dyn std::fmt::Display) -> String {
    let text = error.to_string();
    match text.rfind(".rs:") {
        Some(at) => text[at..].split_once(": ").map_or(text.as_str(), |(_, reason)| reason).to_owned(),
        None => text,
    }
}

/// The window system the app would use, for messages.
fn window_system() -> String {
    match (std::env::var("WAYLAND_DISPLAY"), std::env::var("DISPLAY")) {
        (Ok(w), _) if !w.is_empty() => format!("Wayland display {w}"),
        (_, Ok(d)) if !d.is_empty() => format!("X display {d}"),
        _ => "no display set".to_owned(),
    }
}

/// Opens the app's window (or, with a screenshot asked for, draws it once and writes the PNG).
pub fn run(options: GuiOptions) -> Result<()> {
    #[cfg(target_os = "linux")]
    if ["DISPLAY", "WAYLAND_DISPLAY", "WAYLAND_SOCKET"].iter().all(|v| std::env::var_os(v).is_none_or(|v| v.is_empty()))
    {
        anyhow::bail!(
            "no display to open the app's window on (DISPLAY and WAYLAND_DISPLAY are not set){}. On a machine without \
             one, run it under Xvfb (`xvfb-run -a vramscope ...`; scripts/install-gui-deps.sh installs it), or use the \
             commands that print: info, diff, advise, report",
            if options.screenshot.is_some() { "; --screenshot draws the window too" } else { "" }
        );
    }
    let size = options.size.unwrap_or([1400.0, 900.0]);
    let viewport = egui::ViewportBuilder::default()
        .with_title("vramscope")
        .with_app_id("vramscope")
        .with_inner_size(size)
        .with_min_inner_size([640.0, 420.0])
        .with_drag_and_drop(true);
    let screenshot = options.screenshot.clone();
    // A screenshot run neither reads nor writes the user's saved state (eframe restores the
    // window's saved size whatever `persist_window` says): it gets a storage of its own, gone
    // after it.
    let throwaway = screenshot.is_some().then(tempfile::tempdir).transpose()?;
    let native = eframe::NativeOptions {
        viewport,
        renderer: eframe::Renderer::Glow,
        persist_window: screenshot.is_none(),
        persistence_path: throwaway.as_ref().map(|d| d.path().join("app.ron")),
        ..eframe::NativeOptions::default()
    };
    // A size asked for wins over the one saved.
    let asked_size = options.size;
    // Reading starts before the window exists: creating a window and its GL context takes a
    // while, and the two overlap. The loader asks for repaints once the window is there.
    let window_ctx: Arc<OnceLock<egui::Context>> = Arc::default();
    let repaint_ctx = Arc::clone(&window_ctx);
    // Without a file, the built-in sample (a screenshot without one shows the welcome screen).
    let mut files = options.files.clone();
    if files.is_empty() && screenshot.is_none() && options.follow.is_none() {
        files.push(PathBuf::from(crate::sample::PATH));
    }
    // A run of several files is read once the window is there (its ranks show as they arrive).
    let one_file = match files.as_slice() {
        [one] if !one.is_dir() => Some(one.clone()),
        _ => None,
    };
    let run_paths = if one_file.is_none() { files } else { Vec::new() };
    let early_loader = one_file.as_deref().map(|file| {
        loader::Loader::start(file, options.range, move || {
            if let Some(ctx) = repaint_ctx.get() {
                ctx.request_repaint();
            }
        })
    });
    let outcome = screenshot::Outcome::default();
    let outcome_for_app = outcome.clone();
    eframe::run_native(
        "vramscope",
        native,
        Box::new(move |cc| {
            let mut settings =
                if screenshot.is_some() { Settings::default() } else { VramscopeApp::load_settings(cc.storage) };
            if let Some(view) = options.view {
                settings.view = view;
            }
            if let Some(dark_mode) = options.dark_mode {
                settings.dark_mode = dark_mode;
            }
            let _ = window_ctx.set(cc.egui_ctx.clone());
            if let Some([w, h]) = asked_size {
                cc.egui_ctx.send_viewport_cmd(egui::ViewportCommand::InnerSize(egui::vec2(w, h)));
            }
            let mut app = VramscopeApp::new(settings, Box::new(NativePicker));
            let later = options.compare.is_some() || options.follow.is_some();
            app.asked_view = options.view.filter(|_| later);
            app.asked_view_unshown = options.view.filter(|_| !later);
            app.session.range = options.range;
            if std::env::var_os("VRAMSCOPE_TIMINGS").is_some() {
                app.report_first_frame_since = options.started;
            }
            if let Some(loader) = early_loader {
                app.adopt_loader(loader);
                cc.egui_ctx.request_repaint();
            }
            if !run_paths.is_empty() {
                app.open_from_command_line(&cc.egui_ctx, &run_paths);
                // The view asked for wins over the ranks view a run opens in.
                if let Some(view) = options.view {
                    app.settings.view = view;
                }
            }
            if let Some(path) = &options.compare {
                app.open_second(&cc.egui_ctx, path);
            }
            if let Some(source) = options.follow {
                app.follow(&cc.egui_ctx, source);
            }
            Ok(match screenshot {
                Some(path) => Box::new(screenshot::ScreenshotApp::new(app, path, outcome_for_app)),
                None => Box::new(app),
            })
        }),
    )
    .map_err(|e| anyhow!("cannot open the app's window on the {}: {}", window_system(), windowing_reason(&e)))?;
    outcome.result()
}
