//! What a view draws from ([`ViewCtx`], read-only) and what it may ask the window to do
//! ([`Command`]). Views, the chrome, the shortcuts and the menus all ask the same way: they push
//! commands, and the window applies them once per frame, after drawing.

use super::compare::Compare;
use super::document::{DeviceData, Document};
use super::ranks::RunState;
use super::settings::{SegmentOrder, Settings, View};
use super::worker::InstantView;

/// What is open, for the views that need more than a trace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Open {
    /// A second run, compared with the first.
    pub second_run: bool,
    /// A run of several ranks.
    pub run: bool,
    /// A trace with an out-of-memory error.
    pub oom: bool,
    /// A recording that sampled the driver's account of each whole device.
    pub device_whole: bool,
}

/// What a view draws from. Its own state (zoom, picks, jobs) is passed beside it.
pub struct ViewCtx<'a> {
    /// The open trace.
    pub doc: &'a Document,
    /// Index of the device shown.
    pub device_index: usize,
    /// The device shown.
    pub device: &'a DeviceData,
    /// The selected timeline point.
    pub selected_point: Option<crate::query::timeline::Point>,
    /// The selected instant's analysis, when ready.
    pub instant: Option<&'a InstantView>,
    /// The second run, when comparing.
    pub compare: Option<&'a Compare>,
    /// The run of several ranks open, if one is.
    pub run: Option<&'a RunState>,
    /// The persisted options.
    pub settings: &'a Settings,
    /// The whole recording, when the document shows one of its several processes.
    pub whole: Option<&'a std::sync::Arc<vramscope_trace_format::Trace>>,
}

/// Something the user asked for, from a view, a menu, a button or a key.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Command {
    /// Select this timeline point of the open document (it drives the other views).
    Select(crate::query::timeline::Point),
    /// Move the selection by this many events.
    Step(i64),
    /// Select the allocated peak of the device shown.
    JumpToPeak,
    /// Show this device of the document (by index).
    Device(usize),
    /// Show this process of a recording of several (by index).
    Process(usize),
    /// Open this rank of the run as the document.
    OpenRank(u32),
    /// Show this view.
    Show(View),
    /// Hide (or show) interpreter and recorder frames in stacks.
    HideNoise(bool),
    /// Show only Python frames in the stack tree (or every frame).
    PythonOnly(bool),
    /// Order the fragmentation map's rows so.
    SegmentOrder(SegmentOrder),
    /// The dark (or light) theme.
    DarkMode(bool),
    /// Switch between the dark and the light theme.
    ToggleTheme,
    /// Hide or show interpreter frames, whichever is not the case.
    ToggleNoise,
    /// Show the whole trace in the timeline.
    ResetZoom,
    /// Zoom the timeline by this factor (>1 zooms in) around the selection.
    Zoom(f64),
    /// A run followed live: show all of it and keep to its newest instant.
    FollowNewest,
    /// Ask for a trace to open.
    OpenDialog,
    /// Ask for a run's folder to open.
    OpenFolderDialog,
    /// Ask for a second run to compare with.
    CompareDialog,
    /// Ask for a part of a trace to open.
    OpenRangeDialog,
    /// Close the trace.
    Close,
    /// Close the window.
    Quit,
    /// Cancel what is loading, close the help.
    Escape,
    /// Show or hide the keyboard shortcuts.
    ToggleHelp,
    /// Show the keyboard shortcuts.
    ShowHelp,
}
