//! The terminal view (`vramscope top`, `vramscope record --tui`) in a real terminal: tmux at
//! 80x24, keys sent with `send-keys`, the screen read with `capture-pane`; the numbers on it
//! checked against `info --json` of the same trace, formatted here independently.

use std::path::Path;
use std::time::Duration;

use vramscope_e2e::{Tmux, bytes_said, fixtures_dir, repo_root, torch_python, vramscope};

fn info(file: &Path) -> serde_json::Value {
    let output = vramscope(&["info".as_ref(), "--json".as_ref(), file.as_os_str()]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}"))
}

fn number(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// The screen's numbers for one device are info's: allocated and reserved now and at the peak,
/// and each category at the peak.
fn assert_screen_is_info(screen: &str, device: &serde_json::Value) {
    let line = |start: &str| {
        screen.lines().find(|l| l.starts_with(start)).unwrap_or_else(|| panic!("no {start:?} line in:\n{screen}"))
    };
    let allocated = line("allocated ");
    assert!(
        allocated.contains(&format!("{:>9} now", bytes_said(number(&device["allocated_bytes"])))),
        "{allocated}\n{device}"
    );
    assert!(
        allocated.contains(&format!("peak {:>9}", bytes_said(number(&device["peak_allocated_bytes"])))),
        "{allocated}"
    );
    if device["reserved_recorded"] == true {
        let reserved = line("reserved ");
        assert!(reserved.contains(&format!("{:>9} now", bytes_said(number(&device["reserved_bytes"])))), "{reserved}");
        assert!(
            reserved.contains(&format!("peak {:>9}", bytes_said(number(&device["peak_reserved_bytes"])))),
            "{reserved}"
        );
    }
    let categories = device["categories_at_peak"].as_object().unwrap_or_else(|| panic!("{device}"));
    assert!(!categories.is_empty());
    let mut shown = 0;
    for (name, bytes) in categories {
        let label = name.replace('_', " ");
        let Some(row) = screen.lines().find(|l| l.starts_with(&format!("│{label} "))) else { continue };
        // The last column of the category table is the bytes at the peak.
        let table = row.split('│').nth(1).unwrap_or_default();
        assert!(table.trim_end().ends_with(&bytes_said(number(bytes))), "{label}: {row} (info: {bytes})");
        shown += 1;
    }
    // Those that did not fit are counted in a last row.
    let more = screen
        .lines()
        .find_map(|l| l.split("… ").nth(1).and_then(|r| r.split(" more").next()))
        .map_or(0, |n| n.trim().parse::<usize>().unwrap_or(0));
    assert!(shown >= 4.min(categories.len()), "{shown} categories shown of {}:\n{screen}", categories.len());
    assert!(shown + more >= categories.len(), "{shown} shown and {more} more of {}:\n{screen}", categories.len());
}

/// Consistency test (the screen shows `info --json`'s numbers), with the numbers also checked
/// against the independent reference (`scripts/reference/snapshot_reference.py`).
#[test]
fn top_on_a_trace_shows_infos_numbers_and_answers_its_keys() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let file = fixtures_dir().join("pytorch-snapshots/gpt_ctx128_fullstep_fp32.pickle");
    let bin = vramscope_e2e::vramscope_bin();
    let tmux = Tmux::start(dir.path(), &format!("{} top {}", bin.display(), file.display()));
    let screen = tmux.wait_for("the trace", Duration::from_secs(60), |s| s.contains("by category"));
    let expected = info(&file);
    assert_screen_is_info(&screen, &expected["devices"][0]);
    let mut theirs = vramscope_e2e::reference(&file)["devices"][0].clone();
    theirs["reserved_recorded"] = true.into();
    assert_screen_is_info(&screen, &theirs);
    assert!(screen.contains("[cuda:0]"), "{screen}");
    assert!(screen.contains("optimizer_step of iteration 1"), "{screen}");
    assert!(screen.lines().last().is_some_and(|l| l.contains(" q  quit")), "the keys on the last row:\n{screen}");
    // The help, closed by any key; the recent chart's window.
    tmux.keys("?");
    tmux.wait_for("the help", Duration::from_secs(10), |s| s.contains("next, previous process"));
    tmux.keys("x");
    tmux.wait_for("the view again", Duration::from_secs(10), |s| s.contains("by category"));
    tmux.keys("w");
    let screen = tmux.wait_for("a 5-minute window", Duration::from_secs(10), |s| s.contains("window 5 min"));
    assert!(screen.contains(" last 5 min: "), "{screen}");
    tmux.keys("q");
    let screen = tmux.wait_for("the exit", Duration::from_secs(10), |s| s.contains("EXIT="));
    assert!(screen.contains("EXIT=0"), "{screen}");
    assert!(!screen.contains("panicked"), "{screen}");
}

