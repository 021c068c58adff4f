//! The views of an open trace, in one table: each entry gives the view's label (tabs, the View
//! menu), its key (shortcuts, the help), its name on the command line (`--view`), what it
//! shows, how much of the window the timeline above it takes, whether it needs a second run or
//! the selected instant's analysis, and the function that draws it (the window's dispatch).
//! A new view is a variant, a row here, and the file that draws it.

use super::advisor_view::{self, AdvisorState};
use super::breakdown_view::{self, BreakdownState};
use super::compare_view::{self, CompareState};
pub use super::context::Open;
use super::context::{Command, ViewCtx};
use super::device_view::{self, DeviceState};
use super::fragmentation_view;
use super::oom_view::{self, OomState};
pub use super::settings::View;
use super::widgets::timeline::TimelineState;
use super::{ranks_view, timeline_view};

/// What a view needs open besides the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needs {
    /// Nothing more.
    Nothing,
    /// A second run, to compare with.
    SecondRun,
    /// A run of several ranks.
    Run,
    /// A trace with an out-of-memory error.
    Oom,
    /// A recording that sampled each whole device.
    Device,
}

/// A view's entry in the table.
#[derive(Clone, Copy, Debug)]
pub struct ViewInfo {
    /// The view.
    pub view: View,
    /// Its name in tabs and menus.
    pub label: &'static str,
    /// The key that shows it.
    pub key: egui::Key,
    /// The key as the menus and the help print it.
    pub key_label: &'static str,
    /// Its name for `--view`.
    pub cli_name: &'static str,
    /// What it shows, for `--help` and the help window.
    pub about: &'static str,
    /// The share of the window's height the timeline above it takes (`None`: the view draws
    /// its own timelines).
    pub timeline_share: Option<f32>,
    /// What it needs open besides the trace (its tab shows only then).
    pub needs: Needs,
    /// Whether it shows the selected instant's analysis (a spinner stands in until it is ready).
    pub needs_instant: bool,
    /// Draws it below the timeline, from what is open and its own state, asking for what the
    /// user does.
    pub draw: fn(&mut egui::Ui, &ViewCtx<'_>, &mut ViewStates, &mut Vec<Command>),
}

/// Each view's own state (zoom, scroll, picks), kept while another view is shown.
#[derive(Default)]
pub struct ViewStates {
    /// The timeline's zoom and pan.
    pub timeline: TimelineState,
    /// The peak breakdown's pick.
    pub breakdown: BreakdownState,
    /// The advice shown and the one being worked out.
    pub advisor: AdvisorState,
    /// The compare view's zoom, pan, alignment and grouping.
    pub compare: CompareState,
    /// The OOM explained, and the one being worked out.
    pub oom: OomState,
    /// The devices whole, and those being worked out.
    pub device: DeviceState,
}

/// Every view, in the order of their tabs (the ranks first and compare last: their tabs show once
/// a run of several ranks, or a second run, is open).
pub const VIEWS: [ViewInfo; 8] = [
    ViewInfo {
        view: View::Ranks,
        label: "Ranks",
        key: egui::Key::Num6,
        key_label: "6",
        cli_name: "ranks",
        about: "a run's ranks side by side: each one's peak, how they differ, a timeline each (open a directory or \
                several rank files, or a recording of several ranks)",
        timeline_share: None,
        needs: Needs::Run,
        needs_instant: false,
        draw: |ui, ctx, _, out| ranks_view::view_ui(ui, ctx, out),
    },
    ViewInfo {
        view: View::Timeline,
        label: "Timeline",
        key: egui::Key::Num1,
        key_label: "1",
        cli_name: "timeline",
        about: "memory over time by category",
        timeline_share: Some(0.62),
        needs: Needs::Nothing,
        needs_instant: true,
        draw: |ui, ctx, _, _| timeline_view::summary_ui(ui, ctx),
    },
    ViewInfo {
        view: View::Peak,
        label: "Peak breakdown",
        key: egui::Key::Num2,
        key_label: "2",
        cli_name: "peak",
        about: "what was alive at the selected instant, by category, stack and allocation",
        timeline_share: Some(0.34),
        needs: Needs::Nothing,
        needs_instant: true,
        draw: |ui, ctx, states, out| breakdown_view::view_ui(ui, ctx, &mut states.breakdown, out),
    },
    ViewInfo {
        view: View::Fragmentation,
        label: "Fragmentation",
        key: egui::Key::Num3,
        key_label: "3",
        cli_name: "fragmentation",
        about: "the allocator's segments at the selected instant",
        timeline_share: Some(0.34),
        needs: Needs::Nothing,
        needs_instant: true,
        draw: |ui, ctx, _, out| fragmentation_view::view_ui(ui, ctx, out),
    },
    ViewInfo {
        view: View::Advisor,
        label: "Advisor",
        key: egui::Key::Num5,
        key_label: "5",
        cli_name: "advisor",
        about: "what each remedy would do to the peak",
        timeline_share: Some(0.34),
        needs: Needs::Nothing,
        needs_instant: false,
        draw: |ui, ctx, states, _| advisor_view::view_ui(ui, ctx, &mut states.advisor),
    },
    ViewInfo {
        view: View::Oom,
        label: "Out of memory",
        key: egui::Key::Num7,
        key_label: "7",
        cli_name: "oom",
        about: "the run's out-of-memory error explained: the request, what was free, what was alive, what would \
                have fitted (when the trace has one)",
        timeline_share: Some(0.34),
        needs: Needs::Oom,
        needs_instant: false,
        draw: |ui, ctx, states, out| oom_view::view_ui(ui, ctx, &mut states.oom, out),
    },
    ViewInfo {
        view: View::Device,
        label: "Whole GPU",
        key: egui::Key::Num8,
        key_label: "8",
        cli_name: "device",
        about: "each GPU whole: every process that held memory on it, recorded or not, stacked over time against \
                its capacity, what each was made of at the device's high point, and the turns they took (a \
                recording that sampled the driver)",
        timeline_share: None,
        needs: Needs::Device,
        needs_instant: false,
        draw: |ui, ctx, states, out| device_view::view_ui(ui, ctx, &mut states.device, out),
    },
    ViewInfo {
        view: View::Compare,
        label: "Compare",
        key: egui::Key::Num4,
        key_label: "4",
        cli_name: "compare",
        about: "two runs side by side (with `compare`, or File > Compare with…)",
        timeline_share: None,
        needs: Needs::SecondRun,
        needs_instant: false,
        draw: |ui, ctx, states, out| compare_view::view_ui(ui, ctx, &mut states.compare, out),
    },
];

impl View {
    /// Its row of [`VIEWS`].
    pub fn info(self) -> &'static ViewInfo {
        // Every view has a row: the table is built from the enum above.
        VIEWS.iter().find(|v| v.view == self).unwrap_or(&VIEWS[0])
    }

