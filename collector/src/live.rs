//! A recording read while it is written, and how a viewer finds one in progress.
//!
//! The hook appends 64-byte records to `events.<pid>.bin` (flushed every 20 ms) and the shim
//! appends JSON lines to `torch.<pid>.jsonl` (at each drain); nothing is ever rewritten. A
//! [`Tail`] keeps where it stopped in each file and reads only what was added since: a record or
//! line still being written is held back until it is whole, and it counts as cut short only once
//! the recording is over ([`Tail::finish`]). The end-of-run merge reads the directory the same
//! way, in one poll, so a live view and the final trace are built from the same code.
//!
//! `record` writes a small manifest, `recording.json`, into the directory before the workload
//! starts ([`Manifest`]): the recorder's pid, the command and where the trace will be written,
//! so `vramscope open --follow` can find a recording in progress by its output's name, or the
//! newest one, and knows where the finished trace lands once the directory is gone.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use vramscope_trace_format::Trace;

use crate::merge::{self, Recorded};
use crate::torch::{Line, Log};
use crate::wire::{RECORD_BYTES, Record};

/// The manifest's file name in a recording directory.
pub const MANIFEST: &str = "recording.json";

/// The prefix of the directories `record` makes under the system's temporary directory.
pub const DIR_PREFIX: &str = "vramscope-record-";

/// What `record` says about a recording in its directory.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The `vramscope record` process.
    pub recorder_pid: u32,
    /// The workload's command line.
    pub command: Vec<String>,
    /// Where the trace is written when the workload ends (absolute where it could be made so).
    #[serde(default)]
    pub output: Option<PathBuf>,
}

impl Manifest {
    /// Writes the manifest into `dir`.
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        let text = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        // Written beside and renamed, so a reader never sees half of it.
        let partial = dir.join(format!("{MANIFEST}.partial"));
        std::fs::write(&partial, text)?;
        std::fs::rename(partial, dir.join(MANIFEST))
    }

    /// Reads the manifest of `dir`, if it has one that reads.
    pub fn read(dir: &Path) -> Option<Self> {
        let text = std::fs::read(dir.join(MANIFEST)).ok()?;
        serde_json::from_slice(&text).ok()
    }

    /// Whether the recorder is still running.
    pub fn recorder_alive(&self) -> bool {
        process_alive(self.recorder_pid)
    }
}

/// Whether process `pid` exists (Linux: its `/proc` entry).
pub fn process_alive(pid: u32) -> bool {
    pid != 0 && Path::new("/proc").join(pid.to_string()).exists()
}

/// A recording in progress, found on this machine.
#[derive(Clone, Debug)]
pub struct InProgress {
    /// Its directory.
    pub dir: PathBuf,
    /// Its manifest.
    pub manifest: Manifest,
    /// When its manifest was written.
    pub modified: std::time::SystemTime,
}

/// The recordings in progress under `root` (the system's temporary directory for `record`'s own),
/// newest first: directories named `vramscope-record-*` with a manifest whose recorder runs.
pub fn in_progress(root: &Path) -> Vec<InProgress> {
    let Ok(entries) = std::fs::read_dir(root) else { return Vec::new() };
    let mut found: Vec<InProgress> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with(DIR_PREFIX)))
        .filter_map(|e| {
            let dir = e.path();
            let manifest = Manifest::read(&dir)?;
            let modified = std::fs::metadata(dir.join(MANIFEST)).and_then(|m| m.modified()).ok()?;
            manifest.recorder_alive().then_some(InProgress { dir, manifest, modified })
        })
        .collect();
    found.sort_by_key(|f| std::cmp::Reverse(f.modified));
    found
}

/// Where one file was read up to, and the bytes of a record or line not yet whole.
#[derive(Debug, Default)]
struct Partial {
    offset: u64,
    rest: Vec<u8>,
}

impl Partial {
    /// Reads what was appended to `path` since the last call (at most `limit` bytes): what was
    /// held back followed by what was read, and how many bytes were read.
    fn read_new(&mut self, path: &Path, limit: u64) -> std::io::Result<(Vec<u8>, u64)> {
        let mut file = std::fs::File::open(path)?;
        let len = file.metadata()?.len();
        if len < self.offset {
            // Truncated under us: nobody should, but never read garbage from the old offset.
            return Err(std::io::Error::other(format!("{} shrank while it was read", path.display())));
        }
        file.seek(SeekFrom::Start(self.offset))?;
        let mut bytes = std::mem::take(&mut self.rest);
        let before = bytes.len();
        file.take(limit).read_to_end(&mut bytes)?;
        let new = (bytes.len() - before) as u64;
        self.offset += new;
        Ok((bytes, new))
    }
}

