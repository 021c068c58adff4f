//! Serving a recording to a viewer on another machine (`record --serve`, `serve`, `top
//! --connect`), on loopback: the fake driver's controllable run followed through a viewer killed
//! and started again, and through a recorder killed and its directory served again; the copy's
//! trace at the end equal to the file, byte for byte. And the server against hostile peers.

use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use vramscope_e2e::{Tmux, fixtures_dir, vramscope_bin};
use vramscope_wire::serve::{Frame, Hello, VERSION};

const TOKEN: &str = "e2e-token";

/// A port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("{e}"))
}

fn wait_for_file(path: &Path, within: Duration) {
    let started = Instant::now();
    while !path.exists() {
        assert!(started.elapsed() < within, "{} did not appear within {within:?}", path.display());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `record --serve` of the fake driver's controllable run (`client live CTRL`), its stderr in a file.
fn record_served(dir: &Path, port: u16, ctrl: &Path, out: &Path) -> Child {
    std::fs::create_dir_all(ctrl).unwrap_or_else(|e| panic!("{e}"));
    let stderr = std::fs::File::create(dir.join("record.err")).unwrap_or_else(|e| panic!("{e}"));
    Command::new(vramscope_bin())
        .args(["record", "--serve", &format!("127.0.0.1:{port}"), "-o"])
        .arg(out)
        .arg("--")
        .arg(vramscope_fake_cuda::client("client"))
        .arg("live")
        .arg(ctrl)
        .env("VRAMSCOPE_TOKEN", TOKEN)
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A viewer in a real terminal: `top --connect`, its copy under `cache`.
fn viewer(dir: &Path, cache: &Path, port: u16) -> Tmux {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{e}"));
    Tmux::start(
        dir,
        &format!(
            "env XDG_CACHE_HOME={} VRAMSCOPE_TOKEN={TOKEN} {} top --connect 127.0.0.1:{port}",
            cache.display(),
            vramscope_bin().display()
        ),
    )
}

/// Kills the viewer's vramscope abruptly (SIGKILL), as a lost laptop would.
fn kill_viewer(port: u16) {
    let pattern = format!("top --connect 127.0.0.1:{port}");
    let status = Command::new("pkill").args(["-9", "-f", &pattern]).status().unwrap_or_else(|e| panic!("{e}"));
    assert!(status.success(), "no viewer to kill");
}

/// The copy's directory: the one run under `cache`.
fn copy_of(cache: &Path) -> PathBuf {
    let remote = cache.join("vramscope/remote");
    let mut runs: Vec<PathBuf> = std::fs::read_dir(&remote)
        .unwrap_or_else(|e| panic!("{}: {e}", remote.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    runs.remove(0)
}

/// The recording directory the copy is of: its id ends with the directory's name.
fn served_dir(copy: &Path) -> PathBuf {
    let id = copy.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let name = &id[id.find("vramscope-record-").unwrap_or_else(|| panic!("{id}"))..];
    std::env::temp_dir().join(name)
}

/// Every file copied so far is the start of the served one: nothing lost, nothing twice.
fn assert_copy_is_a_prefix(copy: &Path, served: &Path) {
    let recording = copy.join("recording");
    let mut compared = 0;
    for entry in std::fs::read_dir(&recording).unwrap_or_else(|e| panic!("{e}")).filter_map(Result::ok) {
        let name = entry.file_name().into_string().unwrap_or_default();
        if name == "recording.json" {
            continue;
        }
        let ours = std::fs::read(entry.path()).unwrap_or_default();
        let theirs = std::fs::read(served.join(&name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            theirs.starts_with(&ours),
            "{name}: the copy ({} bytes) is not the start of the served ({} bytes)",
            ours.len(),
            theirs.len()
        );
        compared += usize::from(!ours.is_empty());
    }
    assert!(compared > 0, "nothing copied in {}", recording.display());
}

#[test]
fn a_viewer_killed_and_started_again_ends_with_the_recorded_trace() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (ctrl, out, cache, port) =
        (dir.path().join("ctrl"), dir.path().join("run.vtrace"), dir.path().join("cache"), free_port());
    let mut recorder = record_served(dir.path(), port, &ctrl, &out);
    wait_for_file(&ctrl.join("first.ready"), Duration::from_secs(30));
    let first = viewer(&dir.path().join("v1"), &cache, port);
    first.wait_for("the first megabyte", Duration::from_secs(30), |s| s.contains("1.00 MiB now"));
    let copy = copy_of(&cache);
    assert_copy_is_a_prefix(&copy, &served_dir(&copy));
    kill_viewer(port);
    drop(first);
    // The run goes on without a viewer.
    std::fs::write(ctrl.join("first.go"), b"").unwrap_or_else(|e| panic!("{e}"));
    wait_for_file(&ctrl.join("second.ready"), Duration::from_secs(30));
    // A new viewer carries on the same copy.
    let second = viewer(&dir.path().join("v2"), &cache, port);
    second.wait_for("the parent's 4 MiB", Duration::from_secs(30), |s| s.contains("4.00 MiB now"));
    assert_eq!(copy_of(&cache), copy);
    assert_copy_is_a_prefix(&copy, &served_dir(&copy));
    std::fs::write(ctrl.join("second.go"), b"").unwrap_or_else(|e| panic!("{e}"));
    let screen = second.wait_for("the finished trace", Duration::from_secs(60), |s| s.contains("finished:"));
    let _ = recorder.wait();
    let theirs = std::fs::read(&out).unwrap_or_else(|e| panic!("{e}"));
    let ours = std::fs::read(copy.join("trace.vtrace")).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        ours == theirs,
        "the copy's trace ({} bytes) differs from the file ({} bytes)\n{screen}",
        ours.len(),
        theirs.len()
    );
    second.keys("q");
    let after = second.wait_for("the exit", Duration::from_secs(10), |s| s.contains("EXIT="));
    assert!(after.contains("EXIT=0"), "{after}");
    let said = std::fs::read_to_string(dir.path().join("record.err")).unwrap_or_default();
    assert!(said.contains(&format!("--connect 127.0.0.1:{port} --token {TOKEN}")), "{said}");
}

#[test]
fn a_killed_recorder_is_served_again_from_its_directory() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (ctrl, out, cache, port) =
        (dir.path().join("ctrl"), dir.path().join("run.vtrace"), dir.path().join("cache"), free_port());
    let mut recorder = record_served(dir.path(), port, &ctrl, &out);
    wait_for_file(&ctrl.join("first.ready"), Duration::from_secs(30));
    let view = viewer(&dir.path().join("v"), &cache, port);
    view.wait_for("the first megabyte", Duration::from_secs(30), |s| s.contains("1.00 MiB now"));
    let copy = copy_of(&cache);
    let served = served_dir(&copy);
    recorder.kill().unwrap_or_else(|e| panic!("{e}"));
    let _ = recorder.wait();
    // The workload goes on and ends without its recorder.
    std::fs::write(ctrl.join("first.go"), b"").unwrap_or_else(|e| panic!("{e}"));
    wait_for_file(&ctrl.join("second.ready"), Duration::from_secs(30));
    std::fs::write(ctrl.join("second.go"), b"").unwrap_or_else(|e| panic!("{e}"));
    assert!(!out.exists(), "a killed recorder writes no trace");
    // Its directory served again on the same port: the viewer, trying all along, gets the trace.
    let mut server = Command::new(vramscope_bin())
        .arg("serve")
        .arg(&served)
        .args(["--addr", &format!("127.0.0.1:{port}"), "--token", TOKEN])
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    view.wait_for("the finished trace", Duration::from_secs(60), |s| s.contains("finished:"));
    let converted = dir.path().join("converted.vtrace");
    let status = Command::new(vramscope_bin())
        .arg("convert")
        .arg(&served)
        .arg("-o")
        .arg(&converted)
        .stderr(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(status.success());
    let ours = std::fs::read(copy.join("trace.vtrace")).unwrap_or_else(|e| panic!("{e}"));
    let theirs = std::fs::read(&converted).unwrap_or_else(|e| panic!("{e}"));
    assert!(ours == theirs, "the copy's trace ({} bytes) differs from convert's ({} bytes)", ours.len(), theirs.len());
    view.keys("q");
    // A viewer started again once the copy is whole shows it, and the server has nothing to add.
    let again = viewer(&dir.path().join("again"), &cache, port);
    again.wait_for("the copied trace", Duration::from_secs(30), |s| s.contains("by category"));
    std::thread::sleep(Duration::from_secs(2));
    again.keys("q");
    let after = again.wait_for("the exit", Duration::from_secs(10), |s| s.contains("EXIT="));
    assert!(after.contains("EXIT=0") && !after.contains("lost"), "{after}");
    assert!(std::fs::read(copy.join("trace.vtrace")).is_ok_and(|b| b == theirs));
    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&served);
}

/// Says hello with `token`, returns what the server answers.
fn hello(port: u16, token: &str) -> (TcpStream, Frame) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap_or_else(|e| panic!("{e}"));
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap_or_else(|e| panic!("{e}"));
    Frame::Hello(Hello { version: VERSION, token: token.to_owned() })
        .write(&mut stream)
        .unwrap_or_else(|e| panic!("{e}"));
    let answer = Frame::read(&mut stream).unwrap_or_else(|e| panic!("{e}"));
    (stream, answer)
}

#[test]
fn the_server_refuses_what_it_should_and_serves_the_file_whole() {
    let port = free_port();
    let file = fixtures_dir().join("pytorch-snapshots/mosaic_output.pickle");
    let mut server = Command::new(vramscope_bin())
        .arg("serve")
        .arg(&file)
        .args(["--addr", &port.to_string(), "--token", TOKEN])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let started = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(started.elapsed() < Duration::from_secs(20), "the server did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Garbage, a frame claiming 4 GiB, a hello of another version, no token, a wrong one.
    for bytes in [&b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..], &[1, 0xff, 0xff, 0xff, 0xff][..], &[0u8; 64][..]] {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap_or_else(|e| panic!("{e}"));
        stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap_or_else(|e| panic!("{e}"));
        let _ = stream.write_all(bytes);
        let answer = Frame::read(&mut stream);
        assert!(!matches!(answer, Ok(Frame::Welcome(_))), "{bytes:?} was welcomed");
    }
    let (_, answer) = hello(port, "");
    assert!(matches!(&answer, Frame::Refused(why) if why.contains("asks for a token")), "{answer:?}");
    let (_, answer) = hello(port, "guess");
    assert!(matches!(&answer, Frame::Refused(why) if why.contains("wrong token")), "{answer:?}");
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap_or_else(|e| panic!("{e}"));
    Frame::Hello(Hello { version: 99, token: TOKEN.to_owned() }).write(&mut stream).unwrap_or_else(|e| panic!("{e}"));
    let answer = Frame::read(&mut stream).unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(&answer, Frame::Refused(why) if why.contains("same vramscope")), "{answer:?}");
    // The one who has the token gets the file, whole, and the server is still there for it.
    let (mut stream, answer) = hello(port, TOKEN);
    assert!(matches!(answer, Frame::Welcome(_)), "{answer:?}");
    Frame::Have(Vec::new()).write(&mut stream).unwrap_or_else(|e| panic!("{e}"));
    let mut got = Vec::new();
    loop {
        match Frame::read(&mut stream).unwrap_or_else(|e| panic!("{e}")) {
            Frame::Data { offset, bytes, .. } => {
                assert_eq!(offset, got.len() as u64);
                got.extend_from_slice(&bytes);
            }
            Frame::Done { size, .. } => {
                assert_eq!(size, got.len() as u64);
                break;
            }
            Frame::Reset { .. } | Frame::Alive => {}
            other => panic!("{other:?}"),
        }
    }
    assert!(got == std::fs::read(&file).unwrap_or_default(), "the file came whole");
    let _ = server.kill();
    let output = server.wait_with_output().unwrap_or_else(|e| panic!("{e}"));
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains(&format!("serving on 127.0.0.1:{port}")), "loopback unless asked: {said}");
}