#[test]
fn top_refuses_without_a_terminal_and_says_what_to_use() {
    let file = fixtures_dir().join("pytorch-snapshots/mosaic_output.pickle");
    let output = vramscope(&["top".as_ref(), file.as_os_str()]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("info --json"), "{stderr}");
    let output = vramscope(&["top".as_ref(), "/nonexistent/run.vtrace".as_ref()]);
    assert!(String::from_utf8_lossy(&output.stderr).contains("does not exist"));
}

/// A real CPU PyTorch run recorded with the view up: live while it trains (its output in the
/// log, not on the screen), then the finished trace, whose numbers are info's.
#[test]
fn record_tui_follows_a_pytorch_run_and_ends_on_its_trace() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let trace = dir.path().join("train.vtrace");
    let command = format!(
        "{} record --tui -o {} -- {} {} --device cpu --steps 150 --print",
        vramscope_e2e::vramscope_bin().display(),
        trace.display(),
        torch_python().display(),
        repo_root().join("samples/pytorch/train.py").display()
    );
    let tmux = Tmux::start(dir.path(), &command);
    let live = tmux.wait_for("a live screen with memory", Duration::from_secs(120), |s| {
        s.contains("live, updated") && s.contains("by category") && !s.contains("allocated       0 B now")
    });
    assert!(live.contains("optimizer") || live.contains("forward") || live.contains("backward"), "{live}");
    let finished = tmux.wait_for("the finished trace", Duration::from_secs(180), |s| s.contains("finished:"));
    let expected = info(&trace);
    let host = expected["devices"]
        .as_array()
        .and_then(|d| d.iter().find(|d| d["device"] == -1))
        .unwrap_or_else(|| panic!("no host device in {expected}"));
    assert_screen_is_info(&finished, host);
    // The workload's output went to the log, not over the view.
    let log = std::fs::read_to_string(trace.with_extension("log")).unwrap_or_default();
    assert!(log.contains("loss"), "{log}");
    assert!(!finished.contains("loss"), "{finished}");
    tmux.keys("q");
    let after = tmux.wait_for("the exit", Duration::from_secs(30), |s| s.contains("EXIT="));
    assert!(after.contains("EXIT=0"), "{after}");
    assert!(after.contains("the workload's output:"), "{after}");
}

/// Two ranks of a DDP run (torchrun, gloo) recorded with the view up: each rank's numbers, the
/// rank switched with `p`, are info's of that rank's own trace.
#[test]
fn record_tui_switches_between_the_ranks_of_a_run() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let trace = dir.path().join("ddp.vtrace");
    let torchrun = torch_python().with_file_name("torchrun");
    let command = format!(
        "{} record --tui -o {} -- {} --nproc_per_node=2 --master_port={} {}",
        vramscope_e2e::vramscope_bin().display(),
        trace.display(),
        torchrun.display(),
        20000 + std::process::id() % 20000 + 7,
        repo_root().join("tests/scripts/ddp_gloo.py").display()
    );
    let tmux = Tmux::start(dir.path(), &command);
    let mut screen = tmux.wait_for("the finished run", Duration::from_secs(240), |s| s.contains("finished:"));
    let mut seen = Vec::new();
    for _ in 0..4 {
        let shown = screen
            .lines()
            .nth(1)
            .and_then(|l| l.split('[').nth(1))
            .and_then(|l| l.split(']').next())
            .unwrap_or_default()
            .to_owned();
        // `rank 1 (pid 7)`, as every face names a process.
        let shown = shown.split(" (pid ").next().unwrap_or_default().to_owned();
        if let Some(rank) = shown.strip_prefix("rank ") {
            let part = dir.path().join(format!("ddp.rank{rank}.vtrace"));
            let expected = info(&part);
            let host = expected["devices"]
                .as_array()
                .and_then(|d| d.iter().find(|d| d["device"] == -1))
                .unwrap_or_else(|| panic!("no host device in {expected}"));
            assert_screen_is_info(&screen, host);
            seen.push(shown.clone());
        }
        tmux.keys("p");
        // The header and the numbers are drawn from one state: once the header names another
        // process, the numbers are its.
        screen = tmux.wait_for("another process", Duration::from_secs(30), |s| {
            !s.lines().nth(1).unwrap_or_default().contains(&format!("[{shown}]"))
                && (s.contains("by category") || s.contains("no memory events"))
        });
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen, ["rank 0", "rank 1"], "{screen}");
    tmux.keys("q");
    let after = tmux.wait_for("the exit", Duration::from_secs(30), |s| s.contains("EXIT="));
    assert!(after.contains("EXIT=0"), "{after}");
}
