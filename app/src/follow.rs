//! Following a run as it goes: a recording in progress (`record --live`, `open --follow`), read
//! from its directory as the hook and the shim append to it, or a file something rewrites as it
//! runs (a snapshot dumped every few steps), read again whenever it changes.
//!
//! A named thread polls the source; when something new is there it builds the trace and what the
//! face shows of it (the app's document, the terminal view's screen: the face says how, and it
//! is built on this thread) and sends it to the face. It polls every half
//! second, or less often when building takes longer (never more than a fifth of a core), and runs at
//! a lower priority than the workload, which shares the machine. Each update builds the whole
//! trace again (docs/BENCHMARKS.md: 0.4 s at 740,000 events on an idle core, 0.5-1.3 s beside
//! a CPU workload on both cores of a 2-core machine), so the view is at most about two builds
//! behind the run. When the recording's
//! directory goes away (the workload ended and `record` merged it), it waits for the trace
//! `record` writes and sends that as the last update.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use vramscope_collector::live::{Manifest, Tail};
use vramscope_trace_format::{SourceFormat, Trace};

use crate::load::{LoadedTrace, Origin};

/// What is followed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A recording's directory while `record` runs.
    Recording(PathBuf),
    /// A file, read again each time it changes.
    File(PathBuf),
}

impl Source {
    /// Where it is followed from, for people.
    pub fn location(&self) -> String {
        match self {
            Self::Recording(dir) => format!("recording in {}", dir.display()),
            Self::File(path) => format!("{}, read again each time it changes", path.display()),
        }
    }

    /// What `vramscope open --follow [ARG]` follows: a recording directory; a file; the output
    /// of a recording in progress, before it exists; without an argument, the newest recording
    /// in progress on this machine.
    pub fn resolve(arg: Option<&Path>) -> anyhow::Result<Self> {
        use vramscope_collector::live;
        let root = std::env::temp_dir();
        let running = live::in_progress(&root);
        let Some(arg) = arg else {
            return match running.first() {
                Some(newest) => Ok(Self::Recording(newest.dir.clone())),
                None => anyhow::bail!(
                    "no recording in progress on this machine (none under {}); start one with `vramscope record \
                     --live -- CMD`, or give --follow the file to watch",
                    root.display()
                ),
            };
        };
        if arg.is_dir() {
            let recording = arg.join(live::MANIFEST).exists()
                || std::fs::read_dir(arg)?.filter_map(Result::ok).any(|e| {
                    e.file_name().to_str().is_some_and(|n| n.starts_with("events.") || n.starts_with("torch."))
                });
            anyhow::ensure!(
                recording,
                "{} is not a recording in progress (no {} in it); --follow takes the directory `vramscope record` \
                 prints, its -o file, or a file to watch",
                arg.display(),
                live::MANIFEST
            );
            return Ok(Self::Recording(arg.to_owned()));
        }
        // The output of a recording in progress: follow the recording, not an older file.
        let wanted = std::path::absolute(arg).unwrap_or_else(|_| arg.to_owned());
        if let Some(found) = running.iter().find(|r| r.manifest.output.as_deref() == Some(wanted.as_path())) {
            return Ok(Self::Recording(found.dir.clone()));
        }
        anyhow::ensure!(
            arg.exists(),
            "{} does not exist, and no recording in progress on this machine writes it",
            arg.display()
        );
        Ok(Self::File(arg.to_owned()))
    }

    /// What is followed, for people: the command recorded, or the file.
    pub fn describe(&self) -> String {
        match self {
            Self::Recording(dir) => match Manifest::read(dir) {
                Some(m) if !m.command.is_empty() => m.command.join(" "),
                _ => format!("the recording in {}", dir.display()),
            },
            Self::File(path) => path.display().to_string(),
        }
    }
}

/// Where a followed run stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    /// Still going: each update is the newest state.
    Live,
    /// The run is over; its trace was written here (`None`: none was).
    Ended(Option<PathBuf>),
}

enum Message<T> {
    /// A new state of the run: what the face shows of it, where the run stands, its events.
    Update(Box<T>, Status, usize),
    /// Something to tell the user (the following goes on).
    Note(String),
}

