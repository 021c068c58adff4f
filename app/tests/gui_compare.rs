//! Runs side by side through AccessKit (egui_kittest): two real fixtures in the compare view show
//! the independent reference's numbers, and a click on a phase lines the runs up there; the ranks
//! of a run (a recording of several processes, a folder of rank files) show one at a time and in
//! the Ranks view.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};

use egui_kittest::kittest::Queryable;
use vramscope::gui::VramscopeApp;
use vramscope::query::summary;
use vramscope::units;
use vramscope_trace_format::{Category, DeviceId, NoProgress};

use self::support::*;

#[test]
fn comparing_two_runs_shows_the_reference_numbers_side_by_side() {
    let (a, b) = (fixture("gpt_ctx128_forward_fp32.pickle"), fixture("gpt_ctx128_forward_mixed.pickle"));
    let (mut harness, diff) = comparing(&a, &b);
    assert_eq!(harness.state().settings.view, vramscope::gui::View::Compare);
    harness.get_by_label(&vramscope::words::diff_summary(&diff));
    let (ra, rb) = (python_reference(&a), python_reference(&b));
    let bytes = |r: &serde_json::Value, key: &str| r[key].as_u64().expect(key);
    // The table shows each run's peaks and categories as the reference computes them.
    for key in ["peak_allocated_bytes", "peak_reserved_bytes"] {
        let (va, vb) = (bytes(&ra, key), bytes(&rb, key));
        assert!(harness.query_all_by_label(&units::bytes(va)).count() > 0, "A {key}");
        assert!(harness.query_all_by_label(&units::bytes(vb)).count() > 0, "B {key}");
        assert!(harness.query_all_by_label(&units::signed_bytes(vb as i64 - va as i64)).count() > 0, "B - A {key}");
    }
    for (name, value) in ra["categories_at_peak"].as_object().expect("categories") {
        assert_eq!(
            diff.a.categories_at_peak.get(&Category::from_name(name).expect("a category")).copied(),
            value.as_u64(),
            "A {name}"
        );
    }
    for (name, value) in rb["categories_at_peak"].as_object().expect("categories") {
        assert_eq!(
            diff.b.categories_at_peak.get(&Category::from_name(name).expect("a category")).copied(),
            value.as_u64(),
            "B {name}"
        );
    }
    // Both timelines are drawn, and aligning at the peaks moves them.
    assert_eq!(harness.query_all_by_label("Memory timeline").count(), 2);
    harness.get_by_label("peak").click();
    harness.run_steps(2);
    assert_eq!(harness.state().views.compare.align, vramscope::gui::compare_view::Align::Peak);
}

#[test]
fn the_phases_of_two_runs_are_side_by_side_and_a_click_lines_them_up_there() {
    // The forward pass alone against the full step of the same model.
    let (a, b) = (fixture("gpt_ctx128_forward_fp32.pickle"), fixture("gpt_ctx128_fullstep_fp32.pickle"));
    let (mut harness, diff) = comparing(&a, &b);
    // The forward pass's high point of each, as the reference computes it.
    let forward_high = |file: &Path| {
        let phases = python_reference(file)["phases"].as_array().cloned().unwrap_or_default();
        phases
            .iter()
            .filter(|p| p["phase"] == "forward")
            .filter_map(|p| p["high_bytes"].as_u64())
            .max()
            .expect("forward")
    };
    let (fa, fb) = (forward_high(&a), forward_high(&b));
    let row = diff.phases.iter().position(|r| r.iteration.is_none() && r.phase.is_some_and(|k| k.name() == "forward"));
    let row = row.expect("a forward row");
    assert_eq!(diff.phases[row].a.as_ref().map(|s| s.high_bytes), Some(fa));
    assert_eq!(diff.phases[row].b.as_ref().map(|s| s.high_bytes), Some(fb));
    harness.get_by_label("Phase by phase");
    assert!(harness.query_all_by_label(&units::bytes(fa)).count() > 0);
    assert!(harness.query_all_by_label(&units::bytes(fb)).count() > 0);
    // Only B has an optimizer step: its row cannot line them up.
    harness.get_by_label("optimizer step (highest)");
    // A click on the forward row lines both runs up at its start and shows it.
    harness.get_by_label("forward (highest)").click();
    harness.run_steps(3);
    assert!(harness.state().session.compare.is_some());
    assert_eq!(harness.state().views.compare.align, vramscope::gui::compare_view::Align::Phase(row));
    let (start, end) = harness.state().views.compare.timeline.view_ns.expect("a view");
    let side = diff.phases[row].a.as_ref().expect("A's forward");
    assert!(start <= side.start_ns as f64 && side.end_ns as f64 <= end, "{start}..{end}");
    assert!(end - start < 1.5 * (side.end_ns - side.start_ns).max(1) as f64 + 1.0, "{start}..{end}");
}

