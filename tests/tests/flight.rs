//! The flight recorder: each process's driver calls go round a ring file of fixed size, which a
//! SIGKILL at any moment leaves whole up to the kill (a run of what was written, nothing torn),
//! which never grows however long the program runs, and which `vramscope DIR` opens as a run.
//! Real processes on the fake CUDA driver, with the real hook preloaded.
#![allow(clippy::expect_used)]

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use vramscope_wire::ring::{self, Ring};
use vramscope_wire::{Api, Record};

/// The hook built beside the `vramscope` binary.
fn hook() -> std::path::PathBuf {
    vramscope_e2e::vramscope_bin().with_file_name("libvramscope_hook.so")
}

/// A driver call as the client printed it, or as the ring holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Call {
    Alloc(u64, u64),
    Free(u64),
}

fn printed(text: &str) -> Vec<Call> {
    text.lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            match (words.next(), words.next().and_then(|w| w.parse().ok())) {
                (Some("alloc"), Some(a)) => Some(Call::Alloc(a, words.next()?.parse().ok()?)),
                (Some("free"), Some(a)) => Some(Call::Free(a)),
                _ => None,
            }
        })
        .collect()
}

fn call(r: &Record) -> Option<Call> {
    match r.api {
        Api::MemAlloc => Some(Call::Alloc(r.address, r.size_bytes)),
        Api::MemFree => Some(Call::Free(r.address)),
        _ => None,
    }
}

/// Runs the client's `churn` under the flight recorder with a ring of `budget` bytes in `dir`;
/// kills it with SIGKILL after `after` (or lets `calls` pairs finish); returns what it printed.
fn churn(dir: &Path, budget: u64, calls: u64, after: Option<Duration>) -> String {
    let out = dir.join("printed.txt");
    let mut child = Command::new(vramscope_fake_cuda::client("client"))
        .args(["churn", &calls.to_string()])
        .env("LD_PRELOAD", hook())
        .env(vramscope_wire::env::FLIGHT, dir)
        .env(vramscope_wire::env::FLIGHT_BYTES, budget.to_string())
        .env_remove(vramscope_wire::env::RECORD_DIR)
        .stdout(std::fs::File::create(&out).expect("printed.txt"))
        .stderr(Stdio::null())
        .spawn()
        .expect("the client runs");
    if let Some(after) = after {
        std::thread::sleep(after);
        // Child::kill is SIGKILL.
        child.kill().expect("SIGKILL");
    }
    let _ = child.wait();
    std::fs::read_to_string(out).expect("printed")
}

/// `vramscope record FLIGHT -o DIR -- client churn`, its program killed with SIGKILL after
/// `after` (the recorder then ends).
fn kill_churn_under_flight(dir: &Path, flight: &str, after: Duration) {
    let mut child = vramscope_e2e::vramscope_command()
        .args(["record", flight, "-o"])
        .arg(dir)
        .arg("--")
        .arg(vramscope_fake_cuda::client("client"))
        .arg("churn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("record runs");
    std::thread::sleep(after);
    let pid = std::fs::read_dir(dir)
        .expect("dir")
        .filter_map(Result::ok)
        .find_map(|e| e.file_name().to_str()?.strip_prefix("flight.")?.strip_suffix(".ring")?.parse::<i32>().ok())
        .expect("the program's ring");
    sigkill(pid);
    let _ = child.wait();
}

/// SIGKILL to a process that is not our child.
fn sigkill(pid: i32) {
    let status = Command::new("kill").args(["-KILL", &pid.to_string()]).status().expect("kill runs");
    assert!(status.success());
}

fn the_ring(dir: &Path) -> (std::path::PathBuf, Ring) {
    let path = std::fs::read_dir(dir)
        .expect("the directory")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension() == Some(OsStr::new("ring")))
        .expect("a ring");
    let ring = ring::read(&std::fs::read(&path).expect("read")).expect("a ring that reads");
    (path, ring)
}

