//! `vramscope serve DIR|FILE` and `vramscope record --serve`: a recording sent to viewers on
//! other machines as it is written (`open --connect`, `top --connect`: `pull.rs`), then its
//! finished trace; or a file, sent again whenever it changes. The protocol is
//! `vramscope_collector::wire::serve`.
//!
//! What it costs the run: the server reads the files the recorder writes anyway, on threads of
//! its own at a lower priority than the workload, at most every quarter second. A viewer that is
//! slow or gone blocks only its own connection's thread, which gives up after
//! [`WRITE_TIMEOUT`]. It listens on loopback unless told otherwise, and answers only a viewer
//! that gives the token it printed (unless started without one, on purpose).

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use vramscope_collector::wire::serve::{CHUNK, Frame, Kind, VERSION, Welcome, same_token, valid_name};

pub mod pull;

/// Where a server listens unless told: this machine only (an SSH tunnel reaches it).
pub const DEFAULT_ADDR: &str = "127.0.0.1:7433";

/// The name the finished trace of a recording is sent under.
pub const TRACE: &str = "trace.vtrace";

/// How long a viewer has to say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a write to a viewer may take before the viewer is dropped.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the served files are looked at.
const POLL: Duration = Duration::from_millis(250);
/// How often a quiet server says it is there.
pub const ALIVE_EVERY: Duration = Duration::from_secs(2);
/// The most viewers at once.
const MAX_VIEWERS: usize = 8;

/// What is served.
#[derive(Clone, Debug)]
pub enum Served {
    /// A recording's directory while it runs, and where its trace will be written.
    Recording {
        /// The directory.
        dir: PathBuf,
        /// The trace it becomes.
        output: Option<PathBuf>,
    },
    /// A file, sent again whenever it changes.
    File(PathBuf),
}

/// How a recording served by `record --serve` ended, said by the recorder.
#[derive(Default)]
pub struct Finish {
    state: Mutex<Option<Option<PathBuf>>>,
}

impl Finish {
    /// The run is over; its trace is at `trace` (none: it could not be written).
    pub fn set(&self, trace: Option<PathBuf>) {
        if let Ok(mut state) = self.state.lock() {
            *state = Some(trace);
        }
    }

    fn get(&self) -> Option<Option<PathBuf>> {
        self.state.lock().ok().and_then(|s| s.clone())
    }
}

/// A server running on threads of its own.
pub struct Server {
    /// Where it listens (the port chosen, when 0 was asked for).
    pub addr: std::net::SocketAddr,
    /// The token viewers must give (`None`: none asked).
    pub token: Option<String>,
    viewers: Arc<AtomicUsize>,
}

/// What every connection shares.
struct Shared {
    served: Served,
    token: Option<String>,
    finish: Option<Arc<Finish>>,
    welcome: Welcome,
    viewers: Arc<AtomicUsize>,
}

/// Reads `addr` as the command line gives it: `HOST:PORT`, or a port alone (on loopback).
pub fn parse_addr(text: &str) -> Result<std::net::SocketAddr> {
    use std::net::ToSocketAddrs;
    let text = text.trim();
    let full = if text.parse::<u16>().is_ok() { format!("127.0.0.1:{text}") } else { text.to_owned() };
    full.to_socket_addrs()
        .with_context(|| format!("{text:?} is not an address to listen on or connect to (HOST:PORT, or a port)"))?
        .next()
        .with_context(|| format!("{text:?} names no address"))
}

/// The token a server asks for: `VRAMSCOPE_TOKEN` when set, else a new one.
pub fn token_from_env() -> Result<String> {
    match std::env::var("VRAMSCOPE_TOKEN") {
        Ok(token) if !token.trim().is_empty() => Ok(token.trim().to_owned()),
        _ => new_token(),
    }
}

/// A new token: 128 random bits, in hex.
pub fn new_token() -> Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("cannot read random bytes for the token (/dev/urandom)")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

