//! Interaction tests of the desktop app through AccessKit (egui_kittest): open a real fixture,
//! jump to the peak, select an instant, switch views; what the window shows must equal what
//! the analysis computes on its own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use egui_kittest::kittest::Queryable;
use vramscope::query::{peak, replay, segments, summary};
use vramscope::units;
use vramscope_trace_format::{Category, DeviceId, NoProgress, SourceFormat};

use self::support::*;

/// Consistency test (the window shows what `info` computes), with the numbers also checked
/// against the independent reference.
#[test]
fn opening_a_snapshot_shows_its_peak_and_categories() {
    let name = "gpt_ctx128_fullstep_fp32.pickle";
    let harness = open(name);
    let trace = imported(name);
    let expected = summary::device_summary(&trace, DeviceId(0));
    let theirs = python_reference(&fixture(name));
    assert_eq!(theirs["peak_allocated_bytes"].as_u64(), Some(expected.peak_allocated_bytes));
    let categories: std::collections::BTreeMap<String, u64> =
        expected.categories_at_peak.iter().map(|(c, v)| (c.name().to_owned(), *v)).collect();
    assert_eq!(serde_json::to_value(&categories).ok().as_ref(), Some(&theirs["categories_at_peak"]));
    // The toolbar's readout and the button name the peak that `info` computes.
    let peak = units::bytes(expected.peak_allocated_bytes);
    harness.get_by_label(&format!("Jump to peak ({peak})"));
    harness.get_by_label_contains(&format!("peak: {peak} allocated"));
    // The breakdown at the peak is what `info --json` reports, category by category.
    let app = harness.state();
    let view = app.session.instant.as_ref().expect("analysed");
    let shown: std::collections::BTreeMap<Category, u64> =
        view.instant.by_category.iter().map(|(c, v)| (*c, *v)).collect();
    assert_eq!(shown, expected.categories_at_peak);
    assert_eq!(view.instant.blocks.len(), expected.live_blocks_at_peak);
    // Every live byte is under some source line; the lines of the model's optimizer hold
    // exactly its optimizer state.
    assert_eq!(view.by_site.iter().map(|s| s.bytes).sum::<u64>(), expected.peak_allocated_bytes);
    let in_optimizer: u64 = view.by_site.iter().filter(|s| s.site.contains("optimizers.py")).map(|s| s.bytes).sum();
    assert_eq!(Some(&in_optimizer), expected.categories_at_peak.get(&Category::OptimizerState));
    for bytes in expected.categories_at_peak.values() {
        assert!(!harness.query_all_by_label(&units::bytes(*bytes)).collect::<Vec<_>>().is_empty(), "{bytes} not shown");
    }
}

/// A file opened shows its timeline's curves first, saying its categories are being worked
/// out, and the categories once they are: the same, at every point, as a timeline built whole.
#[test]
fn the_timeline_is_drawn_first_and_its_categories_follow() {
    const PENDING: &str = "allocated: categories being worked out…";
    let name = "gpt_ctx128_fullstep_fp32.pickle";
    let mut harness = harness(Some(fixture(name)));
    harness.get_by_label("Open a trace…").click();
    let started = Instant::now();
    while harness.state().session.doc.is_none() {
        harness.step();
        assert!(started.elapsed() < Duration::from_secs(60), "not opened: {:?}", harness.state().session.errors);
        std::thread::sleep(Duration::from_millis(2));
    }
    // The frame that first shows the document: its curves, and the categories to come.
    assert!(harness.state().session.working_out_categories());
    assert!(!harness.state().session.device().unwrap().timeline.has_categories());
    harness.get_by_label(PENDING);
    settle(&mut harness);
    assert!(!harness.state().session.working_out_categories());
    assert!(harness.query_by_label(PENDING).is_none(), "still said once the categories are there");
    let trace = imported(name);
    let whole = vramscope::query::timeline::Timeline::build(&trace, DeviceId(0));
    let shown = &harness.state().session.device().unwrap().timeline;
    assert!(shown.has_categories());
    assert_eq!(shown.len(), whole.len());
    let mut with_bytes = 0;
    for i in 0..whole.len() {
        let p = vramscope::query::timeline::Point(i);
        assert_eq!(shown.categories(p), whole.categories(p), "categories at point {i}");
        with_bytes += usize::from(whole.categories(p).iter().filter(|&&b| b > 0).count() > 1);
    }
    assert!(with_bytes > 0, "no point holds two categories");
}

