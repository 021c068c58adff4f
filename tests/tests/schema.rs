//! The published schema of the documents (`vramscope schema`): held in `docs/schema.json`, so a
//! change to a document's shape is a reviewed change, and every JSON answer of the CLI and of the
//! MCP server validated against it by an independent implementation of JSON Schema (Python's
//! `jsonschema`), on every fixture and sample.

use std::process::Command;

use vramscope_e2e::{fixtures_dir, repo_root, torch_python, vramscope, vramscope_bin};

#[test]
fn the_schema_is_the_reviewed_one() {
    let output = vramscope(&["schema".as_ref()]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let printed = String::from_utf8_lossy(&output.stdout);
    let path = repo_root().join("docs/schema.json");
    let held = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        printed == held,
        "the documents' schema changed: review the change, raise SCHEMA_VERSION if a field was removed or \
         renamed, and write it with `vramscope schema > docs/schema.json`"
    );
    let value: serde_json::Value = serde_json::from_str(&held).unwrap_or_else(|e| panic!("{e}"));
    // Every document `schema --list` names has its schema, and no other.
    let list = vramscope(&["schema".as_ref(), "--list".as_ref()]);
    let listed: Vec<String> = String::from_utf8_lossy(&list.stdout)
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect();
    let held: Vec<String> = value["documents"].as_object().map(|d| d.keys().cloned().collect()).unwrap_or_default();
    let (mut a, mut b) = (listed.clone(), held);
    a.sort();
    b.sort();
    assert_eq!(a, b, "every document listed has its schema");
    assert!(listed.len() >= 10, "{listed:?}");
    for name in ["info", "oom", "diff", "advise"] {
        let one = vramscope(&["schema".as_ref(), name.as_ref()]);
        let one: serde_json::Value = serde_json::from_slice(&one.stdout).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(one, value["documents"][name], "`vramscope schema {name}` is its part of the whole");
    }
    let unknown = vramscope(&["schema".as_ref(), "nonsense".as_ref()]);
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("give one of info, run, oom"));
}

#[test]
fn every_json_answer_validates_against_the_schema() {
    let work = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let script = repo_root().join("tests/scripts/validate_documents.py");
    let output = Command::new(torch_python())
        .arg(&script)
        .arg(vramscope_bin())
        .arg(work.path())
        .arg(fixtures_dir())
        .arg(repo_root().join("samples/traces"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("answers validate"), "{stdout}");
}
