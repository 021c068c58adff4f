//! `vramscope mcp`: the official MCP client (the `mcp` package from PyPI) lists the tools and
//! calls each on real fixtures: a consistency test against the CLI's documents, with the numbers
//! also checked against the independent reference (`scripts/reference/snapshot_reference.py`) and
//! a hand-made snapshot; and the server keeps serving through hostile input on its standard input.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use vramscope_e2e::{fixtures_dir, repo_root, torch_python, vramscope_bin};

/// Consistency test: each tool's document equals the CLI JSON it mirrors; the numbers are also
/// checked against `snapshot_reference.py` and a hand-made OOM (`tests/scripts/mcp_client.py`).
#[test]
fn the_official_client_gets_the_clis_numbers_from_every_tool() {
    let work = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let script = repo_root().join("tests/scripts/mcp_client.py");
    let output = Command::new(torch_python())
        .arg(&script)
        .arg(vramscope_bin())
        .arg(work.path())
        .arg(fixtures_dir())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("all ") && stdout.contains(" checks passed"), "{stdout}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// Lines a client, a broken client or an attacker might send; each gets an answer (or none, for
/// a notification) and the server goes on.
#[test]
fn hostile_input_is_answered_and_the_server_goes_on() {
    let mut child = Command::new(vramscope_bin())
        .arg("mcp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start vramscope mcp: {e}"));
    let mut stdin = child.stdin.take().unwrap_or_else(|| panic!("no stdin"));
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let writer = std::thread::Builder::new().name("mcp-input".to_owned()).spawn(move || {
        let nested = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let mut lines: Vec<Vec<u8>> = vec![
            b"\xff\xfe\x00garbage".to_vec(),
            nested.into_bytes(),
            vec![b'x'; 5 << 20],
            // An id no integer holds: not JSON this server reads.
            br#"{"jsonrpc":"2.0","id":1e400,"method":"ping"}"#.to_vec(),
            format!(r#"{{"jsonrpc":"2.0","id":2,"method":"{}"}}"#, "m".repeat(100_000)).into_bytes(),
            br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"summary","arguments":{"paths":[]}}}"#.to_vec(),
            br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"summary","arguments":{"paths":"/dev/zero"}}}"#
                .to_vec(),
            br#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"advise","arguments":{"path":"x","gpus":-1}}}"#
                .to_vec(),
            br#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"oom","arguments":{"path":"-"}}}"#.to_vec(),
            br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}"#.to_vec(),
        ];
        lines.push(br#"{"jsonrpc":"2.0","id":"last","method":"ping"}"#.to_vec());
        for line in lines {
            stdin.write_all(&line).and_then(|()| stdin.write_all(b"\n")).unwrap_or_else(|e| panic!("{e}"));
        }
        // Closing the input ends the server.
    });
    let writer = writer.unwrap_or_else(|e| panic!("{e}"));
    let replies: Vec<serde_json::Value> = BufReader::new(stdout)
        .lines()
        .map(|l| {
            let l = l.unwrap_or_else(|e| panic!("{e}"));
            serde_json::from_str(&l).unwrap_or_else(|e| panic!("a reply that is not one JSON line ({e}): {l}"))
        })
        .collect();
    writer.join().unwrap_or_else(|_| panic!("writer"));
    let status = child.wait().unwrap_or_else(|e| panic!("{e}"));
    let stderr = child.stderr.take().map(std::io::read_to_string).and_then(Result::ok).unwrap_or_default();
    assert!(status.success(), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    // Ten requests and one notification: ten answers, in order, the last the ping.
    let codes: Vec<Option<i64>> = replies.iter().map(|r| r["error"]["code"].as_i64()).collect();
    assert_eq!(codes[..5], [Some(-32700), Some(-32700), Some(-32600), Some(-32700), Some(-32601)], "{replies:#?}");
    for (reply, id) in replies[5..9].iter().zip([3, 4, 5, 6]) {
        assert_eq!(reply["id"], id);
        assert_eq!(reply["result"]["isError"], true, "{reply}");
    }
    let text = |i: usize| replies[i]["result"]["content"][0]["text"].as_str().unwrap_or_default().to_owned();
    assert!(text(5).contains("at least one path"), "{}", text(5));
    assert!(text(6).contains("/dev/zero"), "{}", text(6));
    assert!(text(7).contains("gpus"), "{}", text(7));
    assert!(text(8).contains("standard input"), "{}", text(8));
    assert_eq!(replies.len(), 10, "{replies:#?}");
    assert_eq!(replies[9]["id"], "last");
    assert_eq!(replies[9]["result"], serde_json::json!({}));
}
