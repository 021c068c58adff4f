//! The compare view through AccessKit (egui_kittest): two real fixtures open side by side show
//! the independent reference's numbers, and a click on a phase lines the runs up there.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;

use egui_kittest::kittest::Queryable;
use vramscope::units;
use vramscope_trace_format::Category;

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