/// What the thread and the window share.
struct Shared {
    stop: AtomicBool,
    /// The process to show, by pid (0: the one that peaks highest, chosen at the first update
    /// that has several, then kept).
    chosen_pid: AtomicU32,
    /// Set to wake the thread before its next poll (another process chosen, or stop).
    wake: (Mutex<bool>, Condvar),
}

impl Shared {
    /// Sleeps up to `time`, or until woken; whether it was woken.
    fn sleep(&self, time: Duration) -> bool {
        let (lock, condvar) = &self.wake;
        let Ok(guard) = lock.lock() else { return false };
        let (mut woken, _) = match condvar.wait_timeout_while(guard, time, |w| !*w) {
            Ok(result) => result,
            Err(_) => return false,
        };
        std::mem::replace(&mut *woken, false)
    }

    fn wake(&self) {
        let (lock, condvar) = &self.wake;
        if let Ok(mut woken) = lock.lock() {
            *woken = true;
            condvar.notify_all();
        }
    }
}

/// A followed run, seen from the face: the newest of what it shows, built on the following
/// thread.
pub struct Follower<T> {
    /// What is followed.
    pub source: Source,
    /// What is followed, for people ([`Source::describe`] when following started).
    pub label: String,
    /// Where the run stands, as of the last update.
    pub status: Status,
    /// When the last update came.
    pub last_update: Option<Instant>,
    /// Events in the last update.
    pub events: usize,
    /// The last thing the follower had to say (a file that did not read, ...).
    pub note: Option<String>,
    shared: Arc<Shared>,
    receiver: Receiver<Message<T>>,
}

/// The shortest time between two polls.
const POLL_EVERY: Duration = Duration::from_millis(500);

impl<T: Send + 'static> Follower<T> {
    /// Starts following `source`. Each new state of the run is turned into what the face shows
    /// by `build` (given the trace, where it came from, and the process to show, which it may
    /// choose: [`process_to_show`]), on the following thread; `repaint` is called when one is
    /// ready.
    pub fn start(
        source: Source,
        build: impl FnMut(Trace, Origin, &AtomicU32) -> T + Send + 'static,
        repaint: impl Fn() + Send + Sync + 'static,
    ) -> anyhow::Result<Self> {
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            chosen_pid: AtomicU32::new(0),
            wake: (Mutex::new(false), Condvar::new()),
        });
        let (sender, receiver) = std::sync::mpsc::channel();
        let thread_shared = Arc::clone(&shared);
        let thread_source = source.clone();
        std::thread::Builder::new().name("vramscope-follow".to_owned()).spawn(move || {
            lower_priority();
            let out = Out {
                sender,
                build: std::cell::RefCell::new(Box::new(build)),
                repaint: Box::new(repaint),
                shared: thread_shared,
            };
            match thread_source {
                Source::Recording(dir) => follow_recording(&dir, &out),
                Source::File(path) => follow_file(&path, &out),
            }
        })?;
        let label = source.describe();
        Ok(Self { source, label, status: Status::Live, last_update: None, events: 0, note: None, shared, receiver })
    }

    /// The newest update since the last call, if any (older ones are dropped).
    pub fn poll(&mut self) -> Option<T> {
        let mut newest = None;
        while let Ok(message) = self.receiver.try_recv() {
            match message {
                Message::Update(value, status, events) => {
                    self.note = None;
                    newest = Some((value, status, events));
                }
                Message::Note(note) => self.note = Some(note),
            }
        }
        let (value, status, events) = newest?;
        self.status = status;
        self.last_update = Some(Instant::now());
        self.events = events;
        Some(*value)
    }

    /// Shows process `pid` from the next update on (at once: the thread is woken).
    pub fn choose_process(&self, pid: u32) {
        self.shared.chosen_pid.store(pid, Ordering::Relaxed);
        self.shared.wake();
    }

    /// Whether the run is over.
    pub fn ended(&self) -> bool {
        matches!(self.status, Status::Ended(_))
    }
}

impl<T> Drop for Follower<T> {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.shared.wake();
    }
}

/// How a face turns a state of the run into what it shows.
type Build<T> = dyn FnMut(Trace, Origin, &AtomicU32) -> T + Send;