fn ddp_recording() -> (PathBuf, vramscope_trace_format::Trace) {
    let file = manifest_dir().join("../samples/traces/cpu-ddp-gloo-2ranks.vtrace");
    let trace = vramscope_trace_format::import(&std::fs::read(&file).unwrap(), &NoProgress).unwrap().trace;
    assert_eq!(trace.metadata.processes.len(), 2);
    (file, trace)
}

/// Each rank's peak as `info` works it out, checked against a replay of the rank's events by
/// hand (allocated memory: up at each allocation, down at each free; the recording holds
/// everything from the start).
fn rank_peaks(run: &vramscope::query::run::Run) -> Vec<(u32, u64)> {
    use vramscope_trace_format::EventKind;
    let summary = vramscope::query::run::summarize(run).expect("ranks");
    let peaks: Vec<(u32, u64)> = summary.ranks.iter().map(|r| (r.rank, r.peak.peak_allocated_bytes)).collect();
    for rank in &run.ranks {
        let trace = &rank.trace;
        let two_steps = trace.events.iter().any(|e| e.kind == EventKind::FreeRequested);
        let freed = if two_steps { EventKind::FreeRequested } else { EventKind::FreeCompleted };
        let mut by_device: std::collections::BTreeMap<i16, (i64, i64)> = std::collections::BTreeMap::new();
        for e in &trace.events {
            let (now, peak) = by_device.entry(e.device.0).or_default();
            match e.kind {
                EventKind::Alloc => *now += e.size_bytes as i64,
                k if k == freed => *now -= e.size_bytes as i64,
                _ => {}
            }
            *peak = (*peak).max(*now);
        }
        let by_hand = by_device.values().map(|(_, peak)| *peak as u64).max().unwrap_or(0);
        let said = peaks.iter().find(|p| p.0 == rank.rank).map(|p| p.1);
        assert_eq!(said, Some(by_hand), "rank {}: the analysis' peak against a replay by hand", rank.rank);
    }
    peaks
}

#[test]
fn a_recording_of_two_ranks_shows_one_at_a_time_and_side_by_side() {
    use vramscope::query::run::Run;
    let (file, trace) = ddp_recording();
    let mut harness = harness(Some(file.clone()));
    harness.get_by_label("Open a trace…").click();
    harness.run_steps(2);
    settle(&mut harness);
    let peaks = rank_peaks(&Run::of(vec![("run".into(), trace.clone())]));
    let worst = peaks.iter().max_by_key(|p| p.1).unwrap().0;
    let process_of = |rank: u32| trace.metadata.processes.iter().position(|p| p.rank == Some(rank)).unwrap();
    let events_of = |app: &VramscopeApp| app.session.doc.as_ref().map_or(0, |d| d.trace.events.len());
    let events_of_process = |p: usize| trace.events.iter().filter(|e| e.process.0 as usize == p).count();
    // The rank that peaks highest is shown alone: no view mixes the two processes' blocks.
    assert_eq!(events_of(harness.state()), events_of_process(process_of(worst)));
    assert_eq!(harness.state().session.doc.as_ref().unwrap().trace.metadata.processes.len(), 1);
    // The ranks view: each rank's peak as the analysis has it, and a click opens the other.
    harness.get_by_label("Ranks").click();
    harness.run_steps(2);
    for (rank, bytes) in &peaks {
        assert!(harness.query_by_label(&format!("rank {rank}")).is_some(), "rank {rank} listed");
        assert!(
            !harness.query_all_by_label(&units::bytes(*bytes)).collect::<Vec<_>>().is_empty(),
            "rank {rank}'s peak"
        );
    }
    let other = peaks.iter().find(|p| p.0 != worst).unwrap().0;
    harness.get_by_label(&format!("rank {other}")).click();
    harness.run_steps(2);
    settle(&mut harness);
    assert_eq!(events_of(harness.state()), events_of_process(process_of(other)));
    assert_eq!(harness.state().session.run.as_ref().and_then(|r| r.shown), Some(other));
    let one = trace.of_process(vramscope_trace_format::ProcessId(process_of(other) as u32));
    let peak = units::bytes(summary::device_summary(&one, DeviceId::HOST).peak_allocated_bytes);
    harness.get_by_label(&format!("Jump to peak ({peak})"));
    // The process menu lists the ranks only: there is no "all processes" mixing them.
    assert!(harness.query_by_label_contains("all processes").is_none());
}

