//! Stacks and sites that start in the program: a snapshot recorded with the allocator's and the
//! interpreter's frames and allocations made through library calls (`tests/scripts/forward_oom.py`)
//! is said from the program's own lines, with the library call beside them: the OOM's request,
//! the sites alive then, and the largest blocks.

#![allow(clippy::expect_used)]

use serde_json::Value;
use vramscope_e2e::{info_json_with, repo_root, run_python, vramscope};

const PROGRAM: &str = "/home/user/llm/";

#[test]
fn the_request_and_the_sites_name_the_programs_line_first() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("forward_oom.pickle");
    run_python(&repo_root().join("tests/scripts/forward_oom.py"), &[file.as_os_str()]);
    let output = vramscope(&["info".as_ref(), "--oom".as_ref(), "--json".as_ref(), file.as_os_str()]);
    let oom: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let pm = &oom["ooms"][0];
    let stack: Vec<&str> = pm["stack"].as_array().expect("a stack").iter().filter_map(Value::as_str).collect();
    // The request came from mlp.py:18 calling torch's Linear: that line first, the library call
    // beside it, then the program's callers; nothing of the allocator, the interpreter or
    // nn.Module's call plumbing.
    let first = stack.first().expect("a frame");
    assert!(first.starts_with(&format!("forward  {PROGRAM}mlp.py:18 via forward  ")), "{stack:#?}");
    assert!(first.ends_with("torch/nn/modules/linear.py:125"), "{first}");
    assert_eq!(
        stack[1..],
        [
            format!("forward  {PROGRAM}model.py:212"),
            format!("train_step  {PROGRAM}train.py:58"),
            format!("main  {PROGRAM}train.py:101"),
            format!("<module>  {PROGRAM}train.py:120"),
        ]
    );
    for noise in ["unwind", "CapturedTraceback", "CUDACachingAllocator", "_call_impl"] {
        assert!(!stack.iter().any(|f| f.contains(noise)), "{noise} in {stack:#?}");
    }
    // Every site alive at the OOM, and every large block at the peak, names the program's line.
    let sites = pm["by_site"].as_array().expect("sites");
    assert!(!sites.is_empty());
    for site in sites {
        let name = site["site"].as_str().expect("a site");
        assert!(name.starts_with("forward  user/llm/"), "{name}");
    }
    let words = pm["words"].to_string();
    assert!(words.contains("asked from forward  /home/user/llm/mlp.py:18 via forward  "), "{words}");
    let info = info_json_with(&file, &["--blocks", "5"]);
    let blocks = info["largest_blocks"].to_string();
    let devices = info["largest_blocks"]["devices"].as_array().expect("blocks by device");
    for block in devices.iter().flat_map(|d| d["blocks"].as_array().into_iter().flatten()) {
        let site = block["site"].as_str().expect("a site");
        assert!(site.starts_with("forward  user/llm/") && site.contains(" via "), "{site} in {blocks}");
    }
}
