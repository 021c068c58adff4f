//! Files of every vintage and shape users arrive with, made here: real CPU PyTorch profiler output
//! in every form the profiler writes (plain, gzipped, through `tensorboard_trace_handler`, per
//! rank under torchrun), the HTML pages of PyTorch's own `_memory_viz.py`, and, where this machine
//! cannot make them for real (no GPU, no ROCm, no old PyTorch), files written from PyTorch's
//! source of that era by `tests/scripts/*_vintages.py` (which cite the commits). Each expectation
//! comes from somewhere other than the importer: a hand count in the generator, the independent
//! Python reference, or the profiler's own totals.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use vramscope_e2e::{
    SNAPSHOT_REFERENCE_KEYS, fixtures_dir, info_json, info_json_with, reference, repo_root, run_python, torch_python,
    vramscope,
};

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"))
}

/// Runs a generator script into `dir` and returns its manifest.
fn generate(script: &str, dir: &Path, extra: &[&str]) -> Vec<Value> {
    let mut args: Vec<&std::ffi::OsStr> = extra.iter().map(std::ffi::OsStr::new).collect();
    args.push(dir.as_os_str());
    run_python(&repo_root().join("tests/scripts").join(script), &args);
    let text = std::fs::read_to_string(dir.join("manifest.json")).unwrap_or_else(|e| panic!("{e}"));
    serde_json::from_str::<Vec<Value>>(&text).unwrap_or_else(|e| panic!("{e}"))
}

fn device<'a>(info: &'a Value, label: &str) -> &'a Value {
    info["devices"]
        .as_array()
        .and_then(|ds| ds.iter().find(|d| d["label"] == label))
        .unwrap_or_else(|| panic!("no device {label} in {info}"))
}

fn matches_reference(file: &Path, ours: &Value) {
    let theirs = reference(file);
    let devices = theirs["devices"].as_array().cloned().unwrap_or_default();
    assert!(!devices.is_empty(), "{}: the reference found no device: {theirs}", file.display());
    for r in &devices {
        let d = r["device"].as_i64().unwrap_or(-99);
        let o = ours["devices"]
            .as_array()
            .and_then(|ds| ds.iter().find(|x| x["device"].as_i64() == Some(d)))
            .unwrap_or_else(|| panic!("{}: no device {d} in {ours}", file.display()));
        for key in SNAPSHOT_REFERENCE_KEYS {
            assert!(r.get(key).is_some(), "{}: the reference has no {key}", file.display());
            assert_eq!(o[key], r[key], "{}: device {d} {key}", file.display());
        }
    }
}

