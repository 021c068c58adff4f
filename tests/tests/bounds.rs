//! Bounded time and memory on hostile input: small files that used to abort the process, take
//! minutes, or be accepted as garbage (`tests/scripts/hostile.py` writes them and says what each
//! must give), FIFOs and devices, and what `record`, `convert` and `report` do before and around
//! their work. Time and memory are measured from outside the process.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;
use vramscope_e2e::{measured, measured_with, repo_root, run_python, vramscope, vramscope_bin, vramscope_command};

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn hostile_files_are_read_or_refused_within_bounds() {
    let dir = tempdir();
    run_python(&repo_root().join("tests/scripts/hostile.py"), &[dir.path().as_os_str()]);
    let manifest: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("manifest.json")).unwrap_or_default())
            .unwrap_or_else(|e| panic!("{e}"));
    assert!(manifest.len() >= 15);
    for entry in &manifest {
        let file = dir.path().join(entry["file"].as_str().unwrap_or_default());
        let env: Vec<(String, String)> = entry["env"]
            .as_object()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned())).collect())
            .unwrap_or_default();
        let run = measured_with(&["info".as_ref(), file.as_os_str()], &env);
        let name = file.display();
        let expect = entry["expect"].as_str().unwrap_or_default();
        assert_eq!(run.code, entry["exit"].as_i64().map(|c| c as i32), "{name}: {}", run.stderr);
        assert!(run.stderr.contains(expect), "{name}: expected {expect:?} in {}", run.stderr);
        assert!(
            !run.stderr.contains("panicked") && !run.stderr.contains("memory allocation"),
            "{name}: {}",
            run.stderr
        );
        if run.code == Some(2) {
            assert!(run.stderr.contains(&name.to_string()), "the error names the file: {}", run.stderr);
        }
        let seconds = entry["seconds"].as_f64().unwrap_or(10.0);
        let rss_mib = entry["rss_mib"].as_u64().unwrap_or(200);
        assert!(run.seconds < seconds, "{name}: {:.1} s, the limit is {seconds} s", run.seconds);
        assert!(run.peak_kib < rss_mib << 10, "{name}: {} MiB, the limit is {rss_mib} MiB", run.peak_kib >> 10);
    }
}

#[test]
fn pipes_and_devices_are_refused_at_once_and_standard_input_is_read() {
    let dir = tempdir();
    let fifo = dir.path().join("trace.fifo");
    let status = Command::new("mkfifo").arg(&fifo).status().unwrap_or_else(|e| panic!("{e}"));
    assert!(status.success());
    for (path, what) in
        [(fifo.as_path(), "a named pipe"), (Path::new("/dev/zero"), "a character device"), (dir.path(), "a directory")]
    {
        // A FIFO without a writer used to block in open() forever.
        let run = measured(&["info".as_ref(), path.as_os_str()]);
        assert_eq!(run.code, Some(2), "{}: {}", path.display(), run.stderr);
        assert!(run.stderr.contains(what) && run.stderr.contains("standard input"), "{}", run.stderr);
        assert!(run.seconds < 5.0);
    }
    // '-' reads standard input, compressed or not.
    let fixture = vramscope_e2e::fixtures_dir().join("pytorch-snapshots/mosaic_output.pickle");
    let mut child = vramscope_command()
        .args(["info", "--json", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let data = std::fs::read(&fixture).unwrap_or_default();
    if let Some(mut stdin) = child.stdin.take() {
        std::io::Write::write_all(&mut stdin, &data).unwrap_or_else(|e| panic!("{e}"));
    }
    let output = child.wait_with_output().unwrap_or_else(|e| panic!("{e}"));
    assert!(output.status.success());
    let piped: Value = serde_json::from_slice(&output.stdout).unwrap_or_default();
    let mut direct = vramscope_e2e::info_json(&fixture);
    direct["format"] = piped["format"].clone();
    assert_eq!(piped["devices"], direct["devices"]);
}

/// `record` refuses an output it cannot write before the workload runs (the workload here would
/// leave a marker file), and what it writes gets the permissions the umask gives.
#[test]
fn record_checks_its_output_first_and_files_follow_the_umask() {
    let dir = tempdir();
    let marker = dir.path().join("ran");
    let touch = format!("touch {}", marker.display());
    for (output, expected) in
        [(dir.path().join("missing/x.vtrace"), "does not exist"), (dir.path().to_path_buf(), "is a directory")]
    {
        let out = vramscope(&[
            "record".as_ref(),
            "-o".as_ref(),
            output.as_os_str(),
            "--".as_ref(),
            "sh".as_ref(),
            "-c".as_ref(),
            OsStr::new(&touch),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
        assert!(!marker.exists(), "the workload ran although its output could not be written");
    }
    // umask 027: new files are 0640, as with `>` in a shell (the temporary file used to stay 0600).
    let fixture = vramscope_e2e::fixtures_dir().join("pytorch-snapshots/mosaic_output.pickle");
    let converted = dir.path().join("m.vtrace");
    let report = dir.path().join("m.png");
    let script = format!(
        "umask 027 && {bin} convert {f} -o {c} && {bin} report {f} -o {r}",
        bin = vramscope_bin().display(),
        f = fixture.display(),
        c = converted.display(),
        r = report.display()
    );
    let status = Command::new("sh").arg("-c").arg(&script).status().unwrap_or_else(|e| panic!("{e}"));
    assert!(status.success());
    for file in [&converted, &report] {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(file).map(|m| m.permissions().mode() & 0o777).unwrap_or(0);
        assert_eq!(mode, 0o640, "{}: {mode:o}", file.display());
    }
}

/// An interrupted (or aborted) `convert` leaves no temporary file behind (it reads standard input here, which
/// never ends, so the temporary file is there when the signal comes).
#[test]
fn an_interrupted_convert_leaves_nothing_behind() {
    // ABRT: what the allocator does when the system refuses it memory.
    for signal in ["INT", "TERM", "ABRT"] {
        let dir = tempdir();
        let output = dir.path().join("out.vtrace");
        let mut child = vramscope_command()
            .args(["convert".as_ref(), "-".as_ref(), "-o".as_ref(), output.as_os_str()])
            .stdin(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{e}"));
        let part = || {
            std::fs::read_dir(dir.path())
                .map(|d| d.filter_map(Result::ok).any(|e| e.file_name().to_string_lossy().ends_with(".part")))
                .unwrap_or(false)
        };
        let started = std::time::Instant::now();
        while !part() {
            assert!(started.elapsed().as_secs() < 20, "no temporary file appeared");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let status = Command::new("kill").args([&format!("-{signal}"), &child.id().to_string()]).status();
        assert!(status.is_ok_and(|s| s.success()));
        let exit = child.wait().unwrap_or_else(|e| panic!("{e}"));
        assert!(!exit.success(), "{signal}: {exit:?}");
        assert!(!part(), "{signal}: the temporary file is still there");
        assert!(!output.exists());
        drop(child.stdin.take());
    }
}
