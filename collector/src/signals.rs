//! Signals while `vramscope record` waits for its workload, as `env` or `time` would behave:
//! Ctrl+C and Ctrl+\ reach the workload from the terminal and are ignored here, so the recorder
//! outlives it and writes the trace; SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 sent to the recorder
//! are passed on to the workload.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicI32, Ordering};

use libc::c_int;

/// The workload's pid while it runs (0: none).
static CHILD: AtomicI32 = AtomicI32::new(0);
/// A signal that came before the workload's pid was known (0: none), delivered once it is.
static PENDING: AtomicI32 = AtomicI32::new(0);

const FORWARDED: [c_int; 4] = [libc::SIGTERM, libc::SIGHUP, libc::SIGUSR1, libc::SIGUSR2];
const IGNORED: [c_int; 2] = [libc::SIGINT, libc::SIGQUIT];

/// Catches a signal and does nothing: unlike SIG_IGN, a caught signal is reset to its default
/// in a program started by `exec`, so the workload still reacts to Ctrl+C.
extern "C" fn ignore(_signal: c_int) {}

extern "C" fn forward(signal: c_int) {
    let pid = CHILD.load(Ordering::SeqCst);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe and takes plain integers.
        unsafe { libc::kill(pid, signal) };
    } else {
        PENDING.store(signal, Ordering::SeqCst);
    }
}

/// Signal handling for one workload; the previous dispositions come back when it is dropped.
pub struct Forwarding {
    previous: Vec<(c_int, libc::sighandler_t)>,
}

/// Installs the handlers; call before starting the workload (a Ctrl+C that reaches both at
/// once must not end the recorder), then tell it the workload's pid with [`Forwarding::child`].
pub fn install() -> Forwarding {
    let forward = forward as extern "C" fn(c_int) as libc::sighandler_t;
    let ignore = ignore as extern "C" fn(c_int) as libc::sighandler_t;
    let mut previous = Vec::new();
    for (signal, action) in FORWARDED.iter().map(|&s| (s, forward)).chain(IGNORED.iter().map(|&s| (s, ignore))) {
        // SAFETY: both handlers are async-signal-safe (one does nothing, one calls kill).
        let old = unsafe { libc::signal(signal, action) };
        if old != libc::SIG_ERR {
            previous.push((signal, old));
        }
    }
    Forwarding { previous }
}

impl Forwarding {
    /// Where forwarded signals go from now on.
    pub fn child(&self, pid: u32) {
        let pid = i32::try_from(pid).unwrap_or(0);
        CHILD.store(pid, Ordering::SeqCst);
        let pending = PENDING.swap(0, Ordering::SeqCst);
        if pending != 0 && pid > 0 {
            // SAFETY: kill takes plain integers.
            unsafe { libc::kill(pid, pending) };
        }
    }
}

/// Sends `signal` to the workload, if one runs (what Ctrl+C does from a terminal view that has
/// the keyboard, which the workload then does not).
pub fn to_workload(signal: c_int) {
    let pid = CHILD.load(Ordering::SeqCst);
    if pid > 0 {
        // SAFETY: kill takes plain integers.
        unsafe { libc::kill(pid, signal) };
    }
}

impl Drop for Forwarding {
    fn drop(&mut self) {
        for &(signal, old) in &self.previous {
            // SAFETY: restores a disposition `signal` returned before.
            unsafe { libc::signal(signal, old) };
        }
        CHILD.store(0, Ordering::SeqCst);
        PENDING.store(0, Ordering::SeqCst);
    }
}