/// A recording directory read as it grows.
#[derive(Debug)]
pub struct Tail {
    dir: PathBuf,
    hook_files: BTreeMap<PathBuf, Partial>,
    log_files: BTreeMap<u32, (PathBuf, Partial)>,
    records: Vec<Record>,
    /// By process id.
    logs: Vec<Log>,
    /// Whether records came in out of time order since they were last sorted.
    unsorted: bool,
    /// Whole 64-byte pieces of hook files that were not records (damage, another writer).
    unreadable_records: usize,
    /// A flight recorder's rings, read whole again whenever one changed (they are written round,
    /// not appended to), and each ring file's size and time when last read.
    rings: crate::flight::Rings,
    ring_stamps: BTreeMap<PathBuf, (u64, Option<std::time::SystemTime>)>,
}

/// What one poll read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Polled {
    /// Driver-level records added.
    pub records: usize,
    /// Shim log lines added.
    pub lines: usize,
    /// Bytes read (whole records and lines, and parts of ones still being written).
    pub bytes: u64,
}

impl Polled {
    /// Whether anything was added.
    pub fn any(&self) -> bool {
        self.records > 0 || self.lines > 0
    }
}

/// The order of records: time, then process and thread.
fn order(r: &Record) -> (u64, u32, u32) {
    (r.time_ns, r.pid, r.tid)
}

/// Bytes read from one file per poll at most, so that a viewer attaching to a long recording
/// shows something soon and catches up over a few polls.
const POLL_BYTES: u64 = 256 << 20;

impl Tail {
    /// A tail of `dir`, nothing read yet.
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_owned(),
            hook_files: BTreeMap::new(),
            log_files: BTreeMap::new(),
            records: Vec::new(),
            logs: Vec::new(),
            unsorted: false,
            unreadable_records: 0,
            rings: crate::flight::Rings::default(),
            ring_stamps: BTreeMap::new(),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Reads everything `dir` holds now and says what it found, as the end of a recording does.
    pub fn read_all(dir: &Path) -> std::io::Result<(Recorded, Vec<Log>)> {
        let mut tail = Self::new(dir);
        // Each poll reads a bounded piece of each file: until nothing is left.
        while tail.poll()?.bytes > 0 {}
        Ok(tail.finish())
    }