/// The thread's way out.
struct Out<T> {
    sender: Sender<Message<T>>,
    build: std::cell::RefCell<Box<Build<T>>>,
    repaint: Box<dyn Fn() + Send + Sync>,
    shared: Arc<Shared>,
}

impl<T> Out<T> {
    fn stopped(&self) -> bool {
        self.shared.stop.load(Ordering::Relaxed)
    }

    /// Sends a message; false when the window is gone.
    fn send(&self, message: Message<T>) -> bool {
        let sent = self.sender.send(message).is_ok();
        (self.repaint)();
        sent
    }

    fn note(&self, note: String) -> bool {
        self.send(Message::Note(note))
    }

    /// Builds and sends the update of `trace`.
    fn update(&self, trace: Trace, origin: Origin, status: Status) -> bool {
        let events = trace.events.len();
        let value = (self.build.borrow_mut())(trace, origin, &self.shared.chosen_pid);
        self.send(Message::Update(Box::new(value), status, events))
    }
}

/// The calling thread yields to the workload: it runs at nice 10 (Linux sets it per thread).
#[allow(unsafe_code)]
pub fn lower_priority() {
    // SAFETY: setpriority on the calling thread (who = 0) has no memory effects.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, 10);
    }
}

/// The process of `trace` to show: the one chosen (`chosen_pid`, by pid), else the one that
/// peaks highest, which is then kept as chosen once it has memory to show (a launcher such as
/// torchrun starts first and allocates nothing: the ranks come after it).
pub fn process_to_show(trace: &Trace, chosen_pid: &AtomicU32) -> usize {
    let pid = chosen_pid.load(Ordering::Relaxed);
    let process = trace
        .metadata
        .processes
        .iter()
        .position(|p| pid != 0 && p.pid == Some(pid))
        .unwrap_or_else(|| crate::runs::highest_process(trace));
    let has_events = trace.events.iter().any(|e| e.process.0 as usize == process);
    if let Some(pid) = trace.metadata.processes.get(process).and_then(|p| p.pid).filter(|_| has_events) {
        chosen_pid.store(pid, Ordering::Relaxed);
    }
    process
}

/// How many times as long as a build the follower waits after it: following takes at most a
/// fifth of one core, beside a workload that may be using every core (measured on this 2-core
/// machine: half a core slowed a CPU training run by a quarter; docs/BENCHMARKS.md).
const PAUSE_PER_BUILD: u32 = 4;

/// How long to wait before the next poll, after a build that took `built`: at least
/// [`POLL_EVERY`], and [`PAUSE_PER_BUILD`] times the build (at a lower priority than the
/// workload's, too).
fn pause_after(built: Duration) -> Duration {
    POLL_EVERY.max(built * PAUSE_PER_BUILD)
}

