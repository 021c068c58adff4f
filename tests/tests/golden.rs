//! Regression (golden) tests: the text that `info`, `diff` and `advise` print on real fixtures,
//! held in `tests/tests/snapshots/` (reviewed with `cargo insta review` when a change is meant).
//! They hold the text as it was, not its numbers against a reference: those are checked in
//! `fixtures.rs`, `clocks.rs`, `growth.rs` and the others. Paths are replaced by `<fixtures>` and
//! `<samples>`, so clones anywhere print the same.

use std::ffi::OsStr;
use std::path::Path;

use vramscope_e2e::{fixtures_dir, repo_root, vramscope};

/// The command's stdout, with the machine's paths taken out.
fn text(args: &[&OsStr]) -> String {
    let output = vramscope(args);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let fixtures = fixtures_dir().canonicalize().unwrap_or_else(|_| fixtures_dir());
    let samples = repo_root().join("samples/traces");
    String::from_utf8_lossy(&output.stdout)
        .replace(&fixtures_dir().display().to_string(), "<fixtures>")
        .replace(&fixtures.display().to_string(), "<fixtures>")
        .replace(&samples.display().to_string(), "<samples>")
}

fn fixture(path: &str) -> std::path::PathBuf {
    fixtures_dir().join(path)
}

fn sample(name: &str) -> std::path::PathBuf {
    repo_root().join("samples/traces").join(name)
}

fn os(path: &Path) -> &OsStr {
    path.as_os_str()
}

/// The golden files of this clone: insta's own default is the path this test was compiled in,
/// which, with a target directory shared between clones, can be another clone's.
fn this_clones_snapshots() -> insta::internals::SettingsBindDropGuard {
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path(repo_root().join("tests/tests/snapshots"));
    settings.bind_to_scope()
}

#[test]
fn info_of_a_snapshot_a_profiler_trace_a_timeline_and_a_recording() {
    let _snapshots = this_clones_snapshots();
    let snapshot = fixture("pytorch-snapshots/gpt_ctx128_fullstep_fp32.pickle");
    insta::assert_snapshot!("info_snapshot", text(&["info".as_ref(), os(&snapshot)]));
    let chrome = fixture("torch-profiler/mlp_adam_cpu.chrome_trace.json");
    insta::assert_snapshot!("info_chrome_trace", text(&["info".as_ref(), os(&chrome)]));
    let timeline = fixture("torch-profiler/mlp_adam_cpu.memory_timeline.raw.json.gz");
    insta::assert_snapshot!("info_memory_timeline", text(&["info".as_ref(), os(&timeline)]));
    let recording = sample("h200-torch-plain.vtrace");
    insta::assert_snapshot!(
        "info_recording_at_backward",
        text(&[
            "info".as_ref(),
            "--at".as_ref(),
            "backward#2".as_ref(),
            "--blocks".as_ref(),
            "5".as_ref(),
            os(&recording)
        ])
    );
}

#[test]
fn diff_of_two_runs() {
    let _snapshots = this_clones_snapshots();
    let a = fixture("pytorch-snapshots/gpt_ctx128_forward_fp32.pickle");
    let b = fixture("pytorch-snapshots/gpt_ctx128_forward_mixed.pickle");
    insta::assert_snapshot!("diff_fp32_mixed", text(&["diff".as_ref(), os(&a), os(&b)]));
}

#[test]
fn advise_on_a_recording() {
    let _snapshots = this_clones_snapshots();
    let recording = sample("h200-torch-plain.vtrace");
    insta::assert_snapshot!("advise_h200", text(&["advise".as_ref(), "--gpus".as_ref(), "4".as_ref(), os(&recording)]));
}