#[test]
fn clicking_the_timeline_selects_an_instant_that_drives_the_views() {
    let name = "gpt_ctx128_forward_mixed.pickle";
    let mut harness = open(name);
    let trace = imported(name);
    let points = replay::timeline(&trace, DeviceId(0));
    let peak_point = harness.state().session.selected_point.expect("the peak is selected on open");
    let rect = harness.get_by_label("Memory timeline").rect();
    // A third of the way in: somewhere other than the peak.
    harness.hover_at(egui::pos2(rect.left() + rect.width() / 3.0, rect.center().y));
    harness.run_steps(1);
    harness.get_by_label("Memory timeline").click();
    settle(&mut harness);
    let point = harness.state().session.selected_point.expect("selected");
    assert_ne!(point, peak_point);
    let allocated = points[point.0].allocated_bytes;
    harness.get_by_label_contains(&format!("selected: {} allocated", units::bytes(allocated)));
    // The breakdown is of that instant: its blocks add up to the replay's allocated bytes.
    let view = harness.state().session.instant.clone().expect("analysed");
    assert_eq!(view.request.point, point);
    assert_eq!(view.instant.blocks.iter().map(|b| b.block.size_bytes).sum::<u64>(), allocated);
    assert_eq!(view.instant.by_category.values().sum::<u64>(), allocated);
    let live = peak::live_at(&trace, DeviceId(0), view.request.event);
    assert_eq!(live.len(), view.instant.blocks.len());

    // P goes back to the peak.
    harness.key_press(egui::Key::P);
    settle(&mut harness);
    assert_eq!(harness.state().session.selected_point, Some(peak_point));
}

#[test]
fn the_fragmentation_map_at_the_end_equals_the_snapshot_segments() {
    let name = "gpt_ctx128_forward_fp32.pickle";
    let mut harness = open(name);
    harness.get_by_label("Fragmentation").click();
    harness.run_steps(2);
    // Scrub to the last event.
    let last = harness.state().session.doc.as_ref().map(|d| d.devices[0].timeline.last_point()).expect("doc");
    harness.state_mut().select(last);
    settle(&mut harness);
    let trace = imported(name);
    let expected = segments::final_state(&trace, DeviceId(0)).expect("segments");
    let view = harness.state().session.instant.clone().expect("analysed");
    assert_eq!(view.instant.segments.len(), expected.segments);
    assert_eq!(view.instant.total.reserved_bytes, expected.total.reserved_bytes);
    assert_eq!(view.instant.total.allocated_bytes, expected.total.allocated_bytes);
    assert_eq!(view.instant.total.requested_bytes, expected.total.requested_bytes);
    harness.get_by_label(&units::count(expected.segments));
    harness.get_by_label(&units::bytes(expected.total.reserved_bytes));
}

#[test]
fn a_bad_file_shows_an_error_naming_it_and_the_app_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("broken.pickle");
    std::fs::write(&bad, b"\x80\x04\x95garbage that is not a snapshot").expect("write");
    let mut harness = harness(Some(bad.clone()));
    harness.get_by_label("Open a trace…").click();
    harness.run_steps(2);
    settle(&mut harness);
    assert!(harness.state().session.doc.is_none());
    let error = harness.state().session.errors.first().cloned().expect("an error is shown");
    assert!(error.contains("broken.pickle"), "{error}");
    harness.get_by_label_contains("broken.pickle");
    // Dismissed with its button; the welcome screen is still there.
    harness.get_by_label("Dismiss").click();
    harness.run_steps(2);
    assert!(harness.state().session.errors.is_empty());
    harness.get_by_label("Open a trace…");
}