fn follow_recording<T>(dir: &Path, out: &Out<T>) {
    let manifest = Manifest::read(dir);
    let command = manifest.as_ref().map(|m| m.command.clone()).unwrap_or_default();
    let output = manifest.as_ref().and_then(|m| m.output.clone());
    // An older file at the output (recorded again with --force) is not this run's trace.
    let older = output.as_deref().and_then(signature);
    let facts = vramscope_collector::devices::device_facts();
    let mut tail = Tail::new(dir);
    let mut shown_pid = 0;
    let mut sent_any = false;
    while !out.stopped() {
        let started = Instant::now();
        match tail.poll() {
            Ok(polled) => {
                let chosen = out.shared.chosen_pid.load(Ordering::Relaxed);
                if polled.any() || !sent_any || chosen != shown_pid {
                    let polled_at = started.elapsed();
                    let mut trace = tail.trace(&command);
                    let merged_at = started.elapsed();
                    vramscope_collector::devices::add_facts(&mut trace, &facts);
                    let mut origin = recording_origin(dir, output.as_deref());
                    origin.warnings = tail.unreadable();
                    let events = trace.events.len();
                    if !out.update(trace, origin, Status::Live) {
                        return;
                    }
                    if std::env::var_os("VRAMSCOPE_TIMINGS").is_some() {
                        eprintln!(
                            "vramscope: live update of {events} events read in {:.0} ms, merged in {:.0} ms, shown in {:.0} ms",
                            polled_at.as_secs_f64() * 1e3,
                            (merged_at - polled_at).as_secs_f64() * 1e3,
                            (started.elapsed() - merged_at).as_secs_f64() * 1e3
                        );
                    }
                    sent_any = true;
                    shown_pid = out.shared.chosen_pid.load(Ordering::Relaxed);
                }
            }
            // The directory is gone: `record` has merged it and is writing the trace.
            Err(_) if !dir.exists() => return finished(output.as_deref(), older, manifest.as_ref(), out),
            Err(error) => {
                if !out.note(format!("cannot read the recording in {}: {error}", dir.display())) {
                    return;
                }
            }
        }
        // A recorder that died without cleaning up: nothing more will come. A flight recorder's
        // directory is what it leaves by design: its rings, read whole, are the run.
        if manifest.as_ref().is_some_and(|m| !m.recorder_alive()) && dir.exists() {
            if output.is_none() && tail.has_rings() {
                let started = Instant::now();
                match crate::load::load(dir, None) {
                    Ok(loaded) => {
                        let (trace, origin) = Origin::of(loaded, started.elapsed());
                        let status = Status::Ended(Some(dir.to_owned()));
                        if out.update(trace.clone(), origin.clone(), status.clone()) {
                            show_other_processes(&trace, &origin, &status, out);
                        }
                    }
                    Err(error) => {
                        out.note(format!("the flight recorder's rings do not read: {error:#}"));
                    }
                }
                return;
            }
            return finished(output.as_deref(), older, manifest.as_ref(), out);
        }
        out.shared.sleep(pause_after(started.elapsed()));
    }
}

/// The recording is over: its trace, once `record` has written it (a file at the output that
/// is not the `older` one), is the last update.
fn finished<T>(output: Option<&Path>, older: Option<Signature>, manifest: Option<&Manifest>, out: &Out<T>) {
    let waiting = Instant::now();
    loop {
        if out.stopped() {
            return;
        }
        if let Some(path) = output.filter(|p| signature(p).is_some_and(|now| Some(now) != older)) {
            let started = Instant::now();
            match crate::load::load(path, None) {
                Ok(loaded) => {
                    let (trace, origin) = Origin::of(loaded, started.elapsed());
                    let status = Status::Ended(Some(path.to_owned()));
                    if out.update(trace.clone(), origin.clone(), status.clone()) {
                        show_other_processes(&trace, &origin, &status, out);
                    }
                }
                Err(error) => {
                    out.note(format!("the run ended, but its trace does not read: {error:#}"));
                }
            }
            return;
        }
        // `record` writes the trace right after merging; a recorder gone (or one that never
        // said where it writes) and nothing there after a while means there will be none.
        let recorder_gone = manifest.is_none_or(|m| !m.recorder_alive());
        if (recorder_gone && waiting.elapsed() > Duration::from_secs(2)) || output.is_none() {
            out.send(Message::Note("the run ended without a trace written (the recorder stopped)".to_owned()));
            return;
        }
        out.shared.sleep(Duration::from_millis(200));
    }
}

/// The run is over and shown: another process of it, when one is chosen, until the face goes.
fn show_other_processes<T>(trace: &Trace, origin: &Origin, status: &Status, out: &Out<T>) {
    let mut shown = out.shared.chosen_pid.load(Ordering::Relaxed);
    while !out.stopped() {
        out.shared.sleep(POLL_EVERY);
        let chosen = out.shared.chosen_pid.load(Ordering::Relaxed);
        if chosen != shown {
            if !out.update(trace.clone(), origin.clone(), status.clone()) {
                return;
            }
            shown = out.shared.chosen_pid.load(Ordering::Relaxed);
        }
    }
}

/// A live recording's origin: the trace it will become (its directory until then).
fn recording_origin(dir: &Path, output: Option<&Path>) -> Origin {
    let file_bytes = std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(Result::ok).filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum())
        .unwrap_or(0);
    Origin {
        path: output.map_or_else(|| dir.to_owned(), Path::to_owned),
        format: SourceFormat::Vtrace,
        wrappers: Vec::new(),
        file_bytes,
        warnings: Vec::new(),
        load_time: Duration::ZERO,
    }
}

