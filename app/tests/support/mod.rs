//! What the GUI tests share: fixtures, a scripted Open dialog, a harness on the real app, and
//! waiting for it to settle.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use vramscope::gui::{FilePicker, Settings, VramscopeApp};
use vramscope_trace_format::NoProgress;

/// This package's directory, at run time: a target directory shared between clones can hold a
/// test binary built in another clone, whose compile-time path would point there.
pub fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
}

pub fn fixture(name: &str) -> PathBuf {
    manifest_dir().join("../../shared/fixtures/pytorch-snapshots").join(name)
}

/// Answers the Open dialog with fixed paths, in order, as a user would pick them.
pub struct Picks(Vec<PathBuf>);

impl FilePicker for Picks {
    fn pick(&mut self) -> Option<PathBuf> {
        (!self.0.is_empty()).then(|| self.0.remove(0))
    }

    fn pick_folder(&mut self) -> Option<PathBuf> {
        self.pick()
    }
}

pub fn harness(pick: Option<PathBuf>) -> Harness<'static, VramscopeApp> {
    harness_picking(pick.into_iter().collect())
}

pub fn harness_picking(picks: Vec<PathBuf>) -> Harness<'static, VramscopeApp> {
    let app = VramscopeApp::new(Settings::default(), Box::new(Picks(picks)));
    Harness::builder().with_size(egui::vec2(1400.0, 900.0)).build_ui_state(|ui, app: &mut VramscopeApp| app.ui(ui), app)
}

/// Steps the UI until loading and the instant's analysis are done.
pub fn settle(harness: &mut Harness<'_, VramscopeApp>) {
    let started = Instant::now();
    loop {
        harness.step();
        let app = harness.state();
        if !app.session.is_loading()
            && !app.session.is_analysing()
            && (app.session.doc.is_none() || app.session.instant.is_some())
        {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "the app did not settle within a minute");
        std::thread::sleep(Duration::from_millis(5));
    }
    harness.run_steps(3);
}

pub fn open(name: &str) -> Harness<'static, VramscopeApp> {
    let mut harness = harness(Some(fixture(name)));
    harness.get_by_label("Open a trace…").click();
    harness.run_steps(2);
    settle(&mut harness);
    assert!(harness.state().session.doc.is_some(), "not opened: {:?}", harness.state().session.errors);
    harness
}

/// The app with its built-in sample opened from the File menu.
pub fn open_sample() -> Harness<'static, VramscopeApp> {
    let mut harness = harness(None);
    harness.get_by_label("File").click();
    harness.run_steps(2);
    harness.get_by_label("Open the built-in sample").click();
    harness.run_steps(2);
    settle(&mut harness);
    harness
}

/// The fixture `name` as vramscope's own importer reads it (the trace the app shows, for the
/// consistency tests; `python_reference` is the independent one).
pub fn imported(name: &str) -> vramscope_trace_format::Trace {
    let data = std::fs::read(fixture(name)).expect("fixture");
    vramscope_trace_format::import(&data, &NoProgress).expect("import").trace
}

/// The independent reference (`scripts/reference/snapshot_reference.py`) for a snapshot's device 0.
pub fn python_reference(file: &Path) -> serde_json::Value {
    let script = manifest_dir().join("../scripts/reference/snapshot_reference.py");
    let python = std::env::var("VRAMSCOPE_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let output = std::process::Command::new(python).arg(script).arg(file).output().expect("python3");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    json["devices"][0].clone()
}

/// The app with `a` open (File > Open) and compared with `b` (Ctrl+Shift+O), and the comparison.
pub fn comparing(a: &Path, b: &Path) -> (Harness<'static, VramscopeApp>, std::sync::Arc<vramscope::query::diff::Diff>) {
    let mut harness = harness_picking(vec![a.to_path_buf(), b.to_path_buf()]);
    harness.get_by_label("Open a trace…").click();
    harness.run_steps(2);
    settle(&mut harness);
    // Ctrl+Shift+O: a second run to compare with.
    harness.key_press_modifiers(egui::Modifiers::COMMAND | egui::Modifiers::SHIFT, egui::Key::O);
    harness.run_steps(2);
    settle(&mut harness);
    let diff = harness.state().session.compare.as_ref().and_then(|c| c.diff.clone()).expect("compared");
    (harness, diff)
}