#[test]
fn help_overlay_lists_the_shortcuts() {
    let mut harness = harness(None);
    harness.key_press(egui::Key::F1);
    harness.run_steps(2);
    harness.get_by_label("Keyboard shortcuts");
    harness.get_by_label("jump to the peak");
}

#[test]
fn the_memory_timeline_keeps_its_categories_in_the_breakdown() {
    let path = manifest_dir().join("../../shared/fixtures/torch-profiler/mlp_adam_cpu.memory_timeline.json");
    let mut harness = harness(Some(path.clone()));
    harness.get_by_label("Open a trace…").click();
    harness.run_steps(2);
    settle(&mut harness);
    let loaded = vramscope::load::load_with(&path, &NoProgress).expect("load");
    assert_eq!(loaded.format, SourceFormat::MemoryTimeline);
    let expected = summary::device_summary(&loaded.trace, DeviceId(0));
    let view = harness.state().session.instant.clone().expect("analysed");
    let shown: std::collections::BTreeMap<Category, u64> =
        view.instant.by_category.iter().map(|(c, v)| (*c, *v)).collect();
    assert_eq!(shown, expected.categories_at_peak);
}

/// A file dropped on the window, as the windowing integration hands it over.
#[derive(Debug)]
struct Dropped(PathBuf);

impl egui::DroppedFile for Dropped {
    fn path(&self) -> &Path {
        &self.0
    }

    fn bytes(&self) -> Result<Vec<u8>, String> {
        std::fs::read(&self.0).map_err(|e| e.to_string())
    }
}

#[test]
fn a_dropped_file_opens_and_becomes_a_recent_file() {
    let mut harness = harness(None);
    let path = fixture("stanford_cs336_a2_memory_snapshot.pickle");
    harness.input_mut().dropped_files.push(std::sync::Arc::new(Dropped(path.clone())));
    harness.step();
    settle(&mut harness);
    let doc = harness.state().session.doc.as_ref().expect("opened by dropping it");
    assert_eq!(doc.file_name(), "stanford_cs336_a2_memory_snapshot.pickle");
    let canonical = std::fs::canonicalize(&path).expect("canonical");
    assert_eq!(harness.state().settings.recent.first(), Some(&canonical));
    // Closed with Ctrl+W: the welcome screen lists it, and a click opens it again.
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::W);
    harness.run_steps(2);
    assert!(harness.state().session.doc.is_none());
    harness.get_by_label(&canonical.display().to_string()).click();
    harness.run_steps(2);
    settle(&mut harness);
    assert!(harness.state().session.doc.is_some());
}

