//! `vramscope report`: one run and two compared, as SVG and PNG. The numbers drawn equal the
//! independent reference's, formatted as the report documents (binary units, 3 digits).

use std::path::PathBuf;

use serde_json::Value;
use vramscope_e2e::{bytes_said, fixtures_dir, reference, vramscope};

fn pair() -> (PathBuf, PathBuf) {
    let dir = fixtures_dir().join("pytorch-snapshots");
    (dir.join("gpt_ctx128_forward_fp32.pickle"), dir.join("gpt_ctx128_forward_mixed.pickle"))
}

/// The text of every `<text>` element, trimmed and unescaped enough for numbers.
fn texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| t.split_once('>').and_then(|(_, rest)| rest.split_once("</text>")))
        .map(|(inner, _)| inner.trim().replace("&apos;", "'"))
        .collect()
}

fn run_report(files: &[&PathBuf], out: &std::path::Path, extra: &[&str]) -> std::process::Output {
    let mut args: Vec<&std::ffi::OsStr> = vec!["report".as_ref()];
    args.extend(files.iter().map(|f| f.as_os_str()));
    args.extend(["-o".as_ref(), out.as_os_str()]);
    args.extend(extra.iter().map(|s| std::ffi::OsStr::new(*s)));
    vramscope(&args)
}

#[test]
fn comparison_svg_shows_the_reference_numbers() {
    let (a, b) = pair();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("compare.svg");
    let output = run_report(&[&a, &b], &out, &[]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let svg = texts(&std::fs::read_to_string(&out).expect("svg"));
    let has = |text: &str| svg.iter().any(|t| t == text);
    let (ra, rb) = (reference(&a), reference(&b));
    let (ra, rb) = (&ra["devices"][0], &rb["devices"][0]);
    let num = |v: &Value, k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
    for r in [ra, rb] {
        for key in ["peak_allocated_bytes", "peak_reserved_bytes"] {
            let shown = bytes_said(num(r, key));
            assert!(has(&shown), "{key} {shown} not in the report");
        }
        for (_, bytes) in r["categories_at_peak"].as_object().expect("categories") {
            let shown = bytes_said(bytes.as_u64().expect("bytes"));
            assert!(has(&shown), "category bytes {shown} not in the report");
        }
    }
    let delta = num(rb, "peak_allocated_bytes") as i64 - num(ra, "peak_allocated_bytes") as i64;
    let shown = format!("+{}", bytes_said(delta.unsigned_abs()));
    assert!(has(&shown), "delta {shown} not in the report");
    assert!(svg.iter().any(|t| t.starts_with("B's peak is")), "the summary sentence is missing");
}

#[test]
fn single_png_is_a_real_render_and_outputs_are_never_overwritten() {
    let (a, _) = pair();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("report.png");
    let output = run_report(&[&a], &out, &[]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let image = image::open(&out).expect("a PNG").to_rgb8();
    assert_eq!(image.dimensions(), (1600, 900));
    // The activation green and the unknown grey fill the stacked timeline.
    let near = |rgb: [u8; 3]| image.pixels().filter(|p| p.0.iter().zip(rgb).all(|(x, y)| x.abs_diff(y) <= 4)).count();
    assert!(near([0x59, 0xa1, 0x4f]) > 5_000, "activation green missing");
    assert!(near([0x8c, 0x8f, 0x99]) > 50_000, "unknown grey missing");

    // An existing output is kept without --force, replaced with it.
    let before = std::fs::read(&out).expect("read");
    let again = run_report(&[&a], &out, &[]);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));
    assert_eq!(std::fs::read(&out).expect("read"), before);
    assert!(run_report(&[&a], &out, &["--force"]).status.success());

    let wrong = run_report(&[&a], &dir.path().join("report.jpg"), &[]);
    assert_eq!(wrong.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&wrong.stderr).contains(".png or .svg"));
}
