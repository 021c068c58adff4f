//! The command line: output, exit codes and error messages on bad input.

use std::ffi::OsStr;
use std::path::Path;

use vramscope_e2e::{fixtures_dir, vramscope};

fn stderr_of(args: &[&OsStr]) -> (i32, String) {
    let output = vramscope(args);
    (output.status.code().unwrap_or(-1), String::from_utf8_lossy(&output.stderr).into_owned())
}

fn info_fails(file: &Path, expected: &str) {
    let (code, stderr) = stderr_of(&["info".as_ref(), file.as_os_str()]);
    assert_eq!(code, 2, "{}: {stderr}", file.display());
    assert!(stderr.contains(&file.display().to_string()), "the error names the file: {stderr}");
    assert!(stderr.contains(expected), "expected {expected:?} in: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn text_summary_is_readable() {
    let file = fixtures_dir().join("pytorch-snapshots/gpt_ctx128_fullstep_fp32.pickle");
    let output = vramscope(&["info".as_ref(), file.as_os_str()]);
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    for expected in
        ["PyTorch memory snapshot", "19,770 allocator events", "cuda:0", "peak allocated  51.3 GiB", "1,010 segments"]
    {
        assert!(text.contains(expected), "{expected:?} missing from:\n{text}");
    }
}

#[test]
fn bad_input_gives_clear_errors_and_exit_status_2() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let write = |name: &str, bytes: &[u8]| {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{e}"));
        path
    };
    info_fails(&dir.path().join("missing.pickle"), "cannot read");
    info_fails(&write("empty.pickle", b""), "empty");
    info_fails(&write("notes.pickle", b"just some text"), "not a format vramscope reads");
    // What it does read, named: a file of no format, and JSON of no format it reads.
    info_fails(&write("notes.txt", b"just some text"), "vramscope reads PyTorch memory snapshots");
    info_fails(&write("other.json", b"{\"rows\": [1, 2]}"), "vramscope reads PyTorch memory snapshots");
    let snapshot = std::fs::read(fixtures_dir().join("pytorch-snapshots/mosaic_output.pickle")).unwrap_or_default();
    info_fails(&write("truncated.pickle", &snapshot[..snapshot.len() / 2]), "truncated");
    info_fails(
        &write("evil.pickle", b"\x80\x02cos\nsystem\nq\x00X\x02\x00\x00\x00idq\x01\x85q\x02Rq\x03."),
        "refusing",
    );
    info_fails(&write("half.json", b"{\"traceEvents\": [{\"ph\": \"i\", "), "malformed JSON");
    info_fails(&write("future.vtrace", b"\x89VTRACE\n\x07\x00\x00\x00\x00\x00\x00\x00"), "newer than this vramscope");
}