#[test]
fn escape_cancels_a_load_without_an_error() {
    // A snapshot large enough that its load is still running a frame later (the fixtures load in
    // a few milliseconds, which let the load finish before the key was read, now and then).
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.pickle");
    let python = std::env::var("VRAMSCOPE_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let made = std::process::Command::new(python)
        .arg(manifest_dir().join("../scripts/gen_snapshot.py"))
        .args(["--entries", "300000", "--out"])
        .arg(&big)
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let mut harness = harness(Some(big));
    harness.get_by_label("Open a trace…").click();
    harness.step();
    assert!(harness.state().session.is_loading());
    harness.key_press(egui::Key::Escape);
    settle(&mut harness);
    assert!(harness.state().session.doc.is_none(), "a cancelled load is not shown");
    assert!(harness.state().session.errors.is_empty(), "{:?}", harness.state().session.errors);
}

#[test]
fn zoom_keys_and_reset_change_the_visible_time() {
    let mut harness = open("gpt_ctx128_forward_mixed.pickle");
    // A click in the middle of the timeline selects what is shown there: + zooms in around
    // the selection (the peak), R shows everything again.
    harness.key_press(egui::Key::Plus);
    harness.run_steps(2);
    harness.get_by_label("Memory timeline").click();
    settle(&mut harness);
    let zoomed = harness.state().session.selected_point;
    harness.key_press(egui::Key::R);
    harness.run_steps(2);
    harness.get_by_label("Memory timeline").click();
    settle(&mut harness);
    let reset = harness.state().session.selected_point;
    assert_ne!(zoomed, reset, "zooming in changes what a click at the same place selects");
    // Reset really shows everything: the same click selects what it did before any zoom.
    let mut fresh = open("gpt_ctx128_forward_mixed.pickle");
    fresh.get_by_label("Memory timeline").click();
    settle(&mut fresh);
    assert_eq!(fresh.state().session.selected_point, reset);
}

#[test]
fn the_built_in_sample_opens_from_the_file_menu_with_its_tags() {
    let mut harness = open_sample();
    let app = harness.state();
    let doc = app.session.doc.as_ref().expect("the sample is open");
    assert!(doc.is_sample());
    // It is not a file: it never joins the recent files.
    assert!(app.settings.recent.is_empty());
    let trace = vramscope_trace_format::import(vramscope::sample::BYTES, &NoProgress).expect("import").trace;
    let expected = summary::device_summary(&trace, DeviceId(0));
    // The GPU is the device shown, at its peak, with the recorder's categories.
    let peak = units::bytes(expected.peak_allocated_bytes);
    harness.get_by_label(&format!("Jump to peak ({peak})"));
    assert!(expected.categories_at_peak.contains_key(&Category::OptimizerState));
    harness.get_by_label_contains("This is a built-in sample");
    // The peak breakdown names the tensors by the recorder's tags.
    harness.get_by_label("Peak breakdown").click();
    harness.run_steps(3);
    harness.get_by_label("tok_emb.weight.exp_avg");
}

/// The 2-rank DDP recording, and the events of each of its processes.
#[test]
fn the_advisor_lists_the_remedies_with_the_cli_numbers() {
    let mut harness = open_sample();
    harness.get_by_label("Advisor").click();
    let trace = vramscope_trace_format::import(vramscope::sample::BYTES, &NoProgress).expect("import").trace;
    let advice = vramscope::query::advisor::advise(&trace, Some(DeviceId(0)), None, None).expect("advice");
    let checkpointing = advice.remedies.iter().find(|r| r.id == "activation_checkpointing").expect("remedy");
    let started = Instant::now();
    // The advice is worked out on its own thread; the table names remedies in words.
    while harness.query_by_label("activation checkpointing").is_none() {
        assert!(started.elapsed() < Duration::from_secs(60), "no advice within a minute");
        harness.step();
        std::thread::sleep(Duration::from_millis(5));
    }
    harness.run_steps(2);
    harness.get_all_by_label(&units::bytes(checkpointing.projected_peak_allocated_bytes)).next().expect("its peak");
    harness.get_by_label("The baseline fits already.");
}

/// Writes a snapshot with Python's pickle (standard library), as PyTorch shapes one.
fn write_snapshot(dir: &Path, name: &str, code: &str) -> PathBuf {
    let path = dir.join(name);
    let status = std::process::Command::new("python3")
        .arg("-c")
        .arg(format!("import pickle, sys\nMB = 1 << 20\n{code}\npickle.dump(snap, open(sys.argv[1], 'wb'))"))
        .arg(&path)
        .status()
        .expect("python3 runs");
    assert!(status.success());
    path
}

/// A snapshot whose device 0 has no history and whose device 1 ran out of memory: the app opens
/// on device 1 (where the question is), says that device 0 has no history, and the details of a
/// block show the metadata PyTorch attached to its allocation.
#[test]
fn the_device_that_ran_out_of_memory_comes_first_and_caveats_show() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_snapshot(
        dir.path(),
        "oom_on_one.pickle",
        r#"
fr = [{'name': 'forward', 'filename': '/src/model.py', 'line': 3}]
def seg(dev, addr, size, used):
    return {'device': dev, 'address': addr, 'total_size': size, 'stream': 0, 'segment_type': 'large',
            'segment_pool_id': (0, 0), 'is_expandable': False, 'frames': [],
            'blocks': [{'address': addr, 'size': used, 'requested_size': used, 'state': 'active_allocated', 'frames': fr},
                       {'address': addr + used, 'size': size - used, 'requested_size': 0, 'state': 'inactive', 'frames': []}]}
e = lambda action, addr, size, t, **kw: dict({'action': action, 'addr': addr, 'size': size, 'stream': 0, 'time_us': t,
                                              'user_metadata': 'step=4', 'frames': fr}, **kw)
snap = {'segments': [seg(0, 1 << 40, 64 * MB, 60 * MB), seg(1, 2 << 40, 20 * MB, 4 * MB)],
        'device_traces': [[], [e('alloc', 2 << 40, 4 * MB, 10), e('oom', 0, 1 << 30, 20, device_free=MB)]]}
"#,
    );
    let mut harness = harness(Some(path));
    harness.get_by_label("Open a trace…").click();
    harness.run_steps(2);
    settle(&mut harness);
    let app = harness.state();
    let doc = app.session.doc.as_ref().expect("opened");
    // Device 0 holds far more, but device 1 is the one that ran out of memory.
    assert_eq!(doc.devices[app.session.device_index].device, DeviceId(1));
    // The toolbar shows device 1's peak (4 MiB), not device 0's 60 MiB.
    harness.get_by_label(&format!("Jump to peak ({})", units::bytes(4 << 20)));
    harness.get_by_label_contains("cuda:0 recorded no allocation history");
    let view = app.session.instant.as_ref().expect("analysed");
    assert_eq!(view.instant.by_metadata.len(), 1);
    let block = view.instant.blocks.first().expect("a block");
    let trace = &doc.trace;
    assert_eq!(vramscope::words::context_lines(trace, &block.block), ["user metadata: step=4"]);
}

