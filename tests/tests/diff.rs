//! `vramscope diff` on the fixture pair of the same model in fp32 and mixed precision: the
//! numbers equal the independent reference's for each pickle, the delta is B - A, and the gates
//! decide the exit status.

use std::path::PathBuf;

use serde_json::Value;
use vramscope_e2e::{fixtures_dir, reference, vramscope};

fn pair() -> (PathBuf, PathBuf) {
    let dir = fixtures_dir().join("pytorch-snapshots");
    (dir.join("gpt_ctx128_forward_fp32.pickle"), dir.join("gpt_ctx128_forward_mixed.pickle"))
}

fn diff(args: &[&str]) -> (Option<i32>, String, String) {
    let (a, b) = pair();
    let mut all: Vec<&std::ffi::OsStr> = vec!["diff".as_ref(), a.as_os_str(), b.as_os_str()];
    all.extend(args.iter().map(|s| std::ffi::OsStr::new(*s)));
    let output = vramscope(&all);
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn device0(reference: &Value) -> &Value {
    &reference["devices"][0]
}

#[test]
fn json_equals_the_reference_for_each_run_and_delta_is_b_minus_a() {
    let (code, stdout, stderr) = diff(&["--json"]);
    assert_eq!(code, Some(0), "{stderr}");
    let json: Value = serde_json::from_str(&stdout).expect("JSON");
    let (a, b) = pair();
    let (ra, rb) = (reference(&a), reference(&b));
    for (side, r) in [("a", device0(&ra)), ("b", device0(&rb))] {
        for key in ["peak_allocated_bytes", "peak_reserved_bytes", "peak_allocated_time_us", "categories_at_peak"] {
            assert_eq!(json[side][key], r[key], "{side}.{key}");
        }
    }
    for key in ["peak_allocated_bytes", "peak_reserved_bytes"] {
        let delta = json["b"][key].as_i64().expect("b") - json["a"][key].as_i64().expect("a");
        assert_eq!(json["delta"][key].as_i64(), Some(delta), "{key}");
    }
    let categories = json["delta"]["categories_at_peak"].as_object().expect("categories");
    for (name, delta) in categories {
        let get = |side: &str| json[side]["categories_at_peak"][name].as_i64().unwrap_or(0);
        assert_eq!(delta.as_i64(), Some(get("b") - get("a")), "{name}");
    }
    // Mixed precision at context 128: more activations at the forward peak, not fewer.
    assert!(json["delta"]["categories_at_peak"]["activation"].as_i64().expect("activation") > 0);
    assert!(json["summary"].as_str().expect("summary").starts_with("B's peak is"), "{}", json["summary"]);
}

#[test]
fn gates_fail_with_exit_status_1_and_hold_with_0() {
    // B's peak is 23% above A's.
    let (code, stdout, _) = diff(&["--fail-if-peak-grows", "5"]);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(stdout.contains("gate peak_allocated_bytes: grew +23.2%, limit +5%: FAILED"), "{stdout}");
    let (code, stdout, _) = diff(&["--fail-if-peak-grows", "30", "--fail-if-category-grows", "unknown=0"]);
    assert_eq!(code, Some(0), "{stdout}");
    let (code, stdout, _) =
        diff(&["--fail-if-peak-grows", "30", "--fail-if-category-grows", "activation=50", "--json"]);
    assert_eq!(code, Some(1), "{stdout}");
    let json: Value = serde_json::from_str(&stdout).expect("JSON");
    let gates = json["gates"].as_array().expect("gates");
    assert_eq!(gates.len(), 2);
    assert_eq!(gates[0]["passed"], true);
    assert_eq!(gates[1]["gate"], "category:activation");
    assert_eq!(gates[1]["passed"], false);
}

#[test]
fn bad_input_is_exit_status_2_with_the_file_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("broken.pickle");
    std::fs::write(&bad, b"\x80\x04not really").expect("write");
    let (a, _) = pair();
    let output = vramscope(&["diff".as_ref(), a.as_os_str(), bad.as_os_str()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("broken.pickle"));
    let (code, _, stderr) = diff(&["--fail-if-category-grows", "activations=5"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("unknown category"), "{stderr}");
}