#[test]
fn convert_never_overwrites_without_force() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let source = fixtures_dir().join("pytorch-snapshots/mosaic_output.pickle");
    let out = dir.path().join("keep.vtrace");
    std::fs::write(&out, b"precious").unwrap_or_else(|e| panic!("{e}"));
    let (code, stderr) = stderr_of(&["convert".as_ref(), source.as_os_str(), "-o".as_ref(), out.as_os_str()]);
    assert_eq!(code, 2);
    assert!(stderr.contains("--force"), "{stderr}");
    assert_eq!(std::fs::read(&out).unwrap_or_default(), b"precious");
    let (code, stderr) =
        stderr_of(&["convert".as_ref(), source.as_os_str(), "-o".as_ref(), out.as_os_str(), "--force".as_ref()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(std::fs::read(&out).unwrap_or_default().starts_with(b"\x89VTRACE\n"));
    // A failed conversion leaves nothing behind.
    let bad = dir.path().join("bad.pickle");
    std::fs::write(&bad, b"\x80\x04garbage").unwrap_or_else(|e| panic!("{e}"));
    let target = dir.path().join("never.vtrace");
    let (code, _) = stderr_of(&["convert".as_ref(), bad.as_os_str(), "-o".as_ref(), target.as_os_str()]);
    assert_eq!(code, 2);
    assert!(!target.exists());
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .map(|d| d.filter_map(|e| e.ok()).filter(|e| e.file_name().to_string_lossy().ends_with(".part")).collect())
        .unwrap_or_default();
    assert!(leftovers.is_empty());
}

#[test]
fn help_explains_the_commands() {
    let output = vramscope(&["--help".as_ref()]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success());
    for expected in ["info", "convert", "PyTorch memory snapshots"] {
        assert!(text.contains(expected), "{expected:?} missing from --help:\n{text}");
    }
}

#[test]
fn a_device_the_trace_lacks_is_refused_by_name() {
    let file = fixtures_dir().join("pytorch-snapshots/mosaic_output.pickle");
    for command in ["advise", "diff"] {
        let mut args: Vec<&OsStr> = vec![command.as_ref(), file.as_os_str()];
        let other = fixtures_dir().join("pytorch-snapshots/gpt_ctx128_fullstep_fp32.pickle");
        if command == "diff" {
            args.push(other.as_os_str());
        }
        args.push("--device=cuda:3".as_ref());
        let (code, stderr) = stderr_of(&args);
        assert_eq!(code, 2, "{command}: {stderr}");
        assert!(stderr.contains("has no device cuda:3; its devices: cuda:0"), "{command}: {stderr}");
        args.pop();
        args.push("--device=gpu".as_ref());
        let (code, stderr) = stderr_of(&args);
        assert_eq!(code, 2, "{command}: {stderr}");
        assert!(stderr.contains("is not a device"), "{command}: {stderr}");
    }
    let output = vramscope(&["advise".as_ref(), file.as_os_str(), "--device=cuda:0".as_ref()]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
}

/// `--range` reads part of a trace, says so, and refuses what it cannot read, naming why.
#[test]
fn a_range_is_read_said_and_written_and_a_bad_one_is_refused() {
    let file = fixtures_dir().join("pytorch-snapshots/gpt_ctx128_fullstep_fp32.pickle");
    let output = vramscope(&["info".as_ref(), file.as_os_str(), "--range".as_ref(), "#5000..#6000".as_ref()]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8_lossy(&output.stdout);
    for expected in
        ["Only #5000..#6000 of the file is open", "5,000 events before it", "final state     no segment state"]
    {
        assert!(text.contains(expected), "{expected:?} missing from:\n{text}");
    }
    // Written to a .vtrace, the part reads back as the part, saying so.
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let out = dir.path().join("part.vtrace");
    let converted = vramscope(&[
        "convert".as_ref(),
        file.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
        "--range".as_ref(),
        "#5000..#6000".as_ref(),
    ]);
    assert!(converted.status.success(), "{}", String::from_utf8_lossy(&converted.stderr));
    let again = vramscope(&["info".as_ref(), out.as_os_str()]);
    let again = String::from_utf8_lossy(&again.stdout);
    let peak = |text: &str| text.lines().find(|l| l.contains("peak allocated")).map(str::to_owned);
    assert_eq!(peak(&again), peak(&text), "the part written keeps its numbers");
    assert!(again.contains("Only #5000..#6000 of the file is open"), "{again}");
    // The part written is cut again when a part of it is asked for.
    let twice = vramscope(&["info".as_ref(), out.as_os_str(), "--range".as_ref(), "#1800..".as_ref()]);
    let twice = String::from_utf8_lossy(&twice.stdout);
    assert!(twice.contains("Only #1800.. of the file is open") && twice.contains("1,800 events before it"), "{twice}");
    for (range, expected) in [
        ("+2s", "is not a range"),
        ("5..10", "has no unit"),
        ("#9..#3", "ends before it starts"),
        ("#1..+2s", "mixes a time and an event index"),
    ] {
        let (code, stderr) = stderr_of(&["info".as_ref(), file.as_os_str(), "--range".as_ref(), range.as_ref()]);
        assert_eq!(code, 2, "{range}: {stderr}");
        assert!(stderr.contains(expected), "{range}: expected {expected:?} in {stderr}");
    }
    // A snapshot without times has no time range to give.
    let untimed = dir.path().join("untimed.pickle");
    vramscope_e2e::run_python_code(
        "import pickle,sys; d=pickle.load(open(sys.argv[1],'rb'))\n\
         for t in d['device_traces']:\n    for e in t: e.pop('time_us', None)\n\
         pickle.dump(d, open(sys.argv[2],'wb'))",
        &[file.as_os_str(), untimed.as_os_str()],
    );
    let (code, stderr) = stderr_of(&["info".as_ref(), untimed.as_os_str(), "--range".as_ref(), "+1ms..".as_ref()]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("records no times") && stderr.contains("untimed.pickle"), "{stderr}");
}

/// `open --follow` and `record --live`: what cannot be followed is said before any window opens
/// (and before any workload runs).
#[test]
fn following_what_is_not_there_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let missing = dir.path().join("nobody-writes-this.vtrace");
    let (code, stderr) = stderr_of(&["open".as_ref(), "--follow".as_ref(), missing.as_os_str()]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains(&format!("{} does not exist, and no recording in progress", missing.display())),
        "{stderr}"
    );
    let (code, stderr) = stderr_of(&["open".as_ref(), "--follow".as_ref(), dir.path().as_os_str()]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("is not a recording in progress"), "{stderr}");
    let (code, stderr) =
        stderr_of(&["open".as_ref(), "--follow".as_ref(), missing.as_os_str(), "--range".as_ref(), "#1..#2".as_ref()]);
    assert_eq!(code, 2, "{stderr}");
    // Without a display, --live refuses before the workload runs.
    let marker = dir.path().join("ran");
    let output = vramscope_e2e::vramscope_command()
        .args(["record", "--live", "-o"])
        .arg(dir.path().join("t.vtrace"))
        .args(["--", "touch"])
        .arg(&marker)
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--live needs a display"), "{stderr}");
    assert!(!marker.exists(), "the workload must not run");
}

#[test]
fn the_readme_examples_are_what_the_commands_print() {
    // Every ```text block of the README that starts with `$ vramscope ...` is run, in the
    // fixtures' directory (so that the file is named as the README names it), and must print
    // exactly the lines that follow it.
    let readme = std::fs::read_to_string(vramscope_e2e::repo_root().join("README.md")).expect("README.md");
    let dir = fixtures_dir().join("pytorch-snapshots");
    let mut checked = 0;
    for block in readme.split("```text\n").skip(1) {
        let block = block.split("```").next().unwrap_or_default();
        let Some(command) = block.lines().next().and_then(|l| l.strip_prefix("$ vramscope ")) else { continue };
        let expected: Vec<&str> = block.lines().skip(1).collect();
        let output = vramscope_e2e::vramscope_command()
            .current_dir(&dir)
            .args(command.split_whitespace())
            .output()
            .expect("vramscope runs");
        assert!(output.status.success(), "{command}: {}", String::from_utf8_lossy(&output.stderr));
        let printed = String::from_utf8_lossy(&output.stdout);
        let printed: Vec<&str> = printed.lines().collect();
        assert_eq!(printed, expected, "the README's `vramscope {command}` is not what it prints");
        checked += 1;
    }
    assert!(checked >= 1, "no README example was found to check");
}

#[test]
fn the_app_without_a_display_says_so_and_how_to_get_one() {
    let snapshot = fixtures_dir().join("pytorch-snapshots/mosaic_output.pickle");
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let png = dir.path().join("shot.png");
    let output = vramscope_e2e::vramscope_command()
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .env_remove("WAYLAND_SOCKET")
        .arg(&snapshot)
        .arg("--screenshot")
        .arg(&png)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no display to open the app's window on") && stderr.contains("xvfb-run"), "{stderr}");
    assert!(!stderr.contains(".cargo") && !stderr.contains(".rs:"), "a source path in the message: {stderr}");
    assert!(!png.exists());
}

#[test]
fn a_range_does_not_change_what_a_block_is() {
    // The whole trace's peak lies inside each range: the blocks alive there are the same blocks,
    // and their categories must be the same whether the range is given by time or by event,
    // and whatever it folds (gradients and optimizer state of earlier steps among them).
    let file = fixtures_dir().join("pytorch-snapshots/gpt_ctx128_fullstep_fp32.pickle");
    let whole = vramscope_e2e::info_json(&file);
    let categories = |json: &serde_json::Value| json["devices"][0]["categories_at_peak"].clone();
    for range in ["+100ms..", "+300ms..", "#5000..", "#15600..", "+300ms..+394ms"] {
        let part = vramscope_e2e::info_json_with(&file, &["--range", range]);
        assert_eq!(part["devices"][0]["peak_allocated_bytes"], whole["devices"][0]["peak_allocated_bytes"], "{range}");
        // To the byte but for blocks allocated inside the whole trace whose size matches the
        // parameters' (named by size, the rule for blocks from before a recording, when a range
        // folds them): a few KiB of 51 GiB.
        let (a, b) = (categories(&part), categories(&whole));
        let keys: std::collections::BTreeSet<&String> =
            a.as_object().into_iter().chain(b.as_object()).flat_map(|o| o.keys()).collect();
        for key in keys {
            let (x, y) = (a[key].as_u64().unwrap_or(0), b[key].as_u64().unwrap_or(0));
            assert!(x.abs_diff(y) <= 4096, "--range {range}: {key} {x} against {y} for the whole trace");
        }
    }
    // A range with none of the trace's events in it is refused, by time and by event.
    for range in ["+2s..+3.5s", "#50000.."] {
        let output = vramscope(&[OsStr::new("info"), OsStr::new("--range"), OsStr::new(range), file.as_os_str()]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{range}: {stderr}");
        assert!(stderr.contains("holds none of the trace's 19,770 events"), "{range}: {stderr}");
    }
    // So is an instant after the end, and a phase the trace does not have.
    for (at, expected) in [("+10s", "after the trace's last event"), ("backward#5", "in iteration 1 only")] {
        let output = vramscope(&[OsStr::new("info"), OsStr::new("--at"), OsStr::new(at), file.as_os_str()]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{at}: {stderr}");
        assert!(stderr.contains(expected), "{at}: {stderr}");
    }
}

#[test]
fn unrelated_files_read_as_ranks_are_doubted() {
    // Three snapshots of different programs, named as ranks: read as a run, as asked, with the
    // doubt said; their peaks differ 24-fold.
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let snapshots = fixtures_dir().join("pytorch-snapshots");
    for (name, rank) in
        [("gpt_ctx128_fullstep_fp32", 0), ("mosaic_output", 1), ("stanford_cs336_a2_memory_snapshot", 2)]
    {
        std::fs::copy(snapshots.join(format!("{name}.pickle")), dir.path().join(format!("{name}_rank{rank}.pickle")))
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let output = vramscope(&[OsStr::new("info"), dir.path().as_os_str()]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("the highest peak is 24.42x the lowest"), "{stdout}");
    assert!(stdout.contains("ranks of one run seldom differ so much"), "{stdout}");
}

#[test]
fn a_timeline_exported_says_why_it_has_no_blocks() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let export = |file: &Path, name: &str| {
        let out = dir.path().join(name);
        let args = ["export".as_ref(), file.as_os_str(), "-o".as_ref(), out.as_os_str(), "--format".as_ref()];
        let output = vramscope(&[&args[..], &[OsStr::new("parquet")]].concat());
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let timeline = fixtures_dir().join("torch-profiler/mlp_adam_cpu.memory_timeline.raw.json.gz");
    let stdout = export(&timeline, "tables");
    assert!(stdout.contains("no rows in events/ or blocks/"), "{stdout}");
    // A snapshot has its blocks, and no such note.
    let snapshot = fixtures_dir().join("pytorch-snapshots/mosaic_output.pickle");
    assert!(!export(&snapshot, "snapshot-tables").contains("note:"));
}