/// Checks one manifest entry: the error it must give, or the numbers it must read.
fn check_entry(dir: &Path, entry: &Value) {
    let file = dir.join(entry["file"].as_str().unwrap_or_default());
    if let Some(error) = entry["error"].as_str() {
        let output = vramscope(&["info".as_ref(), file.as_os_str()]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{}: {stderr}", file.display());
        assert!(stderr.contains(&file.display().to_string()), "the error names the file: {stderr}");
        assert!(stderr.contains(error), "{}: expected {error:?} in {stderr}", file.display());
        return;
    }
    let info = info_json(&file);
    let name = file.display();
    for want in entry["devices"].as_array().into_iter().flatten() {
        let label = want["label"].as_str().unwrap_or_default();
        let got = device(&info, label);
        for (key, expected) in want.as_object().into_iter().flatten().filter(|(k, _)| *k != "label") {
            assert_eq!(&got[key], expected, "{name}: {label} {key}");
        }
    }
    if let Some(note) = entry["note"].as_str() {
        let notes = info["notes"].to_string();
        assert!(notes.contains(note), "{name}: expected a note with {note:?}, got {notes}");
    } else {
        assert_eq!(info["notes"], Value::Array(Vec::new()), "{name}: no caveat expected");
    }
    for key in ["wrapped_in", "rank", "focus_device"] {
        if let Some(expected) = entry.get(key) {
            assert_eq!(&info[key], expected, "{name}: {key}");
        }
    }
    if let Some(expected) = entry.get("oom_events") {
        let total: u64 =
            info["devices"].as_array().into_iter().flatten().filter_map(|d| d["oom_events"].as_u64()).sum();
        assert_eq!(Some(total), expected.as_u64(), "{name}: OOMs");
    }
    if let Some(expected) = entry.get("annotations") {
        assert_eq!(&info["annotations"], expected, "{name}: annotations");
    }
    if let Some(expected) = entry["metadata"].as_object() {
        for (key, value) in expected {
            let found = &info["metadata"]["trace_metadata"][key];
            assert_eq!(found, value, "{name}: metadata {key} in {}", info["metadata"]);
        }
    }
    if let Some(blocks) = entry["blocks"].as_array() {
        let listed = info_json_with(&file, &["--blocks", "8"]);
        let all: Vec<Value> = listed["largest_blocks"]["devices"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|d| d["blocks"].as_array().cloned().unwrap_or_default())
            .collect();
        for want in blocks {
            let found = all.iter().find(|b| b["size_bytes"] == want["size_bytes"]);
            let Some(found) = found else { panic!("{name}: no block of {} in {all:?}", want["size_bytes"]) };
            for key in ["context", "site"] {
                if let Some(expected) = want.get(key) {
                    assert_eq!(&found[key], expected, "{name}: block {} {key}", want["size_bytes"]);
                }
            }
        }
    }
    if entry["reference"] == true {
        matches_reference(&file, &info);
    }
}

/// Generates files with `script` and checks each against its manifest.
fn check_generated(script: &str, args: &[&str], at_least: usize) {
    let dir = tempdir();
    let manifest = generate(script, dir.path(), args);
    assert!(manifest.len() >= at_least, "{script}: {} files", manifest.len());
    for entry in &manifest {
        check_entry(dir.path(), entry);
    }
}

#[test]
fn profiler_traces_of_every_vintage_and_device_type() {
    check_generated("chrome_vintages.py", &[], 7);
}

#[test]
fn snapshots_of_every_vintage_and_shape() {
    check_generated("snapshot_vintages.py", &[], 12);
}

/// An OOM with a block the program freed that still waits for its stream (the private-pool
/// snapshot of `snapshot_vintages.py`, at its OOM: 44 MiB reserved, 8 MiB allocated, the 2 MiB
/// block freed at 140 and never completed): the allocator held 44 - 8 - 2 = 34 MiB free, and the
/// 2 MiB are said apart, as neither allocated nor free.
#[test]
fn an_oom_says_memory_awaiting_its_free_apart_from_free_memory() {
    let dir = tempdir();
    generate("snapshot_vintages.py", dir.path(), &[]);
    let file = dir.path().join("cuda_graph_private_pool.pickle");
    let output = vramscope(&["info".as_ref(), "--oom".as_ref(), "--json".as_ref(), file.as_os_str()]);
    let oom: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}"));
    let pm = &oom["ooms"][0];
    const MIB: u64 = 1 << 20;
    assert_eq!(pm["allocated_bytes"].as_u64(), Some(8 * MIB));
    assert_eq!(pm["held_free"]["bytes"].as_u64(), Some(34 * MIB), "{pm}");
    assert_eq!(pm["held_free"]["awaiting_bytes"].as_u64(), Some(2 * MIB), "{pm}");
    assert!(pm["words"].to_string().contains("2.00 MiB more was freed by the program but still waiting"), "{pm}");
}

/// Property test over generated files: random consistent allocator histories (several devices,
/// ring-buffer windows, pending frees, released segments, no times, no history at all) agree with
/// the reference on every number, and no peak is below the end (checked by `info_json`).
#[test]
fn random_snapshots_agree_with_the_reference() {
    check_generated("snapshot_vintages.py", &["--random", "60", "--seed", "12"], 60);
}