/// A real CPU PyTorch run served as it trains: a viewer killed mid-run, another started; the
/// trace it ends with is the recorded file, byte for byte.
#[test]
fn a_pytorch_run_served_live_ends_with_the_same_trace() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (out, cache, port) = (dir.path().join("train.vtrace"), dir.path().join("cache"), free_port());
    let mut recorder = Command::new(vramscope_bin())
        .args(["record", "--serve", &format!("127.0.0.1:{port}"), "-o"])
        .arg(&out)
        .arg("--")
        .arg(vramscope_e2e::torch_python())
        .arg(vramscope_e2e::repo_root().join("samples/pytorch/train.py"))
        .args(["--device", "cpu", "--steps", "150"])
        .env("VRAMSCOPE_TOKEN", TOKEN)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let started = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(started.elapsed() < Duration::from_secs(60), "the recorder did not serve");
        std::thread::sleep(Duration::from_millis(100));
    }
    let first = viewer(&dir.path().join("v1"), &cache, port);
    first.wait_for("a live screen", Duration::from_secs(120), |s| {
        s.contains("live, updated") && s.contains("by category")
    });
    kill_viewer(port);
    drop(first);
    let copy = copy_of(&cache);
    assert_copy_is_a_prefix(&copy, &served_dir(&copy));
    let second = viewer(&dir.path().join("v2"), &cache, port);
    second.wait_for("the finished trace", Duration::from_secs(180), |s| s.contains("finished:"));
    assert!(recorder.wait().is_ok_and(|s| s.success()));
    let ours = std::fs::read(copy.join("trace.vtrace")).unwrap_or_else(|e| panic!("{e}"));
    let theirs = std::fs::read(&out).unwrap_or_else(|e| panic!("{e}"));
    assert!(ours == theirs, "the copy's trace ({} bytes) differs from the file ({} bytes)", ours.len(), theirs.len());
    second.keys("q");
}
