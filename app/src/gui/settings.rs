//! What the window remembers between runs ([`Settings`]) and the choices it is made of: the view
//! shown and the order of the fragmentation map's rows.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The views of an open trace (their table, labels and keys: [`crate::gui::views::VIEWS`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum View {
    /// The timeline, large, with the selected instant's summary beside it.
    #[default]
    Timeline,
    /// What was alive at the selected instant (the peak by default).
    Peak,
    /// The allocator's segments at the selected instant.
    Fragmentation,
    /// Two runs side by side (once a second trace is open).
    Compare,
    /// What each remedy would do to the peak.
    Advisor,
    /// The ranks of a run side by side (once a run of several is open).
    Ranks,
    /// An out-of-memory error explained (when the trace has one).
    Oom,
    /// Each GPU whole: every process on it, recorded or not (when the recording sampled it).
    Device,
}

/// How the fragmentation map's segment rows are ordered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SegmentOrder {
    /// Largest segment first.
    #[default]
    Size,
    /// Most free bytes first.
    Free,
    /// By address.
    Address,
}

/// Options that persist between runs.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    /// Recently opened files, newest first.
    pub recent: Vec<PathBuf>,
    /// Dark theme (else light).
    pub dark_mode: bool,
    /// Hide interpreter and recorder frames in stacks.
    pub hide_noise: bool,
    /// Show only Python frames in the stack tree.
    pub python_only: bool,
    /// The view shown.
    pub view: View,
    /// Order of the fragmentation map's rows.
    pub segment_order: SegmentOrder,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            recent: Vec::new(),
            dark_mode: true,
            hide_noise: true,
            python_only: false,
            view: View::Timeline,
            segment_order: SegmentOrder::Size,
        }
    }
}

/// How many recent files are kept.
pub const MAX_RECENT: usize = 10;

impl Settings {
    /// Puts `path` first among the recent files (the built-in sample is not remembered).
    pub fn remember(&mut self, path: &std::path::Path) {
        if crate::sample::is_sample(path) {
            return;
        }
        let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
        self.recent.retain(|p| p != &path);
        self.recent.insert(0, path);
        self.recent.truncate(MAX_RECENT);
    }
}