/// Compressed containers: gzip (one member or several) and zstd around a snapshot and a trace,
/// read as what they hold; garbage inside says what it is.
#[test]
fn compressed_files_are_read_by_what_they_hold() {
    let dir = tempdir();
    let snapshot = fixtures_dir().join("pytorch-snapshots/gpt_ctx128_fullstep_fp32.pickle");
    let trace = fixtures_dir().join("torch-profiler/mlp_adam_cpu.chrome_trace.json");
    let code = r#"
import gzip, sys
src, dst, members = sys.argv[1], sys.argv[2], int(sys.argv[3])
data = open(src, 'rb').read()
step = len(data) // members + 1
with open(dst, 'wb') as f:
    for i in range(members):
        f.write(gzip.compress(data[i * step:(i + 1) * step]))
"#;
    for (source, members) in [(&snapshot, 1), (&snapshot, 3), (&trace, 1)] {
        let out = dir.path().join(format!("{}.{members}.gz", source.file_name().unwrap_or_default().to_string_lossy()));
        vramscope_e2e::run_python_code(code, &[source.as_os_str(), out.as_os_str(), members.to_string().as_ref()]);
        let mut plain = info_json(source);
        let mut packed = info_json(&out);
        assert_eq!(packed["wrapped_in"], serde_json::json!(["gzip"]), "{}", out.display());
        if let Some(o) = packed.as_object_mut() {
            o.remove("wrapped_in");
        }
        // Times are the same; only the file differs.
        plain["format"] = Value::Null;
        packed["format"] = Value::Null;
        assert_eq!(plain, packed, "{}", out.display());
    }
    let inside = dir.path().join("notes.txt.gz");
    vramscope_e2e::run_python_code(
        "import gzip, sys; open(sys.argv[1], 'wb').write(gzip.compress(b'hello, these are my notes'))",
        &[inside.as_os_str()],
    );
    let output = vramscope(&["info".as_ref(), inside.as_os_str()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr.contains("the gzip data holds none of the formats") && stderr.contains("hello, these"), "{stderr}");
    // Bombs: 1 GiB of spaces gzipped twice (about 2 KB) and three times (a few hundred bytes)
    // are refused once inflating passes the file's budget (64 MiB plus 1100 times the file, more
    // than one layer of gzip can inflate), shared by all layers: nesting does not multiply it.
    // Gzipped once (about 1 MB) it is within what one layer holds, and is parsed as it inflates
    // (trace-format/tests/containers.rs holds such files to their plain reading).
    let code = "import gzip, sys\ndata = b'[' + b' ' * (1 << 30)\nfor _ in range(int(sys.argv[2])):\n    data = gzip.compress(data, 9)\nopen(sys.argv[1], 'wb').write(data)";
    for layers in ["2", "3"] {
        let bomb = dir.path().join(format!("bomb{layers}.json.gz"));
        vramscope_e2e::run_python_code(code, &[bomb.as_os_str(), layers.as_ref()]);
        let run = vramscope_e2e::measured(&["info".as_ref(), bomb.as_os_str()]);
        assert_eq!(run.code, Some(2), "{}", run.stderr);
        assert!(run.stderr.contains("inflates to more than"), "{}", run.stderr);
        // Memory stays near the file's budget: no layer's output is allowed past it.
        let file_bytes = std::fs::metadata(&bomb).map(|m| m.len()).unwrap_or(0);
        let budget_kib = vramscope_trace_format::import::container::inflate_budget(file_bytes) >> 10;
        assert!(
            run.peak_kib < 2 * budget_kib + (64 << 10),
            "{layers} layers: {} KiB for a budget of {budget_kib} KiB",
            run.peak_kib
        );
    }
    // What is not JSON is held whole once inflated: the machine's memory (here a set limit)
    // bounds it, said as memory, not as damage.
    let held = dir.path().join("held.pickle.gz");
    let code = "import gzip, sys\nopen(sys.argv[1], 'wb').write(gzip.compress(b'\\x80\\x04' + bytes(200 << 20), 9))";
    vramscope_e2e::run_python_code(code, &[held.as_os_str()]);
    let output = vramscope_e2e::vramscope_command()
        .arg("info")
        .arg(&held)
        .env("VRAMSCOPE_MEMORY_LIMIT", "100M")
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("needs more memory than this machine has available")
            && stderr.contains("held whole once decompressed")
            && stderr.contains("VRAMSCOPE_MEMORY_LIMIT"),
        "{stderr}"
    );
}

/// The pages PyTorch's own `python -m torch.cuda._memory_viz trace_plot|segment_plot` writes
/// (torch 2.15 here) open as the snapshot they embed.
#[test]
fn memory_viz_html_opens_as_its_snapshot() {
    let dir = tempdir();
    for name in ["gpt_ctx128_fullstep_fp32.pickle", "stanford_cs336_a2_memory_snapshot.pickle"] {
        let snapshot = fixtures_dir().join("pytorch-snapshots").join(name);
        for command in ["trace_plot", "segment_plot"] {
            let page = dir.path().join(format!("{name}.{command}.html"));
            let output = Command::new(torch_python())
                .args(["-m", "torch.cuda._memory_viz", command])
                .arg(&snapshot)
                .arg("-o")
                .arg(&page)
                .env("KINETO_LOG_LEVEL", "5")
                .output()
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
            let mut from_page = info_json(&page);
            assert_eq!(from_page["wrapped_in"], serde_json::json!(["memory_viz HTML"]));
            if let Some(o) = from_page.as_object_mut() {
                o.remove("wrapped_in");
            }
            assert_eq!(from_page, info_json(&snapshot), "{command} of {name}");
        }
    }
}

