//! Time the hook adds to a driver call, side by side with the un-hooked call, in one run.
//!
//! ```text
//! cargo bench -p vramscope-hook --bench overhead
//! ```
//!
//! The fake driver's client times 100,000 `cuMemAlloc_v2` + `cuMemFree_v2` pairs (best of 5) four
//! ways: without the hook, with the hook loaded but no recording directory (dormant), recording,
//! and under the flight recorder (a ring of 64 MiB: every call also kept in the set of what is
//! alive, and written round the ring).

use std::path::PathBuf;
use std::process::Command;

fn ns_per_call(
    preload: Option<&PathBuf>,
    record_dir: Option<&std::path::Path>,
    flight: Option<&std::path::Path>,
) -> f64 {
    let mut command = Command::new(vramscope_fake_cuda::client("client"));
    command.arg("bench");
    if let Some(hook) = preload {
        command.env("LD_PRELOAD", hook);
    }
    if let Some(dir) = record_dir {
        command.env(vramscope_wire::env::RECORD_DIR, dir);
    }
    if let Some(dir) = flight {
        command.env(vramscope_wire::env::FLIGHT, dir);
    }
    let output = command.output().unwrap_or_else(|e| panic!("cannot run the client: {e}"));
    let text = String::from_utf8_lossy(&output.stdout);
    text.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("client said: {text}"))
}

fn main() {
    // cargo bench builds the hook beside this binary (target/<profile>/deps); only `cargo build`
    // copies it up to target/<profile>, which may be older.
    let exe = std::env::current_exe().unwrap_or_default();
    let hook = exe.parent().map(|d| d.join("libvramscope_hook.so")).unwrap_or_default();
    assert!(hook.exists(), "{} is missing: build the hook crate in this profile first", hook.display());
    let dir = std::env::temp_dir().join(format!("vramscope-overhead-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let flight = dir.join("flight");
    let _ = std::fs::create_dir_all(&flight);
    let plain = ns_per_call(None, None, None);
    let dormant = ns_per_call(Some(&hook), None, None);
    let recording = ns_per_call(Some(&hook), Some(&dir), None);
    let ring = ns_per_call(Some(&hook), None, Some(&flight));
    let _ = std::fs::remove_dir_all(&dir);
    println!("| call | ns per call | added by the hook |");
    println!("|---|---|---|");
    println!("| fake driver, no hook | {plain:.0} | |");
    println!("| hook loaded, not recording | {dormant:.0} | {:.0} ns |", dormant - plain);
    println!("| hook recording | {recording:.0} | {:.0} ns |", recording - plain);
    println!("| hook, flight recorder | {ring:.0} | {:.0} ns |", ring - plain);
}