/// Killed with SIGKILL at points spread over its run, a process's ring reads back as a run of
/// consecutive calls it made, ending where the kill found it (at most the last 20 ms unwritten,
/// or one call written whose line was not yet printed), nothing torn; and the allocations alive
/// where the ring begins, replayed with its calls, are what the program held at its last call.
#[test]
fn a_ring_killed_at_any_moment_reads_back_whole_up_to_the_kill() {
    for round in 0..8u64 {
        let dir = tempfile::tempdir().expect("tempdir");
        // From 40 ms to about 600 ms: before the ring first wraps and long after.
        let after = Duration::from_millis(40 + (round * 83 + u64::from(std::process::id()) % 50) % 560);
        let text = churn(dir.path(), 64 << 10, 0, Some(after));
        let calls = printed(&text);
        let (_, ring) = the_ring(dir.path());
        let kept: Vec<Call> = ring.records.iter().filter_map(call).collect();
        assert!(!kept.is_empty(), "round {round}: an empty ring after {after:?}");
        assert_eq!(kept.len(), ring.records.len(), "only the client's calls");
        // Where the ring's calls begin among the printed ones: the latest place they all match
        // (addresses come round again), at most one call past the last printed.
        let matches = |start: usize| {
            let part = &calls[start..];
            let n = kept.len().min(part.len());
            kept.len() <= part.len() + 1 && kept[..n] == part[..n]
        };
        let start = (0..calls.len()).rev().find(|&s| matches(s)).unwrap_or_else(|| {
            panic!("round {round}: the ring's {} calls are not a run of the {} made", kept.len(), calls.len())
        });
        // What was alive where the ring begins, then its calls: the program's live set.
        let mut live: BTreeMap<u64, u64> = ring
            .alive
            .iter()
            .filter_map(call)
            .filter_map(|c| if let Call::Alloc(a, s) = c { Some((a, s)) } else { None })
            .collect();
        let mut expected: BTreeMap<u64, u64> = BTreeMap::new();
        for c in &calls[..start] {
            match *c {
                Call::Alloc(a, s) => expected.insert(a, s),
                Call::Free(a) => expected.remove(&a),
            };
        }
        if ring.overwritten > 0 {
            assert_eq!(live, expected, "round {round}: the allocations alive where the ring begins");
        }
        for c in &kept {
            match *c {
                Call::Alloc(a, s) => live.insert(a, s),
                Call::Free(a) => live.remove(&a),
            };
        }
        assert!(live.len() <= 8, "round {round}: {} alive, the program keeps 8", live.len());
    }
}

/// A program that makes a hundred times more calls than its ring holds: the ring wrapped many
/// times, its file never grew past its bound (nor its blocks on disk), and what it holds is the
/// end of the run.
#[test]
fn a_ring_that_wraps_many_times_stays_within_its_bound() {
    let dir = tempfile::tempdir().expect("tempdir");
    let budget: u64 = 64 << 10;
    let text = churn(dir.path(), budget, 50_000, None);
    let calls = printed(&text);
    // Each pair frees the block eight calls back (none for the first eight).
    assert_eq!(calls.len(), 2 * 50_000 - 8);
    let (path, ring) = the_ring(dir.path());
    let meta = std::fs::metadata(&path).expect("metadata");
    assert!(meta.len() <= budget, "{} bytes, bounded by {budget}", meta.len());
    assert!(std::os::unix::fs::MetadataExt::blocks(&meta) * 512 <= budget + 4096);
    assert!(ring.overwritten >= 50, "wrapped {} segments", ring.overwritten);
    let kept: Vec<Call> = ring.records.iter().filter_map(call).collect();
    assert!(
        calls[calls.len() - kept.len()..] == kept[..],
        "the ring's {} calls are not the end of the run",
        kept.len()
    );
}