/// Real CPU PyTorch: every file form of the profiler, each against the reference's reading of
/// the same file; the gzipped timeline reads as the plain one of the same session.
#[test]
fn real_profiler_output_in_every_form() {
    let dir = tempdir();
    let output = Command::new(torch_python())
        .arg(repo_root().join("tests/scripts/profiler_corpus.py"))
        .arg(dir.path())
        .env("KINETO_LOG_LEVEL", "5")
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let tb: Vec<PathBuf> = std::fs::read_dir(dir.path().join("tb"))
        .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    assert_eq!(tb.len(), 1, "tensorboard_trace_handler writes one file per cycle");
    let tb = &tb[0];
    assert!(tb.to_string_lossy().ends_with(".pt.trace.json.gz"), "{}", tb.display());
    for file in [dir.path().join("chrome.json"), dir.path().join("chrome.json.gz"), tb.clone()] {
        let ours = info_json(&file);
        assert_eq!(ours["format"], "chrome-trace", "{}", file.display());
        let theirs = reference(&file);
        let r = &theirs["devices"][0];
        let o = &ours["devices"][0];
        assert_eq!(o["label"], "host");
        assert_eq!(o["peak_allocated_bytes"], r["peak_allocated_bytes"], "{}", file.display());
        assert_eq!(o["allocated_bytes"], r["final_allocated_bytes"], "{}", file.display());
        assert!(o["events"].as_u64().unwrap_or(0) > 100, "{}", file.display());
    }
    let tb_info = info_json(tb);
    assert_eq!(tb_info["metadata"]["trace_metadata"]["run_name"], "vramscope-corpus", "add_metadata is kept");
    let plain = info_json(&dir.path().join("timeline.json"));
    let mut packed = info_json(&dir.path().join("timeline.json.gz"));
    assert_eq!(packed["wrapped_in"], serde_json::json!(["gzip"]));
    if let Some(o) = packed.as_object_mut() {
        o.remove("wrapped_in");
    }
    assert_eq!(plain, packed);
    for name in ["timeline.json", "timeline.raw.json.gz"] {
        let file = dir.path().join(name);
        let ours = info_json(&file);
        let theirs = reference(&file);
        assert_eq!(ours["devices"][0]["peak_allocated_bytes"], theirs["peak_total_bytes"], "{name}");
        assert_eq!(ours["devices"][0]["label"], "device:0", "{name}: the export does not say its device");
    }
}

/// torchrun with gloo: each rank's `tensorboard_trace_handler` trace knows its rank and world size
/// from the profiler's own `distributedInfo`.
#[test]
fn per_rank_profiler_traces_know_their_rank() {
    let dir = tempdir();
    let torchrun = torch_python().with_file_name("torchrun");
    let port = format!("--master_port={}", 21000 + std::process::id() % 20000);
    let output = Command::new(&torchrun)
        .args(["--nproc_per_node=2", &port])
        .arg(repo_root().join("tests/scripts/profiler_corpus.py"))
        .arg(dir.path())
        .env("KINETO_LOG_LEVEL", "5")
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    for rank in 0..2u64 {
        let facts = dir.path().join(format!("facts{rank}.json"));
        let facts: Value = std::fs::read_to_string(&facts)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
            .unwrap_or_else(|e| panic!("{}: {e}", facts.display()));
        assert_eq!(facts["rank"].as_u64(), Some(rank));
        let file = dir.path().join(format!("rank{rank}.pt.trace.json.gz"));
        let info = info_json(&file);
        assert_eq!(info["rank"], facts["rank"], "{}", file.display());
        assert_eq!(info["metadata"]["world_size"], facts["world_size"]);
        assert_eq!(info["metadata"]["distributedInfo"]["backend"], "gloo");
        let theirs = reference(&file);
        assert_eq!(info["devices"][0]["peak_allocated_bytes"], theirs["devices"][0]["peak_allocated_bytes"]);
    }
}