#[test]
fn processes_without_ranks_are_shown_one_at_a_time_too() {
    let (_, mut trace) = ddp_recording();
    for process in &mut trace.metadata.processes {
        process.rank = None;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("workers.vtrace");
    vramscope_trace_format::vtrace::write(&trace, std::fs::File::create(&path).unwrap()).unwrap();
    let mut harness = harness(Some(path));
    harness.get_by_label("Open a trace…").click();
    harness.run_steps(2);
    settle(&mut harness);
    let app = harness.state();
    let doc = app.session.doc.as_ref().expect("open");
    // One process alone, the one that peaks highest; no run of ranks.
    assert_eq!(doc.trace.metadata.processes.len(), 1);
    let peak_of = |p: u32| {
        let one = trace.of_process(vramscope_trace_format::ProcessId(p));
        vramscope::query::diff::run_peak(&one, "", None).peak_allocated_bytes
    };
    let shown = app.session.processes().expect("its processes").1 as u32;
    assert!(peak_of(shown) >= peak_of(1 - shown));
    assert_eq!(doc.trace.events.len(), trace.events.iter().filter(|e| e.process.0 == shown).count());
    assert!(app.session.run.is_none());
    assert!(harness.query_by_label("Ranks").is_none());
}

#[test]
fn a_folder_of_rank_files_opens_as_one_run_and_a_click_opens_a_rank() {
    use vramscope::query::run::Run;
    let (_, trace) = ddp_recording();
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for (i, process) in trace.metadata.processes.iter().enumerate() {
        let rank = process.rank.unwrap();
        let path = dir.path().join(format!("train.rank{rank}.vtrace"));
        let one = trace.of_process(vramscope_trace_format::ProcessId(i as u32));
        vramscope_trace_format::vtrace::write(&one, std::fs::File::create(&path).unwrap()).unwrap();
        files.push(path);
    }
    // Not a trace: left out, and said.
    std::fs::write(dir.path().join("notes.json"), b"{\"loss\": 1.5}").unwrap();
    let mut harness = harness_picking(vec![dir.path().to_owned()]);
    harness.get_by_label("File").click();
    harness.run_steps(2);
    harness.get_by_label_contains("Open a run's folder").click();
    harness.run_steps(2);
    settle(&mut harness);
    let app = harness.state();
    let run = app.session.run.as_ref().expect("a run is open");
    let finished = run.finished.as_ref().expect("read");
    let traces: Vec<(String, vramscope_trace_format::Trace)> = files
        .iter()
        .map(|f| {
            (
                f.display().to_string(),
                vramscope_trace_format::import(&std::fs::read(f).unwrap(), &NoProgress).unwrap().trace,
            )
        })
        .collect();
    let expected = rank_peaks(&Run::of(traces));
    let shown: Vec<(u32, u64)> =
        finished.rows.iter().map(|(rank, _, row)| (*rank, row.figures.peak.peak_allocated_bytes)).collect();
    assert_eq!(shown, expected);
    assert!(finished.notes.iter().any(|n| n.contains("notes.json")), "{:?}", finished.notes);
    // The rank that peaks highest opened in the other views, read from its own file.
    let worst = expected.iter().max_by_key(|p| p.1).unwrap().0;
    assert_eq!(run.shown, Some(worst));
    let doc = app.session.doc.as_ref().expect("a rank is shown");
    assert!(doc.path.ends_with(format!("train.rank{worst}.vtrace")));
    assert_eq!(app.settings.view, vramscope::gui::View::Ranks);
    harness.get_by_label_contains("notes.json");
    let other = expected.iter().find(|p| p.0 != worst).unwrap().0;
    harness.get_by_label(&format!("rank {other}")).click();
    harness.run_steps(2);
    settle(&mut harness);
    let app = harness.state();
    assert!(app.session.doc.as_ref().unwrap().path.ends_with(format!("train.rank{other}.vtrace")));
    assert_eq!(app.session.run.as_ref().and_then(|r| r.shown), Some(other));
}