/// File > Open part of a trace…: a bad range is said and nothing opens; a good one opens that
/// part of the file chosen, shows what the CLI's `--range` shows, and says it is a part; the
/// same window then opens another part of the file open.
#[test]
fn a_part_of_a_trace_opens_from_the_file_menu() {
    let name = "gpt_ctx128_fullstep_fp32.pickle";
    let mut harness = harness(Some(fixture(name)));
    harness.get_by_label("File").click();
    harness.run_steps(2);
    harness.get_by_label("Open part of a trace…").click();
    harness.run_steps(2);
    harness.get_by_role_and_label(egui::accesskit::Role::TextInput, "Range").type_text("#9..#3");
    harness.run_steps(2);
    harness.get_by_label_contains("ends before it starts");
    assert!(harness.state().session.doc.is_none());
    // Replace the text with a good range.
    for _ in 0..6 {
        harness.key_press(egui::Key::Backspace);
    }
    harness.get_by_role_and_label(egui::accesskit::Role::TextInput, "Range").type_text("#5000..#6000");
    harness.run_steps(2);
    harness.get_by_label_contains("events 5,000 to 5,999 (from 0), 1,000 events");
    harness.get_by_label("Choose a file…").click();
    harness.run_steps(2);
    settle(&mut harness);
    let range: vramscope_trace_format::TraceRange = "#5000..#6000".parse().expect("range");
    let data = std::fs::read(fixture(name)).expect("fixture");
    let part = vramscope_trace_format::import_range(&data, &NoProgress, Some(range)).expect("import").trace;
    let expected = summary::device_summary(&part, DeviceId(0));
    {
        let app = harness.state();
        let doc = app.session.doc.as_ref().expect("opened");
        assert_eq!(doc.trace.metadata.range.as_ref().map(|r| r.range), Some(range));
        assert_eq!(doc.trace.events.len(), part.events.len());
    }
    harness.get_by_label(&format!("Jump to peak ({})", units::bytes(expected.peak_allocated_bytes)));
    harness.get_by_label_contains("Only #5000..#6000 of the file is open");
    // Another part of the file open, from the same window (filled with the range open).
    harness.get_by_label("File").click();
    harness.run_steps(2);
    harness.get_by_label("Open part of a trace…").click();
    harness.run_steps(2);
    harness.get_by_role_and_label(egui::accesskit::Role::TextInput, "Range").focus();
    for _ in 0.."#5000..#6000".len() {
        harness.key_press(egui::Key::Backspace);
    }
    harness.get_by_role_and_label(egui::accesskit::Role::TextInput, "Range").type_text("+100ms..");
    harness.run_steps(2);
    harness.get_by_label(&format!("Open this part of {name}")).click();
    harness.run_steps(2);
    settle(&mut harness);
    let app = harness.state();
    let doc = app.session.doc.as_ref().expect("opened");
    assert_eq!(doc.trace.metadata.range.as_ref().map(|r| r.range), Some("+100ms..".parse().expect("range")));
}

