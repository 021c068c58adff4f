//! `--screenshot`: render the real window once the trace is shown, save a PNG, exit.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};

use super::app::VramscopeApp;

/// How a screenshot run ended, shared between the window and the caller.
#[derive(Clone, Debug, Default)]
pub struct Outcome(Arc<Mutex<Option<Result<(), String>>>>);

impl Outcome {
    fn set(&self, result: Result<(), String>) {
        if let Ok(mut slot) = self.0.lock() {
            slot.get_or_insert(result);
        }
    }

    /// Ok when the screenshot was saved (or when this was not a screenshot run and the window closed).
    pub fn result(&self) -> Result<()> {
        match self.0.lock().map(|slot| slot.clone()) {
            Ok(Some(Err(error))) => Err(anyhow!(error)),
            _ => Ok(()),
        }
    }
}

/// Frames to draw after everything is ready, so layout has settled.
const SETTLE_FRAMES: u32 = 3;
/// Give up after this long.
const TIMEOUT: Duration = Duration::from_secs(300);

/// The app, driven to a screenshot.
pub struct ScreenshotApp {
    app: VramscopeApp,
    path: PathBuf,
    outcome: Outcome,
    started: Instant,
    ready_frames: u32,
    image: Arc<Mutex<Option<Arc<egui::ColorImage>>>>,
    requested: bool,
}

impl ScreenshotApp {
    /// Wraps `app`, to save its window to `path`.
    pub fn new(app: VramscopeApp, path: PathBuf, outcome: Outcome) -> Self {
        Self { app, path, outcome, started: Instant::now(), ready_frames: 0, image: Arc::default(), requested: false }
    }

    fn finish(&self, ctx: &egui::Context, result: Result<(), String>) {
        self.outcome.set(result);
        ctx.send_viewport_cmd(egui::ViewportCommand::Close);
    }
}

/// Saves a screenshot as PNG, through a temporary file so a failed write leaves nothing behind.
pub fn save_png(image: &egui::ColorImage, path: &std::path::Path) -> Result<()> {
    use image::ImageEncoder;
    let [width, height] = image.size;
    let (Ok(width), Ok(height)) = (u32::try_from(width), u32::try_from(height)) else {
        anyhow::bail!("the screenshot has an inconsistent size");
    };
    let mut png = Vec::new();
    // Encoded from the pixels as they are (RGBA, 8 bits each), not from a copy of them.
    image::codecs::png::PngEncoder::new(&mut png)
        .write_image(image.as_raw(), width, height, image::ExtendedColorType::Rgba8)
        .with_context(|| format!("cannot encode {}", path.display()))?;
    // The one atomic writer: a screenshot replaces an older one of the same name.
    crate::atomic::write(path, &png, true)?;
    Ok(())
}

impl eframe::App for ScreenshotApp {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        self.app.ui(ui);
        let ctx = ui.ctx().clone();
        // While the file loads the app schedules its own (slow) repaints, as it does for a person
        // watching; drawing flat out here would take the cores from the load being timed.
        if !self.app.session.is_loading() {
            ctx.request_repaint();
        }
        if self.started.elapsed() > TIMEOUT {
            self.finish(&ctx, Err(format!("gave up after {} s without a finished render", TIMEOUT.as_secs())));
            return;
        }
        if self.app.session.doc.is_none()
            && !self.app.session.is_loading()
            && let Some(error) = self.app.session.errors.first()
        {
            let error = error.clone();
            self.finish(&ctx, Err(error));
            return;
        }
        let taken = self.image.lock().ok().and_then(|mut slot| slot.take());
        if let Some(image) = taken {
            let result = save_png(&image, &self.path).map_err(|e| format!("{e:#}"));
            self.finish(&ctx, result);
            return;
        }
        // A trace without memory events (or a followed run without any yet) has no instant to
        // wait for.
        let ready = self.app.session.doc.is_some()
            && !self.app.session.is_loading()
            && (self.app.session.instant.is_some() || self.app.session.device().is_none())
            && !self.app.session.is_analysing()
            // The Advisor works its advice out in the background once it is shown.
            && (self.app.settings.view != super::views::View::Advisor
                || self.app.session.device().is_none()
                || self.app.views.advisor.is_settled());
        // Without a file, the welcome screen is what there is to show.
        let nothing_to_wait_for =
            self.app.session.doc.is_none() && !self.app.session.is_loading() && self.app.session.errors.is_empty();
        if (ready || nothing_to_wait_for) && !self.requested {
            self.ready_frames += 1;
            if self.ready_frames > SETTLE_FRAMES {
                let slot = Arc::clone(&self.image);
                ctx.request_screenshot(move |image| {
                    if let Ok(mut slot) = slot.lock() {
                        *slot = Some(image);
                    }
                });
                self.requested = true;
            }
        }
    }

    fn persist_egui_memory(&self) -> bool {
        false
    }
}