/// `record --flight` over a program that forks: each process keeps its own ring, kept when the
/// program is killed, and `vramscope info DIR` opens the directory as the run, saying that what
/// came before each ring was overwritten.
#[test]
fn record_flight_keeps_each_process_and_opens_as_a_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let flight = dir.path().join("run.flight");
    let output = vramscope_e2e::vramscope_command()
        .args(["record", "--flight=64KiB", "-o"])
        .arg(&flight)
        .arg("--")
        .arg(vramscope_fake_cuda::client("client"))
        .arg("fork")
        .output()
        .expect("record runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let rings: Vec<_> = std::fs::read_dir(&flight)
        .expect("dir")
        .filter_map(Result::ok)
        .filter(|e| e.path().extension() == Some(OsStr::new("ring")))
        .collect();
    assert_eq!(rings.len(), 2, "a ring per process");
    let output = vramscope_e2e::vramscope(&[OsStr::new("info"), OsStr::new("--json"), flight.as_os_str()]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let info: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(info["devices"][0]["peak_allocated_bytes"], 8192 + 65536, "{info}");
    // A long run under --flight and a SIGKILL: the ring stays and reads, the overwritten part said.
    let long = dir.path().join("long.flight");
    // The program, not the recorder: as the host's OOM killer would.
    kill_churn_under_flight(&long, "--flight=64KiB", Duration::from_millis(400));
    let output = vramscope_e2e::vramscope(&[OsStr::new("info"), long.as_os_str()]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("flight recorder"), "{text}");
}

/// `--flight=DURATION`: the ring reaches back that far (its segments begin at least every
/// seventh of it), not further, however many calls fit in its bytes.
#[test]
fn a_ring_given_a_duration_reaches_back_that_far() {
    let dir = tempfile::tempdir().expect("tempdir");
    let flight = dir.path().join("timed.flight");
    kill_churn_under_flight(&flight, "--flight=1s", Duration::from_millis(2500));
    let (_, ring) = the_ring(&flight);
    let last = ring.records.last().map_or(0, |r| r.time_ns);
    let reach = Duration::from_nanos(last.saturating_sub(ring.from_ns));
    // Seven whole segments of a seventh of a second each, and the one being written.
    assert!(reach >= Duration::from_millis(990) && reach <= Duration::from_millis(1200), "it reaches back {reach:?}");
    assert!(ring.overwritten > 0);
}

/// Under a launcher (torchrun), each rank keeps its own ring with the rank its environment gave
/// it, and `vramscope info DIR` shows the run rank by rank.
#[test]
fn every_rank_keeps_its_ring_and_the_directory_opens_as_a_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let flight = dir.path().join("ranks.flight");
    let torchrun = vramscope_e2e::torch_python().with_file_name("torchrun");
    let port = 31000 + std::process::id() % 20000;
    let output = vramscope_e2e::vramscope_command()
        .args(["record", "--flight=64KiB", "-o"])
        .arg(&flight)
        .arg("--")
        .arg(torchrun)
        .args(["--nproc_per_node=2", &format!("--master_port={port}"), "--no-python"])
        .arg(vramscope_fake_cuda::client("client"))
        .args(["churn", "3000"])
        .stdout(Stdio::null())
        .output()
        .expect("record runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let mut ranks: Vec<Option<u32>> = std::fs::read_dir(&flight)
        .expect("dir")
        .filter_map(Result::ok)
        .filter(|e| e.path().extension() == Some(OsStr::new("ring")))
        .map(|e| ring::read(&std::fs::read(e.path()).expect("read")).expect("a ring").place.rank)
        .collect();
    ranks.sort_unstable();
    assert_eq!(ranks, [Some(0), Some(1)]);
    let output = vramscope_e2e::vramscope(&[OsStr::new("info"), OsStr::new("--json"), flight.as_os_str()]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let info: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(info["run"]["ranks"].as_array().map(Vec::len), Some(2), "{info}");
}
