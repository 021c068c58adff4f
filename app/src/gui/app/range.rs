//! File > Open part of a trace…: a range of time or events, then the file (or the one open).

use std::path::PathBuf;

use vramscope_trace_format::TraceRange;
use vramscope_trace_format::range::RANGE_SYNTAX;

use super::VramscopeApp;

/// What the window holds while it is open.
#[derive(Default)]
pub(super) struct RangeDialog {
    /// The range as typed.
    text: String,
    /// Whether the field was given the keyboard (once, when the window opens).
    focused: bool,
}

impl RangeDialog {
    /// A window filled with `range` (the one the open trace was read at), if any.
    pub(super) fn new(range: Option<TraceRange>) -> Self {
        Self { text: range.map(|r| r.to_string()).unwrap_or_default(), focused: false }
    }
}

/// What the user asked for.
enum Choice {
    Pick(TraceRange),
    Reopen(TraceRange, PathBuf),
    Cancel,
}

/// The range, or what is wrong with it.
fn parse(text: &str) -> Result<TraceRange, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err(RANGE_SYNTAX.to_owned());
    }
    text.parse()
}

impl VramscopeApp {
    /// Opens the window, filled with the range the open trace was read at.
    pub(super) fn open_range_dialog(&mut self) {
        let current = self.session.doc.as_ref().and_then(|d| d.trace.metadata.range.as_ref()).map(|r| r.range);
        self.range_dialog = Some(RangeDialog::new(current));
    }

    pub(super) fn range_window(&mut self, ctx: &egui::Context) {
        let Some(dialog) = &mut self.range_dialog else { return };
        // The file open, when it is one file (a rank of a run is opened from the run).
        let open_file = self
            .session
            .doc
            .as_ref()
            .filter(|d| self.session.run.is_none() && !d.is_sample())
            .map(|d| (d.path.clone(), d.file_name()));
        let mut choice = None;
        let mut open = true;
        egui::Window::new("Open part of a trace").open(&mut open).collapsible(false).resizable(false).show(ctx, |ui| {
            ui.set_max_width(460.0);
            ui.label(
                "Only this part is read: what was alive when it starts is kept, so the memory shown is the whole \
                 trace's there. A snapshot is cut as it is read, so a file too large for this machine's memory \
                 opens in part.",
            );
            ui.add_space(6.0);
            let edit = ui
                .horizontal(|ui| {
                    let label = ui.label("Range");
                    ui.add(
                        egui::TextEdit::singleline(&mut dialog.text)
                            .hint_text("+2s..+3.5s   or   #1000000..#2000000")
                            .desired_width(f32::INFINITY),
                    )
                    .labelled_by(label.id)
                })
                .inner;
            if !dialog.focused {
                edit.request_focus();
                dialog.focused = true;
            }
            let parsed = parse(&dialog.text);
            match &parsed {
                Ok(range) => ui.weak(describe(*range)),
                Err(why) => ui.colored_label(ui.visuals().warn_fg_color, why),
            };
            ui.add_space(6.0);
            ui.horizontal(|ui| {
                let valid = parsed.is_ok();
                let enter = edit.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter));
                if let Some((path, name)) = &open_file {
                    let reopen = ui
                        .add_enabled(valid, egui::Button::new(format!("Open this part of {name}")))
                        .on_hover_text(path.display().to_string());
                    if let (true, Ok(range)) = (reopen.clicked() || enter, &parsed) {
                        choice = Some(Choice::Reopen(*range, path.clone()));
                    }
                }
                let pick = ui.add_enabled(valid, egui::Button::new("Choose a file…"));
                if let (true, Ok(range)) = (pick.clicked() || (enter && open_file.is_none()), &parsed) {
                    choice = Some(Choice::Pick(*range));
                }
                if ui.button("Cancel").on_hover_text("Esc").clicked() {
                    choice = Some(Choice::Cancel);
                }
            });
        });
        if !open || ctx.input(|i| i.key_pressed(egui::Key::Escape)) {
            choice = Some(Choice::Cancel);
        }
        let Some(choice) = choice else { return };
        self.range_dialog = None;
        match choice {
            Choice::Cancel => {}
            Choice::Reopen(range, path) => self.open_part(ctx, &path, range),
            Choice::Pick(range) => {
                if let Some(path) = self.picker.pick() {
                    self.open_part(ctx, &path, range);
                }
            }
        }
    }

    /// Opens `range` of `path`: the files read with it (a rank of its run, a comparison) are
    /// cut to it too, until a whole file is opened.
    pub fn open_part(&mut self, ctx: &egui::Context, path: &std::path::Path, range: TraceRange) {
        self.session.range = Some(range);
        self.start_paths(ctx, &[path.to_owned()]);
    }
}

/// The range in words, under the field.
fn describe(range: TraceRange) -> String {
    let time = |ns: i64| crate::units::duration_ns(ns);
    match range {
        TraceRange::Time { from_ns, to_ns } => match (from_ns, to_ns) {
            (Some(a), Some(b)) => format!("from {} to {} after the trace's first event", time(a), time(b)),
            (Some(a), None) => format!("from {} after the trace's first event to its end", time(a)),
            (None, Some(b)) => format!("the first {} of the trace", time(b)),
            (None, None) => "the whole trace".to_owned(),
        },
        TraceRange::Events { from, to } => {
            let n = |i: u64| crate::units::count(i as usize);
            match (from, to) {
                (Some(a), Some(b)) => format!("events {} to {} (from 0), {} events", n(a), n(b - 1), n(b - a)),
                (Some(a), None) => format!("from event {} (from 0) to the end", n(a)),
                (None, Some(b)) => format!("the first {} events", n(b)),
                (None, None) => "the whole trace".to_owned(),
            }
        }
    }
}
