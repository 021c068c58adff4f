//! Choosing a file to open: the native dialog in the app, something scripted in tests.

use std::path::PathBuf;

/// Picks a file to open; the native dialog in the app, something scripted in tests.
pub trait FilePicker {
    /// Asks for a file; `None` when the user cancels.
    fn pick(&mut self) -> Option<PathBuf>;

    /// Asks for a directory (a run's rank files); `None` when the user cancels.
    fn pick_folder(&mut self) -> Option<PathBuf> {
        None
    }
}

/// The native Open dialog.
pub struct NativePicker;

impl FilePicker for NativePicker {
    fn pick(&mut self) -> Option<PathBuf> {
        rfd::FileDialog::new()
            .set_title("Open a trace")
            .add_filter("Traces", &["vtrace", "pickle", "pkl", "json", "gz"])
            .add_filter("All files", &["*"])
            .pick_file()
    }

    fn pick_folder(&mut self) -> Option<PathBuf> {
        rfd::FileDialog::new().set_title("Open a run's folder (one file per rank)").pick_folder()
    }
}