/// A run that ran out of memory (recorded on the fake driver, which refuses 2 GiB): the banner
/// says so on every view, its link opens the Out of memory view, which explains the error as
/// `info --oom` does.
#[test]
fn an_oom_is_said_and_explained_on_one_screen() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("oom.vtrace");
    let status = vramscope_e2e::vramscope_command()
        .args(["record", "--torch", "off", "-o"])
        .arg(&out)
        .arg("--")
        .arg(vramscope_fake_cuda::client("client"))
        .arg("direct")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let mut harness = harness(Some(out.clone()));
    harness.get_by_label("Open a trace…").click();
    harness.run_steps(2);
    settle(&mut harness);
    harness.get_by_label_contains("tried to allocate 2.00 GiB.");
    harness.get_by_label("Why, and what would have fitted (7)").click();
    harness.run_steps(2);
    assert_eq!(harness.state().settings.view, vramscope::gui::View::Oom);
    let started = Instant::now();
    while harness.query_by_label_contains("Working out what failed").is_some() {
        assert!(started.elapsed() < Duration::from_secs(60));
        harness.step();
        std::thread::sleep(Duration::from_millis(5));
    }
    harness.run_steps(2);
    harness.get_by_label("tried to allocate 2.00 GiB");
    harness.get_by_label_contains("the allocator held nothing free");
    harness.get_by_label_contains("what would have fitted cannot be said");
    harness.get_by_label("Select that instant").click();
    harness.run_steps(2);
    settle(&mut harness);
    let app = harness.state();
    let device = app.session.device().unwrap();
    let oom = &app.session.doc.as_ref().unwrap().trace.ooms[0];
    assert_eq!(app.session.selected_point, Some(device.timeline.point_at(oom.time_ns)));
}