impl Server {
    /// Listens on `addr` (before anything is run, so a port in use is said at once).
    pub fn bind(addr: std::net::SocketAddr) -> Result<TcpListener> {
        TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr}"))
    }

    /// Starts serving `served` on `listener`; viewers must give `token` (none: anyone who can
    /// reach the address). `finish`, under `record --serve`, says when the run is over.
    pub fn start(
        listener: TcpListener,
        served: Served,
        token: Option<String>,
        finish: Option<Arc<Finish>>,
    ) -> Result<Self> {
        let addr = listener.local_addr()?;
        let viewers = Arc::new(AtomicUsize::new(0));
        let welcome = welcome(&served);
        let shared = Arc::new(Shared { served, token: token.clone(), finish, welcome, viewers: Arc::clone(&viewers) });
        std::thread::Builder::new().name("vramscope-serve".to_owned()).spawn(move || accept(&listener, &shared))?;
        Ok(Self { addr, token, viewers })
    }

    /// How many viewers are connected now.
    pub fn viewers(&self) -> usize {
        self.viewers.load(Ordering::Relaxed)
    }

    /// The line to give a viewer, with the tunnel to reach this machine from another.
    pub fn how_to_connect(&self, viewer: &str) -> String {
        let token = self.token.as_ref().map_or_else(String::new, |t| format!(" --token {t}"));
        let port = self.addr.port();
        format!(
            "vramscope: serving on {} (from another machine: `ssh -L {port}:127.0.0.1:{port} THIS_HOST`, then \
             `vramscope {viewer} --connect 127.0.0.1:{port}{token}` there)",
            self.addr
        )
    }
}

/// What the server tells a viewer about the run: an id that stays the same however often the
/// run is served (this machine, the recorder, the directory; or the file), and a label.
fn welcome(served: &Served) -> Welcome {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let (kind, id, label) = match served {
        Served::Recording { dir, .. } => {
            let manifest = vramscope_collector::live::Manifest::read(dir);
            let label = manifest.as_ref().map_or_else(|| dir.display().to_string(), |m| m.command.join(" "));
            let pid = manifest.map_or(0, |m| m.recorder_pid);
            let name = dir.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
            (Kind::Recording, format!("{}-{pid}-{name}", host.trim()), label)
        }
        Served::File(path) => {
            let absolute = std::path::absolute(path).unwrap_or_else(|_| path.clone());
            (Kind::File, format!("{}-{}", host.trim(), absolute.display()), path.display().to_string())
        }
    };
    Welcome { version: VERSION, id: sanitized(&id), kind, label }
}

/// `text` as a name the protocol allows: other characters become `_`, at most 100 of them.
pub fn sanitized(text: &str) -> String {
    let mut out: String = text
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' })
        .skip_while(|&c| c == '.' || c == '_')
        .collect();
    if out.len() > 100 {
        out = out.split_off(out.len() - 100);
    }
    if out.is_empty() || out.starts_with('.') { format!("run{out}") } else { out }
}

