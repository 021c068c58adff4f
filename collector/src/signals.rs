//! Signals while `vramscope record` waits for its workload, as `env` or `time` would behave:
//! Ctrl+C and Ctrl+\ reach the workload from the terminal and are ignored here, so the recorder
//! outlives it and writes the trace; SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 sent to the recorder
//! are passed on to the workload.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicI32, Ordering};

use libc::c_int;

/// The workload's pid while it runs (0: none).
static CHILD: AtomicI32 = AtomicI32::new(0);

const FORWARDED: [c_int; 4] = [libc::SIGTERM, libc::SIGHUP, libc::SIGUSR1, libc::SIGUSR2];
const IGNORED: [c_int; 2] = [libc::SIGINT, libc::SIGQUIT];

extern "C" fn forward(signal: c_int) {
    let pid = CHILD.load(Ordering::Relaxed);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe and takes plain integers.
        unsafe { libc::kill(pid, signal) };
    }
}

/// Signal handling for one workload; the previous dispositions come back when it is dropped.
pub struct Forwarding {
    previous: Vec<(c_int, libc::sighandler_t)>,
}

/// Starts forwarding signals to `pid` (call right after spawning it, so that it does not
/// inherit the ignored ones).
pub fn forward_to(pid: u32) -> Forwarding {
    CHILD.store(i32::try_from(pid).unwrap_or(0), Ordering::Relaxed);
    let handler = forward as extern "C" fn(c_int) as libc::sighandler_t;
    let mut previous = Vec::new();
    for (signal, action) in FORWARDED.iter().map(|&s| (s, handler)).chain(IGNORED.iter().map(|&s| (s, libc::SIG_IGN))) {
        // SAFETY: `action` is SIG_IGN or a handler that only calls kill.
        let old = unsafe { libc::signal(signal, action) };
        if old != libc::SIG_ERR {
            previous.push((signal, old));
        }
    }
    Forwarding { previous }
}

impl Drop for Forwarding {
    fn drop(&mut self) {
        for &(signal, old) in &self.previous {
            // SAFETY: restores a disposition `signal` returned before.
            unsafe { libc::signal(signal, old) };
        }
        CHILD.store(0, Ordering::Relaxed);
    }
}