    /// Its name in menus and tabs.
    pub fn label(self) -> &'static str {
        self.info().label
    }

    /// The views that can be shown now (compare only with a second run open, the ranks only
    /// with a run of several, the OOM only with one).
    pub fn available(open: Open) -> impl Iterator<Item = &'static ViewInfo> {
        VIEWS.iter().filter(move |v| match v.needs {
            Needs::Nothing => true,
            Needs::SecondRun => open.second_run,
            Needs::Run => open.run,
            Needs::Oom => open.oom,
            Needs::Device => open.device_whole,
        })
    }

    /// Whether it can be shown now.
    pub fn is_available(self, open: Open) -> bool {
        Self::available(open).any(|v| v.view == self)
    }
}

/// The views in the table's order, for `--view`.
const VIEW_ORDER: [View; VIEWS.len()] = {
    let mut order = [View::Timeline; VIEWS.len()];
    let mut i = 0;
    while i < VIEWS.len() {
        order[i] = VIEWS[i].view;
        i += 1;
    }
    order
};

impl clap::ValueEnum for View {
    fn value_variants<'a>() -> &'a [Self] {
        &VIEW_ORDER
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        let info = self.info();
        Some(clap::builder::PossibleValue::new(info.cli_name).help(info.about))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_view_has_one_row_and_its_own_key_and_name() {
        // Exhaustive: a new variant does not compile here until it is listed, and then needs a row.
        let every = |view: View| match view {
            View::Timeline
            | View::Peak
            | View::Fragmentation
            | View::Advisor
            | View::Compare
            | View::Ranks
            | View::Oom
            | View::Device => view,
        };
        let all = [
            View::Timeline,
            View::Peak,
            View::Fragmentation,
            View::Advisor,
            View::Compare,
            View::Ranks,
            View::Oom,
            View::Device,
        ];
        for view in all.map(every) {
            assert_eq!(VIEWS.iter().filter(|v| v.view == view).count(), 1, "{view:?}");
        }
        let mut keys: Vec<&str> = VIEWS.iter().map(|v| v.key_label).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), VIEWS.len());
        let mut names: Vec<&str> = VIEWS.iter().map(|v| v.cli_name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), VIEWS.len());
    }
}