fn accept(listener: &TcpListener, shared: &Arc<Shared>) {
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { continue };
        if shared.viewers.load(Ordering::Relaxed) >= MAX_VIEWERS {
            let _ = stream.set_write_timeout(Some(HELLO_TIMEOUT));
            let _ = Frame::Refused(format!("this server has {MAX_VIEWERS} viewers already")).write(&mut stream);
            continue;
        }
        shared.viewers.fetch_add(1, Ordering::Relaxed);
        let viewers = Arc::clone(&shared.viewers);
        let shared = Arc::clone(shared);
        let spawned = std::thread::Builder::new().name("vramscope-serve-viewer".to_owned()).spawn(move || {
            crate::follow::lower_priority();
            if let Err(e) = viewer(stream, &shared)
                && std::env::var_os("VRAMSCOPE_SERVE_LOG").is_some()
            {
                eprintln!("vramscope serve: a viewer left: {e:#}");
            }
            shared.viewers.fetch_sub(1, Ordering::Relaxed);
        });
        if spawned.is_err() {
            // No thread for it: the connection is dropped with the closure, the count given back.
            viewers.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// One viewer: its hello checked, then the run sent until it ends or the viewer goes.
fn viewer(mut stream: TcpStream, shared: &Shared) -> Result<()> {
    stream.set_read_timeout(Some(HELLO_TIMEOUT))?;
    stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
    stream.set_nodelay(true)?;
    let hello = match Frame::read(&mut stream)? {
        Frame::Hello(hello) => hello,
        other => return refuse(&mut stream, &format!("a viewer says hello first, not {:?}", kind_of(&other))),
    };
    if hello.version != VERSION {
        return refuse(
            &mut stream,
            &format!(
                "this server speaks version {VERSION} of the protocol and the viewer {}: use the same vramscope on both machines",
                hello.version
            ),
        );
    }
    if let Some(token) = &shared.token
        && !same_token(&hello.token, token)
    {
        let why = if hello.token.is_empty() { "this server asks for a token" } else { "wrong token" };
        return refuse(&mut stream, &format!("{why}: give the one it printed when it started, with --token"));
    }
    Frame::Welcome(shared.welcome.clone()).write(&mut stream)?;
    let have: HashMap<String, u64> = match Frame::read(&mut stream)? {
        Frame::Have(have) => have.into_iter().collect(),
        other => bail!("expected what the viewer holds, got {:?}", kind_of(&other)),
    };
    let mut out = Out { stream, sent: have, last: Instant::now() };
    match &shared.served {
        Served::Recording { dir, output } => send_recording(&mut out, dir, output.as_deref(), shared.finish.as_deref()),
        Served::File(path) => send_file(&mut out, path),
    }
}

fn kind_of(frame: &Frame) -> &'static str {
    match frame {
        Frame::Hello(_) => "hello",
        Frame::Welcome(_) => "welcome",
        Frame::Have(_) => "have",
        Frame::Refused(_) => "refused",
        Frame::Data { .. } => "data",
        Frame::Done { .. } => "done",
        Frame::Reset { .. } => "reset",
        Frame::Ended { .. } => "ended",
        Frame::Alive => "alive",
    }
}

fn refuse(stream: &mut TcpStream, why: &str) -> Result<()> {
    Frame::Refused(why.to_owned()).write(stream)?;
    bail!("refused: {why}")
}

/// The connection to one viewer and what it holds.
struct Out {
    stream: TcpStream,
    sent: HashMap<String, u64>,
    last: Instant,
}

impl Out {
    fn send(&mut self, frame: &Frame) -> Result<()> {
        frame.write(&mut self.stream)?;
        self.last = Instant::now();
        Ok(())
    }

    /// Sends what `path` holds past what the viewer has of `name`; whether anything was sent.
    fn send_new(&mut self, name: &str, path: &Path) -> Result<bool> {
        let Ok(mut file) = std::fs::File::open(path) else { return Ok(false) };
        let size = file.metadata()?.len();
        let mut have = self.sent.get(name).copied().unwrap_or(0);
        if have > size {
            // The viewer holds more than there is: not this file's bytes. Start it again.
            self.send(&Frame::Reset { name: name.to_owned() })?;
            have = 0;
        }
        let sent_any = have < size;
        let mut buffer = vec![0u8; CHUNK];
        while have < size {
            let n = ((size - have) as usize).min(CHUNK);
            file.seek(SeekFrom::Start(have))?;
            file.read_exact(&mut buffer[..n])?;
            self.send(&Frame::Data { name: name.to_owned(), offset: have, bytes: buffer[..n].to_vec() })?;
            have += n as u64;
            self.sent.insert(name.to_owned(), have);
        }
        Ok(sent_any)
    }

    /// Sends the whole of `path` as `name`, then that it is complete.
    fn send_whole(&mut self, name: &str, path: &Path) -> Result<()> {
        self.send_new(name, path)?;
        let size = std::fs::metadata(path)?.len();
        self.send(&Frame::Done { name: name.to_owned(), size })
    }

    fn idle(&mut self) -> Result<()> {
        if self.last.elapsed() >= ALIVE_EVERY {
            self.send(&Frame::Alive)?;
        }
        std::thread::sleep(POLL);
        Ok(())
    }
}

/// Whether a recording's file is one a viewer follows: the hook's records and the shim's logs.
pub fn followed(name: &str) -> bool {
    valid_name(name)
        && ((name.starts_with("events.") && name.ends_with(".bin"))
            || (name.starts_with("torch.") && name.ends_with(".jsonl")))
}

/// The files of a recording a viewer needs to follow it: the hook's records and the shim's logs.
fn followed_files(dir: &Path) -> Vec<(String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<(String, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| Some((e.file_name().into_string().ok()?, e.path())))
        .filter(|(name, _)| followed(name))
        .collect();
    files.sort();
    files
}

fn send_recording(out: &mut Out, dir: &Path, output: Option<&Path>, finish: Option<&Finish>) -> Result<()> {
    let older = output.and_then(signature);
    let mut gone_since: Option<Instant> = None;
    loop {
        let mut sent = false;
        for (name, path) in followed_files(dir) {
            sent |= out.send_new(&name, &path)?;
        }
        // The end: said by the recorder (`record --serve`), else seen (`serve DIR`).
        let ended = match finish {
            Some(finish) => finish.get(),
            None => ended_on_its_own(dir, output, older, &mut gone_since)?,
        };
        if let Some(trace) = ended {
            // What the files got last, then the trace.
            for (name, path) in followed_files(dir) {
                out.send_new(&name, &path)?;
            }
            return send_end(out, trace.as_deref());
        }
        if !sent {
            out.idle()?;
        }
    }
}

/// Whether a recording served by `serve DIR` is over, and its trace: written by `record` once
/// the directory is gone; made here from the directory when its recorder died without writing
/// one (a killed `record`) and the workload's processes are gone too.
fn ended_on_its_own(
    dir: &Path,
    output: Option<&Path>,
    older: Option<Signature>,
    gone_since: &mut Option<Instant>,
) -> Result<Option<Option<PathBuf>>> {
    let written = output.filter(|p| signature(p).is_some_and(|s| Some(s) != older));
    if !dir.exists() {
        if let Some(trace) = written {
            return Ok(Some(Some(trace.to_owned())));
        }
        let since = gone_since.get_or_insert_with(Instant::now);
        return Ok((since.elapsed() > Duration::from_secs(10)).then_some(None));
    }
    let recorder_gone = vramscope_collector::live::Manifest::read(dir).is_none_or(|m| !m.recorder_alive());
    if recorder_gone && !workload_alive(dir) {
        return Ok(Some(Some(trace_of_directory(dir)?)));
    }
    Ok(None)
}

/// Whether a process that writes into the recording is still running (its pid is in the names
/// of its files: `events.PID.bin`, `torch.PID.jsonl`).
fn workload_alive(dir: &Path) -> bool {
    followed_files(dir).iter().any(|(name, _)| {
        let pid = name.split('.').nth(1).and_then(|p| p.parse::<u32>().ok());
        pid.is_some_and(vramscope_collector::live::process_alive)
    })
}

/// The trace of a recording directory whose recorder is gone, as `vramscope convert DIR`
/// writes it, in a file beside the other temporary files.
fn trace_of_directory(dir: &Path) -> Result<PathBuf> {
    let recording = vramscope_collector::session::collect_dir(dir)
        .with_context(|| format!("the recording in {} cannot be read", dir.display()))?;
    let path = std::env::temp_dir().join(format!("vramscope-served-{}.vtrace", std::process::id()));
    crate::vtrace_out::write_vtrace(&recording.trace, &path, true)?;
    Ok(path)
}

fn send_end(out: &mut Out, trace: Option<&Path>) -> Result<()> {
    match trace {
        Some(path) => {
            out.send_whole(TRACE, path)?;
            out.send(&Frame::Ended { trace: Some(TRACE.to_owned()) })
        }
        None => out.send(&Frame::Ended { trace: None }),
    }
}

/// A file's identity for "has it changed": its size and modification time.
type Signature = (u64, std::time::SystemTime);

fn signature(path: &Path) -> Option<Signature> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.len(), meta.modified().ok()?))
}

fn send_file(out: &mut Out, path: &Path) -> Result<()> {
    let name = sanitized(&path.file_name().map_or_else(|| "trace".into(), |n| n.to_string_lossy().into_owned()));
    // What the viewer holds of a version it did not finish is not kept: each version is sent
    // whole, once it has stayed the same for one look (not while it is written).
    out.send(&Frame::Reset { name: name.clone() })?;
    out.sent.clear();
    let mut shown: Option<Signature> = None;
    let mut previous: Option<Signature> = None;
    loop {
        let now = signature(path);
        if now.is_some() && now != shown && now == previous {
            if shown.is_some() {
                out.send(&Frame::Reset { name: name.clone() })?;
                out.sent.clear();
            }
            out.send_whole(&name, path)?;
            shown = now;
        }
        previous = now;
        out.idle()?;
    }
}
