//! Following a run while it goes (`open --follow`, `record --live`), in the real app through
//! egui_kittest: real workloads recorded by the real `vramscope record`, which wait at points the
//! test chooses, so the window's state is checked while the run is still going, then after it
//! forks, grows and dies.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use vramscope::gui::follow::{Source, Status};
use vramscope::gui::{FilePicker, Settings, VramscopeApp};
use vramscope_trace_format::NoProgress;

struct NoPicks;

impl FilePicker for NoPicks {
    fn pick(&mut self) -> Option<PathBuf> {
        None
    }

    fn pick_folder(&mut self) -> Option<PathBuf> {
        None
    }
}

fn harness() -> Harness<'static, VramscopeApp> {
    let app = VramscopeApp::new(Settings::default(), Box::new(NoPicks));
    Harness::builder().with_size(egui::vec2(1400.0, 900.0)).build_ui_state(|ui, app: &mut VramscopeApp| app.ui(ui), app)
}

/// Waits until `path` exists (the workload says it reached a point), the workload still running.
fn wait_for_file(path: &Path, child: &mut Child) {
    let started = Instant::now();
    while !path.exists() {
        if let Some(status) = child.try_wait().expect("wait") {
            let mut stderr = String::new();
            if let Some(mut pipe) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
            }
            panic!("the workload ended ({status}) before {}:\n{stderr}", path.display());
        }
        assert!(started.elapsed() < Duration::from_secs(120), "{} did not appear", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Steps the window until `done` holds of it (updates arrive about once a second).
fn step_until(harness: &mut Harness<'_, VramscopeApp>, what: &str, done: impl Fn(&VramscopeApp) -> bool) {
    let started = Instant::now();
    loop {
        harness.step();
        if done(harness.state()) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{what}: not seen within a minute; errors: {:?}; note: {:?}",
            harness.state().session.errors,
            harness.state().session.live.as_ref().and_then(|l| l.note.clone())
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    harness.run_steps(2);
}

/// Allocated bytes at the newest point of the device shown.
fn newest_allocated(app: &VramscopeApp) -> u64 {
    app.session.device().map_or(0, |d| d.timeline.values(d.timeline.last_point()).0)
}

fn is_newest_selected(app: &VramscopeApp) -> bool {
    app.session.device().is_some_and(|d| app.session.selected_point == Some(d.timeline.last_point()))
}

fn ended(app: &VramscopeApp) -> Option<Status> {
    app.session.live.as_ref().map(|l| l.status.clone()).filter(|s| *s != Status::Live)
}

fn read_trace(path: &Path) -> vramscope_trace_format::Trace {
    vramscope_trace_format::import(&std::fs::read(path).expect("trace written"), &NoProgress).expect("reads").trace
}

/// The fake driver's client allocates, forks and dies by SIGKILL while the window follows it:
/// each state is shown while the processes still run, the process chosen in the window is
/// shown, and once `record` has written the trace the window shows that file.
#[test]
fn a_recording_is_followed_through_a_fork_and_a_killed_process() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("live.vtrace");
    // An older trace at the output, recorded over with --force: never shown as this run's.
    std::fs::copy(vramscope_e2e::repo_root().join("samples/traces/h200-torch-plain.vtrace"), &out).unwrap();
    let mut record = vramscope_e2e::vramscope_command()
        .args(["record", "--force", "--torch", "off", "-o"])
        .arg(&out)
        .arg("--")
        .arg(vramscope_fake_cuda::client("client"))
        .arg("live")
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("vramscope record runs");
    wait_for_file(&dir.path().join("first.ready"), &mut record);
    // Found by the trace's name before it exists: the recording in progress that writes it.
    let source = Source::resolve(Some(&out)).expect("the recording in progress is found");
    assert!(matches!(source, Source::Recording(_)), "{source:?}");
    let mut harness = harness();
    let ctx = harness.ctx.clone();
    harness.state_mut().follow(&ctx, source);
    step_until(&mut harness, "the first MiB", |app| newest_allocated(app) == 1 << 20);
    assert!(record.try_wait().unwrap().is_none(), "checked while the workload runs");
    assert!(is_newest_selected(harness.state()), "the newest instant is selected while following");
    assert_eq!(harness.state().session.live.as_ref().unwrap().status, Status::Live);

    std::fs::write(dir.path().join("first.go"), b"").unwrap();
    wait_for_file(&dir.path().join("second.ready"), &mut record);
    // The parent (1 + 3 MiB) and its child (2 MiB): two processes, the parent shown (its peak
    // is the higher), never the two mixed.
    step_until(&mut harness, "the fork", |app| {
        app.session.processes().is_some_and(|(whole, _)| whole.metadata.processes.len() == 2)
    });
    step_until(&mut harness, "the parent's 4 MiB", |app| newest_allocated(app) == 4 << 20);
    let (child_index, child_pid) = {
        let (whole, chosen) = harness.state().session.processes().unwrap();
        let child = 1 - chosen;
        (child, whole.metadata.processes[child].pid.unwrap())
    };
    harness.state_mut().session.choose_process(&ctx, child_index);
    step_until(&mut harness, "the child's 2 MiB", |app| {
        app.session.processes().is_some_and(|(_, chosen)| chosen == child_index) && newest_allocated(app) == 2 << 20
    });
    assert_eq!(harness.state().session.doc.as_ref().unwrap().trace.metadata.processes[0].pid, Some(child_pid));
    assert!(record.try_wait().unwrap().is_none(), "checked while the workload runs");

    // The parent is killed: the recording ends, `record` writes the trace, the window shows it.
    std::fs::write(dir.path().join("second.go"), b"").unwrap();
    let status = record.wait().unwrap();
    assert_eq!(status.code(), Some(128 + 9), "the workload's death passes through");
    step_until(&mut harness, "the end of the run", |app| ended(app).is_some());
    assert_eq!(ended(harness.state()), Some(Status::Ended(Some(std::path::absolute(&out).unwrap()))));
    let written = read_trace(&out);
    let app = harness.state();
    let (whole, chosen) = app.session.processes().expect("still two processes");
    assert_eq!(chosen, child_index, "the process chosen stays chosen");
    assert_eq!(whole.events.len(), written.events.len(), "the window shows the trace written");
    assert_eq!(app.session.doc.as_ref().unwrap().path, std::path::absolute(&out).unwrap());
}

/// A real PyTorch training loop on the CPU, followed while it runs: each step keeps 8 MiB (a
/// list of tensors that grows), and the window shows them while the loop waits; zooming stops
/// following and keeps the instant chosen; End follows again; the finished trace replaces the
/// live one.
#[test]
fn a_pytorch_run_is_followed_while_it_trains() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("train.vtrace");
    let script = dir.path().join("train.py");
    std::fs::write(
        &script,
        r#"
import os, sys, time
import torch

here = sys.argv[1]

def wait(name):
    open(os.path.join(here, name + ".ready"), "w").close()
    while not os.path.exists(os.path.join(here, name + ".go")):
        time.sleep(0.02)

model = torch.nn.Linear(1024, 1024)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
kept = []
for step in range(4):
    kept.append(torch.ones(8 << 20, dtype=torch.uint8))
    x = torch.randn(64, 1024)
    model(x).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
    if step == 0:
        wait("first")
wait("second")
"#,
    )
    .unwrap();
    let mut record = vramscope_e2e::vramscope_command()
        .args(["record", "-o"])
        .arg(&out)
        .arg("--")
        .arg(vramscope_e2e::torch_python())
        .arg(&script)
        .arg(dir.path())
        // The shim writes at every optimizer step (not at most once a second), so each point
        // the script waits at is on disk.
        .env("VRAMSCOPE_TORCH_DRAIN_S", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("vramscope record runs");
    wait_for_file(&dir.path().join("first.ready"), &mut record);
    let source = Source::resolve(Some(&out)).expect("found");
    let mut harness = harness();
    let ctx = harness.ctx.clone();
    harness.state_mut().follow(&ctx, source);
    let weights = 1024 * 1024 * 4 + 1024 * 4;
    let kept_bytes = |n: u64| n * (8 << 20);
    step_until(&mut harness, "the first step", |app| newest_allocated(app) >= weights + kept_bytes(1));
    {
        let app = harness.state();
        assert!(newest_allocated(app) < weights + kept_bytes(2), "one kept tensor so far: {}", newest_allocated(app));
        assert!(is_newest_selected(app));
        let doc = app.session.doc.as_ref().unwrap();
        assert!(
            doc.trace.annotations.iter().any(|a| a.kind == vramscope_trace_format::AnnotationKind::OptimizerStep),
            "the optimizer step's span is shown while the run goes"
        );
    }
    assert!(record.try_wait().unwrap().is_none(), "checked while the workload runs");
    // Zoom into the first step: following stops, the instant chosen stays.
    let (start, end) = harness.state().session.device().unwrap().timeline.time_span_ns();
    harness.state_mut().set_visible_time(Some((start as f64, end as f64)));
    harness.run_steps(2);
    let chosen_ns = {
        let app = harness.state();
        let device = app.session.device().unwrap();
        device.timeline.time_ns(app.session.selected_point.unwrap())
    };
    assert!(!harness.state().session.follow_newest, "zoomed in: no longer following");
    std::fs::write(dir.path().join("first.go"), b"").unwrap();
    wait_for_file(&dir.path().join("second.ready"), &mut record);
    step_until(&mut harness, "four steps", |app| newest_allocated(app) >= weights + kept_bytes(4));
    {
        let app = harness.state();
        let device = app.session.device().unwrap();
        assert_eq!(device.timeline.time_ns(app.session.selected_point.unwrap()), chosen_ns, "the instant stays");
        assert!(!is_newest_selected(app));
    }
    assert!(record.try_wait().unwrap().is_none(), "checked while the workload runs");
    // End follows the newest again.
    harness.key_press(egui::Key::End);
    harness.run_steps(2);
    assert!(harness.state().session.follow_newest);
    assert!(is_newest_selected(harness.state()));
    std::fs::write(dir.path().join("second.go"), b"").unwrap();
    assert!(record.wait().unwrap().success());
    step_until(&mut harness, "the end of the run", |app| ended(app).is_some());
    let written = read_trace(&out);
    assert_eq!(harness.state().session.doc.as_ref().unwrap().trace.events.len(), written.events.len());
    // The list that keeps 8 MiB a step is memory growing every iteration: said on top.
    step_until(&mut harness, "the growth finding", |app| {
        app.session.device().and_then(|d| d.growth.as_ref()).is_some_and(|g| g.grows)
    });
    let growth = harness.state().session.device().unwrap().growth.clone().unwrap();
    assert_eq!(growth.bytes_per_iteration, 8 << 20, "{growth:?}");
    assert_eq!(growth.sites[0].site, "aten::ones");
    harness.get_by_label_contains("memory grows 8.00 MiB per iteration");
}

/// A snapshot something rewrites as it runs (`_dump_snapshot` every few steps) is read again
/// each time it changes; a version that does not read leaves the last good one shown, and says
/// so.
#[test]
fn a_file_rewritten_as_the_run_goes_is_read_again() {
    let fixtures = vramscope_e2e::fixtures_dir().join("pytorch-snapshots");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("snapshot.pickle");
    std::fs::copy(fixtures.join("mosaic_output.pickle"), &file).unwrap();
    let mut harness = harness();
    let ctx = harness.ctx.clone();
    let source = Source::resolve(Some(&file)).unwrap();
    assert_eq!(source, Source::File(file.clone()));
    harness.state_mut().follow(&ctx, source);
    let first = read_trace(&fixtures.join("mosaic_output.pickle")).events.len();
    step_until(&mut harness, "the first version", |app| {
        app.session.doc.as_ref().is_some_and(|d| d.trace.events.len() == first)
    });
    // Half a file (caught while it was written, or damaged): said, the last good one stays.
    let other = std::fs::read(fixtures.join("gpt_ctx128_fullstep_fp32.pickle")).unwrap();
    std::fs::write(&file, &other[..other.len() / 2]).unwrap();
    step_until(&mut harness, "the note", |app| app.session.live.as_ref().is_some_and(|l| l.note.is_some()));
    assert_eq!(harness.state().session.doc.as_ref().unwrap().trace.events.len(), first);
    // Rename into place, as a careful writer does.
    let partial = dir.path().join("snapshot.pickle.partial");
    std::fs::write(&partial, &other).unwrap();
    std::fs::rename(&partial, &file).unwrap();
    let second = read_trace(&fixtures.join("gpt_ctx128_fullstep_fp32.pickle")).events.len();
    assert_ne!(first, second);
    step_until(&mut harness, "the second version", |app| {
        app.session.doc.as_ref().is_some_and(|d| d.trace.events.len() == second)
    });
    assert_eq!(harness.state().session.live.as_ref().unwrap().note, None, "a version that reads clears the note");
}
