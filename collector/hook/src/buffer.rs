//! Records buffered per process and written in batches: by a writer thread every
//! [`FLUSH_EVERY`], when [`FLUSH_AT_BYTES`] have gathered, at `exit` and at `_exit`. A call then
//! costs an append instead of a system call; a SIGKILL loses at most the last [`FLUSH_EVERY`].
//!
//! One lock guards the buffer and the file. It is a spin lock that yields, not a mutex, so that
//! `fork` can hold it across the fork (`pthread_atfork`) and release it in the child, where the
//! state is then reset for the child's own file.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use libc::c_int;

/// How long a record may wait in the buffer.
pub const FLUSH_EVERY: Duration = Duration::from_millis(20);
/// How much may gather before the call that fills it writes it out.
pub const FLUSH_AT_BYTES: usize = 64 * 1024;

struct SpinLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: access to `value` only happens through a guard, which exists while `locked` is held.
unsafe impl<T: Send> Sync for SpinLock<T> {}

struct Guard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> SpinLock<T> {
    const fn new(value: T) -> Self {
        Self { locked: AtomicBool::new(false), value: UnsafeCell::new(value) }
    }

    fn lock(&self) -> Guard<'_, T> {
        let mut spins = 0u32;
        while self.locked.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        Guard { lock: self }
    }

    /// Releases a lock whose guard was forgotten (across `fork`).
    fn force_unlock(&self) {
        self.locked.store(false, Ordering::Release);
    }
}

impl<T> Deref for Guard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the lock.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for Guard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard holds the lock, so this is the only reference.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for Guard<'_, T> {
    fn drop(&mut self) {
        self.lock.force_unlock();
    }
}

/// Where a process's records go.
pub enum Sink {
    /// Appended to a file.
    File(c_int),
    /// Round a flight recorder's ring.
    Ring(Box<crate::flight::Ring>),
    /// Nowhere (it could not be opened).
    None,
}

struct State {
    /// The process the state belongs to (after a fork, the child starts afresh).
    pid: u32,
    sink: Sink,
    bytes: Vec<u8>,
    /// Whether a writer thread runs for `pid`.
    writer: bool,
}

static STATE: SpinLock<State> = SpinLock::new(State { pid: 0, sink: Sink::None, bytes: Vec::new(), writer: false });

fn write_all(fd: c_int, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is valid for its length.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n <= 0 {
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        bytes = bytes.get(n as usize..).unwrap_or_default();
    }
}

fn flush_locked(state: &mut State) {
    if !state.bytes.is_empty() {
        match &mut state.sink {
            Sink::File(fd) => write_all(*fd, &state.bytes),
            Sink::Ring(ring) => ring.write(&state.bytes),
            Sink::None => {}
        }
    }
    state.bytes.clear();
}

extern "C" fn before_fork() {
    // Held across the fork: neither process can then see the state half-changed.
    std::mem::forget(STATE.lock());
}

extern "C" fn after_fork_parent() {
    STATE.force_unlock();
}

/// Bumped in every forked child: cached process and thread ids from before are stale.
static FORK_GENERATION: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

extern "C" fn after_fork_child() {
    FORK_GENERATION.fetch_add(1, Ordering::Relaxed);
    // The child's first record resets the state for its own pid and file.
    STATE.force_unlock();
}

thread_local! {
    /// This thread's (fork generation, pid, tid), so a call costs no system call for them.
    static IDS: std::cell::Cell<(u32, u32, u32)> = const { std::cell::Cell::new((u32::MAX, 0, 0)) };
}

/// The calling process's and thread's ids.
pub fn ids() -> (u32, u32) {
    // Before the first id is cached, so that a fork is always seen.
    register_process_hooks();
    let generation = FORK_GENERATION.load(Ordering::Relaxed);
    IDS.with(|cached| {
        let (g, pid, tid) = cached.get();
        if g == generation {
            return (pid, tid);
        }
        // SAFETY: getpid and gettid have no preconditions.
        let (pid, tid) = unsafe { (libc::getpid() as u32, libc::gettid() as u32) };
        cached.set((generation, pid, tid));
        (pid, tid)
    })
}

extern "C" fn at_exit() {
    flush();
}

fn register_process_hooks() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: the callbacks only take and release the lock, or flush.
        unsafe {
            libc::pthread_atfork(Some(before_fork), Some(after_fork_parent), Some(after_fork_child));
            libc::atexit(at_exit);
        }
    });
}

fn start_writer(pid: u32) -> bool {
    std::thread::Builder::new()
        .name("vramscope-writer".to_owned())
        .spawn(move || {
            loop {
                std::thread::sleep(FLUSH_EVERY);
                let mut state = STATE.lock();
                if state.pid != pid {
                    return;
                }
                flush_locked(&mut state);
                let sync = match &mut state.sink {
                    Sink::Ring(ring) => ring.sync_due(crate::now_ns()),
                    _ => None,
                };
                drop(state);
                if let Some(fd) = sync {
                    // SAFETY: the ring's file, open for the process's life.
                    unsafe { libc::fdatasync(fd) };
                }
            }
        })
        .is_ok()
}

/// Appends a record of process `pid`; `open` opens where its records go the first time.
pub fn push(record: &[u8], pid: u32, open: impl FnOnce() -> Sink) {
    let mut state = STATE.lock();
    if state.pid != pid {
        // First record of this process (or of a forked child: the parent's buffer is not ours;
        // its file stays open in the child, unused).
        state.pid = pid;
        state.bytes.clear();
        state.writer = false;
        let sink = open();
        // A forked child's copy of the parent's ring is the parent's: forgotten, not dropped.
        std::mem::forget(std::mem::replace(&mut state.sink, sink));
    }
    if matches!(state.sink, Sink::None) {
        return;
    }
    state.bytes.extend_from_slice(record);
    let start = !state.writer;
    state.writer = true;
    if state.bytes.len() >= FLUSH_AT_BYTES {
        flush_locked(&mut state);
    }
    drop(state);
    if start && !start_writer(pid) {
        // No thread: write each record at once instead.
        flush();
    }
}

/// Writes out what the buffer holds for this process.
pub fn flush() {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    let mut state = STATE.lock();
    if state.pid == pid {
        flush_locked(&mut state);
    }
}
