//! The real window under Xvfb: `vramscope open FILE --screenshot OUT.png --view V` renders each
//! view of a real snapshot, and the PNG is a real render of it (its size, the timeline's
//! category colours, text), not a blank or a placeholder.

use std::path::Path;
use std::process::Command;

use vramscope_e2e::{fixtures_dir, vramscope_bin};

/// `xvfb-run` with a display number of its own: tests run in parallel processes, and `-a` alone
/// races when two look for a free display at once.
fn xvfb_run() -> Command {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = 200 + (std::process::id() % 1000) * 8 + NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut command = Command::new("xvfb-run");
    command.env(vramscope_e2e::SELF_CHECK, "1");
    command.args(["-a", "-n", &n.to_string(), "-s", "-screen 0 1600x1000x24"]);
    command
}

/// Runs the binary under `xvfb-run` (installed by `scripts/install-gui-deps.sh`).
fn screenshot(file: &Path, view: &str, out: &Path) {
    let output = xvfb_run()
        .arg(vramscope_bin())
        .arg("open")
        .arg(file)
        .args(["--view", view, "--size", "1200x800", "--screenshot"])
        .arg(out)
        .output()
        .unwrap_or_else(|e| panic!("cannot run xvfb-run ({e}): run scripts/install-gui-deps.sh"));
    assert!(output.status.success(), "{view}: {}", String::from_utf8_lossy(&output.stderr));
}

/// Pixels within a few levels of `rgb`.
fn count_near(image: &image::RgbaImage, rgb: [u8; 3]) -> usize {
    image.pixels().filter(|p| p.0[..3].iter().zip(rgb).all(|(a, b)| a.abs_diff(b) <= 6)).count()
}

#[test]
fn each_view_renders_to_a_real_png() {
    let file = fixtures_dir().join("pytorch-snapshots/gpt_ctx128_fullstep_fp32.pickle");
    let dir = tempfile::tempdir().expect("tempdir");
    for view in ["timeline", "peak", "fragmentation"] {
        let out = dir.path().join(format!("{view}.png"));
        screenshot(&file, view, &out);
        let image = image::open(&out).unwrap_or_else(|e| panic!("{view}: not a PNG: {e}")).to_rgba8();
        assert_eq!(image.dimensions(), (1200, 800), "{view}");
        // The stacked timeline paints optimizer state (purple) and gradients (orange) at this
        // snapshot's peak, in every view.
        let optimizer = count_near(&image, [0xb0, 0x7a, 0xa1]);
        let gradient = count_near(&image, [0xf2, 0x8e, 0x2b]);
        assert!(optimizer > 2000 && gradient > 2000, "{view}: optimizer {optimizer} px, gradient {gradient} px");
        // Text and lines: many distinct colours, not a flat fill.
        let mut colours: Vec<[u8; 4]> = image.pixels().map(|p| p.0).collect();
        colours.sort_unstable();
        colours.dedup();
        assert!(colours.len() > 200, "{view}: only {} colours", colours.len());
    }
}

#[test]
fn a_bad_file_fails_the_screenshot_with_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("not-a-trace.json");
    std::fs::write(&bad, b"{\"hello\": 1}").expect("write");
    let out = dir.path().join("out.png");
    let output = xvfb_run()
        .arg(vramscope_bin())
        .arg(&bad)
        .arg("--screenshot")
        .arg(&out)
        .output()
        .unwrap_or_else(|e| panic!("cannot run xvfb-run ({e}): run scripts/install-gui-deps.sh"));
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("not-a-trace.json"), "{stderr}");
    assert!(!out.exists(), "no PNG is left behind");

    // Comparing with a run that cannot be read ends the same way, without waiting for it.
    let good = fixtures_dir().join("pytorch-snapshots/mosaic_output.pickle");
    let output = xvfb_run()
        .arg(vramscope_bin())
        .arg("compare")
        .args([&bad, &good])
        .arg("--screenshot")
        .arg(&out)
        .output()
        .unwrap_or_else(|e| panic!("cannot run xvfb-run ({e}): run scripts/install-gui-deps.sh"));
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("not-a-trace.json"));
    assert!(!out.exists());
}

#[test]
fn the_compare_view_renders_both_runs() {
    let dir_fixtures = fixtures_dir().join("pytorch-snapshots");
    let (a, b) =
        (dir_fixtures.join("gpt_ctx128_forward_fp32.pickle"), dir_fixtures.join("gpt_ctx128_forward_mixed.pickle"));
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("compare.png");
    let output = xvfb_run()
        .arg(vramscope_bin())
        .arg("compare")
        .args([&a, &b])
        .args(["--size", "1200x800", "--screenshot"])
        .arg(&out)
        .output()
        .unwrap_or_else(|e| panic!("cannot run xvfb-run ({e}): run scripts/install-gui-deps.sh"));
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let image = image::open(&out).expect("PNG").to_rgba8();
    assert_eq!(image.dimensions(), (1200, 800));
    // Two stacked timelines: the activation green of both runs, well above what one would paint.
    let green = count_near(&image, [0x59, 0xa1, 0x4f]);
    let grey = count_near(&image, [0x8c, 0x8f, 0x99]);
    assert!(green > 4000 && grey > 100_000, "green {green} px, grey {grey} px");
}