/// A recording with a stretch its shim did not see: the note above the timeline says how long
/// and why, and the pointer over the stretch says it was not recorded there (the hatched band
/// itself is painted, checked in the screenshots).
#[test]
fn a_stretch_not_recorded_is_said_above_the_timeline_and_under_the_pointer() {
    use vramscope_trace_format::{Event, EventKind, ProcessInfo, Trace, Unrecorded};
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("gap.vtrace");
    let mut trace = Trace::default();
    trace.metadata.processes = vec![ProcessInfo { pid: Some(4242), ..ProcessInfo::default() }];
    // 1 MiB more every 100 ms for a second, on the host; nothing seen from 400 to 600 ms.
    for i in 0..10_i64 {
        trace.events.push(Event::new(
            EventKind::SegmentAlloc,
            i * 100_000_000,
            -1,
            0x1000_0000 * (i as u64 + 1),
            1 << 20,
        ));
        trace.events.push(Event::new(EventKind::Alloc, i * 100_000_000, -1, 0x1000_0000 * (i as u64 + 1), 1 << 20));
    }
    trace.metadata.unrecorded.push(Unrecorded {
        process: 0,
        device: DeviceId::HOST,
        begin_ns: 400_000_000,
        end_ns: 600_000_000,
        why: "own_profiler".to_owned(),
        detail: String::new(),
    });
    vramscope_trace_format::vtrace::write(&trace, std::fs::File::create(&path).expect("file")).expect("written");
    let mut harness = harness(Some(path));
    harness.get_by_label("Open a trace…").click();
    harness.run_steps(2);
    settle(&mut harness);
    harness.get_by_label_contains(
        "CPU tensor allocations of process 4242 were not recorded for 200.000 ms from 0.400 s: the program ran its \
         own PyTorch profiler",
    );
    let rect = harness.get_by_label("Memory timeline").rect();
    // The visible span is the trace's, 0 to 900 ms: 500 ms is inside the stretch, 200 ms is not.
    let at = |ms: f32| egui::pos2(rect.left() + rect.width() * ms / 900.0, rect.center().y);
    harness.hover_at(at(500.0));
    // A tooltip shows once the pointer has rested (egui's delay, in the harness's frames).
    let hover = "not recorded here (200.000 ms): the program's own profiler ran";
    for _ in 0..120 {
        if harness.query_by_label_contains(hover).is_some() {
            break;
        }
        harness.step();
    }
    harness.get_by_label_contains(hover);
    harness.hover_at(at(200.0));
    for _ in 0..120 {
        if harness.query_by_label_contains("t = +200").is_some() {
            break;
        }
        harness.step();
    }
    harness.get_by_label_contains("t = +200");
    assert_eq!(harness.query_all_by_label_contains("not recorded here").count(), 0);
}

/// A run of three GPUs that ran out of memory in its first forward pass, the devices starting at
/// different times (`tests/scripts/forward_oom.py`, which works out the times from its entries):
/// the app opens on the device that ran out, its banner and its status bar say the OOM and the
/// peak at their offsets from the trace's first event (of any device, as `info` says them), and
/// the layers of that forward pass raise no growth banner.
#[test]
fn times_are_said_from_the_traces_first_event() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("forward_oom.pickle");
    let python = std::env::var("VRAMSCOPE_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let script = manifest_dir().join("../tests/scripts/forward_oom.py");
    let output = std::process::Command::new(python).arg(script).arg(&file).output().expect("python3");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let expect: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let origin = expect["origin_us"].as_i64().expect("origin");
    let cuda1 = &expect["devices"]["cuda:1"];
    // As the app says a duration: to the ms below a second, three decimals.
    let offset = |us: i64| units::duration_ns((us - origin) * 1000);
    let mut harness = harness(Some(file));
    harness.get_by_label("Open a trace…").click();
    harness.run_steps(2);
    settle(&mut harness);
    let session = &harness.state().session;
    let doc = session.doc.as_ref().expect("opened");
    assert_eq!(doc.devices[session.device_index].device, DeviceId(1), "opens on the device that ran out");
    let oom = offset(cuda1["oom_time_us"].as_i64().expect("the OOM's time"));
    harness.get_by_label_contains(&format!("on cuda:1 at +{oom}"));
    let peak = units::bytes(cuda1["peak_allocated_bytes"].as_u64().expect("peak"));
    let at = offset(cuda1["peak_allocated_time_us"].as_i64().expect("peak time"));
    harness.get_by_label_contains(&format!("peak: {peak} allocated"));
    harness.get_by_label_contains(&format!("at +{at}"));
    assert!(harness.query_by_label_contains("grows").is_none(), "a growth banner for the layers of one forward");
}