    /// Reads what was added to the directory's files since the last poll (new files too).
    pub fn poll(&mut self) -> std::io::Result<Polled> {
        let mut polled = Polled::default();
        let mut names: Vec<(String, PathBuf)> = std::fs::read_dir(&self.dir)?
            .filter_map(Result::ok)
            .filter_map(|e| Some((e.file_name().into_string().ok()?, e.path())))
            .collect();
        names.sort();
        // Rings: read again, all of them, when one changed.
        let stamps: BTreeMap<PathBuf, (u64, Option<std::time::SystemTime>)> = names
            .iter()
            .filter(|(name, _)| crate::flight::is_ring(name))
            .filter_map(|(_, path)| std::fs::metadata(path).ok().map(|m| (path.clone(), (m.len(), m.modified().ok()))))
            .collect();
        if stamps != self.ring_stamps {
            self.rings = crate::flight::read(&self.dir);
            self.ring_stamps = stamps;
            polled.records += self.rings.rings.iter().map(|r| r.records.len()).sum::<usize>();
        }
        for (name, path) in names {
            if name.starts_with("events.") && name.ends_with(".bin") {
                let partial = self.hook_files.entry(path.clone()).or_default();
                let (bytes, new) = partial.read_new(&path, POLL_BYTES)?;
                polled.bytes += new;
                let chunks = bytes.chunks_exact(RECORD_BYTES);
                partial.rest = chunks.remainder().to_vec();
                let before = self.records.len();
                let whole = chunks.len();
                self.records.extend(chunks.filter_map(Record::decode));
                self.unreadable_records += whole - (self.records.len() - before);
                let start = before.saturating_sub(1);
                if !self.records.get(start..).is_some_and(|tail| tail.is_sorted_by_key(order)) {
                    self.unsorted = true;
                }
                polled.records += self.records.len() - before;
            } else if let Some(pid) =
                name.strip_prefix("torch.").and_then(|n| n.strip_suffix(".jsonl")).and_then(|n| n.parse::<u32>().ok())
            {
                let (_, partial) = self.log_files.entry(pid).or_insert_with(|| (path.clone(), Partial::default()));
                let (bytes, new) = partial.read_new(&path, POLL_BYTES)?;
                polled.bytes += new;
                let at = match self.logs.binary_search_by_key(&pid, |l| l.pid) {
                    Ok(at) => at,
                    Err(at) => {
                        self.logs.insert(at, Log { pid, lines: Vec::new(), skipped: 0 });
                        at
                    }
                };
                let Some(log) = self.logs.get_mut(at) else { continue };
                let whole = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
                for line in bytes[..whole].split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                    match serde_json::from_slice::<Line>(line) {
                        Ok(parsed) => {
                            log.lines.push(parsed);
                            polled.lines += 1;
                        }
                        Err(_) => log.skipped += 1,
                    }
                }
                partial.rest = bytes[whole..].to_vec();
            }
        }
        if self.unsorted {
            // Each file is in time order; files interleave. A stable sort of runs is cheap.
            self.records.sort_by_key(order);
            self.unsorted = false;
        }
        Ok(polled)
    }

    /// Whether the directory holds a flight recorder's rings.
    pub fn has_rings(&self) -> bool {
        !self.ring_stamps.is_empty()
    }

    /// The driver-level records read so far, in time order.
    pub fn records(&self) -> &[Record] {
        &self.records
    }

    /// The shim logs read so far, by process id.
    pub fn logs(&self) -> &[Log] {
        &self.logs
    }

    /// What could not be read so far, for people (pieces of hook files that are not records,
    /// shim log lines that do not parse); empty when all of it read.
    pub fn unreadable(&self) -> Vec<String> {
        let mut said = Vec::new();
        if self.unreadable_records > 0 {
            said.push(format!(
                "{} pieces of the hook's files in {} are not records (damaged?)",
                self.unreadable_records,
                self.dir.display()
            ));
        }
        for log in self.logs.iter().filter(|l| l.skipped > 0) {
            let lines = if log.skipped == 1 { "line" } else { "lines" };
            said.push(format!("{} unreadable {lines} in the PyTorch shim's log of process {}", log.skipped, log.pid));
        }
        said
    }

    /// The trace of what was read so far (the workload's `command_line`), a flight recorder's
    /// rings with it.
    pub fn trace(&self, command_line: &[String]) -> Trace {
        if self.rings.rings.is_empty() {
            return merge::to_trace(&self.records, &self.logs, command_line);
        }
        let mut records = self.records.clone();
        records.extend(self.rings.records());
        records.sort_by_key(order);
        let mut trace = merge::to_trace(&records, &self.logs, command_line);
        crate::flight::mark(&mut trace, &self.rings);
        trace
    }

    /// The recording is over: what was read, with the files cut short by a process killed while
    /// it wrote (a partial record, a partial last line).
    pub fn finish(self) -> (Recorded, Vec<Log>) {
        let cut_short =
            self.hook_files.into_iter().filter(|(_, partial)| !partial.rest.is_empty()).map(|(path, _)| path).collect();
        let mut logs = self.logs;
        for (pid, (_, partial)) in self.log_files {
            if !partial.rest.is_empty()
                && let Some(log) = logs.iter_mut().find(|l| l.pid == pid)
            {
                log.skipped += 1;
            }
        }
        (Recorded { records: self.records, cut_short }, logs)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::io::Write;

    use super::*;
    use crate::wire::Api;

    fn record(time_ns: u64, pid: u32, address: u64, size: u64) -> [u8; RECORD_BYTES] {
        Record {
            api: Api::MemAlloc,
            time_ns,
            pid,
            tid: pid,
            device: 0,
            result: 0,
            address,
            size_bytes: size,
            stream: 0,
        }
        .encode()
    }

    fn append(path: &Path, bytes: &[u8]) {
        std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap().write_all(bytes).unwrap();
    }

    /// Records and lines written in pieces are read once each, whole; what is half written is
    /// held back, and only the end of the recording calls it cut short.
    #[test]
    fn a_growing_recording_is_read_in_pieces_exactly_once() {
        let dir = tempfile::tempdir().unwrap();
        let hook = dir.path().join("events.10.bin");
        let log = dir.path().join("torch.10.jsonl");
        let mut tail = Tail::new(dir.path());
        assert!(!tail.poll().unwrap().any());
        let first = record(100, 10, 0x1000, 4096);
        append(&hook, &first[..40]);
        append(&log, br#"{"t":"frame","id":1,"name":"f","file":"a.py","line":3}"#);
        let counts = |p: Polled| (p.records, p.lines);
        assert_eq!(counts(tail.poll().unwrap()), (0, 0), "nothing whole yet");
        append(&hook, &first[40..]);
        append(&hook, &record(200, 10, 0x2000, 8192));
        append(&log, b"\n");
        assert_eq!(counts(tail.poll().unwrap()), (2, 1));
        // A second process whose records are older than the first's newest.
        append(&dir.path().join("events.11.bin"), &record(150, 11, 0x3000, 512));
        assert_eq!(counts(tail.poll().unwrap()), (1, 0));
        let times: Vec<u64> = tail.records().iter().map(|r| r.time_ns).collect();
        assert_eq!(times, [100, 150, 200], "kept in time order across files");
        assert_eq!(tail.trace(&[]).events.len(), 6, "three allocations, each a segment and a block");
        assert!(tail.unreadable().is_empty());
        append(&dir.path().join("events.12.bin"), &[0xEE; 128]);
        append(&log, b"not json\n");
        tail.poll().unwrap();
        assert_eq!(
            tail.unreadable(),
            [
                format!("2 pieces of the hook's files in {} are not records (damaged?)", dir.path().display()),
                "1 unreadable line in the PyTorch shim's log of process 10".to_owned()
            ]
        );
        append(&hook, &record(300, 10, 0x4000, 1)[..10]);
        append(&log, b"{\"t\":");
        let polled = tail.poll().unwrap();
        assert_eq!((counts(polled), polled.bytes), ((0, 0), 15), "read, held back");
        let (recorded, logs) = tail.finish();
        assert_eq!(recorded.records.len(), 3);
        assert_eq!(recorded.cut_short, [hook]);
        assert_eq!(logs.len(), 1);
        assert_eq!(
            (logs[0].lines.len(), logs[0].skipped),
            (1, 2),
            "the line that does not parse, and the half line, cut short at the end"
        );
    }

    #[test]
    fn read_all_equals_polling_as_it_grew() {
        let dir = tempfile::tempdir().unwrap();
        let hook = dir.path().join("events.7.bin");
        let mut tail = Tail::new(dir.path());
        for i in 0..50u64 {
            append(&hook, &record(i * 10, 7, 0x1000 + i * 0x100, 256 + i));
            if i % 7 == 0 {
                tail.poll().unwrap();
            }
        }
        tail.poll().unwrap();
        let (all, _) = Tail::read_all(dir.path()).unwrap();
        assert_eq!(tail.records(), all.records.as_slice());
        assert!(all.cut_short.is_empty());
    }

    #[test]
    fn recordings_in_progress_are_found_by_their_manifest_and_a_running_recorder() {
        let root = tempfile::tempdir().unwrap();
        let mine = root.path().join(format!("{DIR_PREFIX}a"));
        let gone = root.path().join(format!("{DIR_PREFIX}b"));
        let bare = root.path().join(format!("{DIR_PREFIX}c"));
        for dir in [&mine, &gone, &bare] {
            std::fs::create_dir(dir).unwrap();
        }
        let output = Some(PathBuf::from("/x/run.vtrace"));
        Manifest { recorder_pid: std::process::id(), command: vec!["python".into()], output: output.clone() }
            .write(&mine)
            .unwrap();
        // A recorder that is not running (pid 0 never is).
        Manifest { recorder_pid: 0, ..Manifest::default() }.write(&gone).unwrap();
        let found = in_progress(root.path());
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].dir, mine);
        assert_eq!(found[0].manifest.output, output);
        assert!(!mine.join(format!("{MANIFEST}.partial")).exists());
    }
}