/// A file's identity for "has it changed": its size and modification time.
type Signature = (u64, std::time::SystemTime);

/// The [`Signature`] of the file at `path`, if there is one.
fn signature(path: &Path) -> Option<Signature> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.len(), meta.modified().ok()?))
}

fn follow_file<T>(path: &Path, out: &Out<T>) {
    let mut loaded_as = None;
    let mut previous = None;
    let mut shown_pid = 0;
    let mut last: Option<LoadedTrace> = None;
    while !out.stopped() {
        let started = Instant::now();
        let now = signature(path);
        let chosen = out.shared.chosen_pid.load(Ordering::Relaxed);
        // Read once it has changed and stayed the same for one poll (not while it is written).
        if now.is_some() && now != loaded_as && now == previous {
            loaded_as = now;
            let sent = match crate::load::load(path, None) {
                Ok(loaded) => send_file(last.insert(loaded), out),
                Err(error) => out.note(format!("{error:#} (the last version that read stays shown)")),
            };
            if !sent {
                return;
            }
            shown_pid = out.shared.chosen_pid.load(Ordering::Relaxed);
        } else if chosen != shown_pid
            && let Some(loaded) = &last
        {
            if !send_file(loaded, out) {
                return;
            }
            shown_pid = out.shared.chosen_pid.load(Ordering::Relaxed);
        } else if now.is_none() && previous.is_some() {
            out.note(format!("{} is gone (the last version that read stays shown)", path.display()));
        }
        previous = now;
        out.shared.sleep(pause_after(started.elapsed()));
    }
}

fn send_file<T>(loaded: &LoadedTrace, out: &Out<T>) -> bool {
    let origin = Origin {
        path: loaded.path.clone(),
        format: loaded.format,
        wrappers: loaded.wrappers.clone(),
        file_bytes: loaded.file_bytes,
        warnings: loaded.warnings.clone(),
        load_time: Duration::ZERO,
    };
    out.update(loaded.trace.clone(), origin, Status::Live)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn following_never_takes_more_than_a_fifth_of_a_core() {
        assert_eq!(pause_after(Duration::from_millis(10)), POLL_EVERY);
        assert_eq!(pause_after(Duration::from_secs(1)), Duration::from_secs(4));
    }

    /// A launcher (torchrun) starts first and allocates nothing: the process shown is the rank
    /// that has memory, kept from then on, not the launcher.
    #[test]
    fn a_launcher_without_memory_is_not_the_process_kept() {
        use vramscope_trace_format::{Event, EventKind, ProcessId, ProcessInfo};
        let mut trace = Trace::default();
        for pid in [100, 101] {
            trace.metadata.processes.push(ProcessInfo { pid: Some(pid), ..ProcessInfo::default() });
        }
        let chosen = AtomicU32::new(0);
        // Only the launcher so far: shown, not kept.
        assert_eq!((process_to_show(&trace, &chosen), chosen.load(Ordering::Relaxed)), (0, 0));
        let mut e = Event::new(EventKind::Alloc, 5, 0, 0x10, 4096);
        e.process = ProcessId(1);
        trace.events.push(e);
        assert_eq!((process_to_show(&trace, &chosen), chosen.load(Ordering::Relaxed)), (1, 101));
        // Kept, even when another peaks higher later.
        let mut e = Event::new(EventKind::Alloc, 6, 0, 0x20, 1 << 30);
        e.process = ProcessId(0);
        trace.events.push(e);
        assert_eq!(process_to_show(&trace, &chosen), 1);
    }

    #[test]
    fn a_missing_file_that_no_recording_writes_is_refused() {
        let error = Source::resolve(Some(Path::new("/nonexistent/run.vtrace"))).unwrap_err().to_string();
        assert!(error.contains("/nonexistent/run.vtrace does not exist, and no recording in progress"), "{error}");
        let dir = tempfile::tempdir().unwrap();
        let error = Source::resolve(Some(dir.path())).unwrap_err().to_string();
        assert!(error.contains("is not a recording in progress"), "{error}");
        std::fs::write(dir.path().join("events.5.bin"), b"").unwrap();
        assert_eq!(Source::resolve(Some(dir.path())).unwrap(), Source::Recording(dir.path().to_owned()));
    }
}
