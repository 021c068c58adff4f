//! The viewer's side of serving (`open --connect`, `top --connect`): the run served on another
//! machine copied here as it is sent, into a directory of this machine's cache that the
//! follower follows exactly as it follows a local recording. A dropped connection is made
//! again and goes on from what the copy holds (the server sends each file from the size the
//! viewer says it has, and the viewer appends only at its own size: nothing lost, nothing
//! twice), also across viewers: a viewer started again on the same run carries on its copy.

use std::io::Write;
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use vramscope_collector::live::Manifest;
use vramscope_collector::wire::serve::{Frame, Hello, Kind, VERSION, Welcome};

use super::{TRACE, followed};
use crate::follow::Source;

/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Silence longer than this is a lost connection (the server says it is there every 2 s).
const SILENCE: Duration = Duration::from_secs(10);
/// The wait before connecting again.
const RETRY_EVERY: Duration = Duration::from_secs(1);

/// Copying a served run on a thread of its own; it stops when this is dropped.
pub struct Puller {
    stop: Arc<AtomicBool>,
    /// Where the copy is.
    pub dir: PathBuf,
}

impl Drop for Puller {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Connects to the server at `addr` with `token`, and starts copying the run it serves; returns
/// what to follow (the copy) and the copier. Said at once: a server that cannot be reached, a
/// token it refuses, another protocol.
pub fn start(addr: &str, token: &str) -> Result<(Source, Puller)> {
    let (stream, welcome) = connect(addr, token)?;
    let dir = cache_root()?.join("remote").join(&welcome.id);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot make the copy's directory {}", dir.display()))?;
    // A served file's copy is named as the file is there.
    let name = Path::new(&welcome.label).file_name().map(|n| super::sanitized(&n.to_string_lossy()));
    let file = name.filter(|n| n.as_str() != TRACE && !n.ends_with(".part")).unwrap_or_else(|| "served".to_owned());
    let copy = Copy { dir: dir.clone(), kind: welcome.kind, file };
    let source = copy.prepare(&welcome)?;
    let stop = Arc::new(AtomicBool::new(false));
    let thread_stop = Arc::clone(&stop);
    let (addr, token) = (addr.to_owned(), token.to_owned());
    std::thread::Builder::new().name("vramscope-pull".to_owned()).spawn(move || {
        copy.run(stream, &welcome.id, &addr, &token, &thread_stop);
    })?;
    Ok((source, Puller { stop, dir }))
}

/// Where copies of served runs go: `$XDG_CACHE_HOME/vramscope`, else `~/.cache/vramscope`.
fn cache_root() -> Result<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .context("neither XDG_CACHE_HOME nor HOME is set: nowhere to keep the copy of the run")?;
    Ok(base.join("vramscope"))
}

/// Connects and says hello; the server's welcome.
fn connect(addr: &str, token: &str) -> Result<(TcpStream, Welcome)> {
    let resolved = addr
        .to_socket_addrs()
        .with_context(|| format!("{addr:?} is not HOST:PORT"))?
        .next()
        .with_context(|| format!("{addr} names no address"))?;
    let mut stream = TcpStream::connect_timeout(&resolved, CONNECT_TIMEOUT).with_context(|| {
        format!("cannot connect to {addr} (is `vramscope serve` or `record --serve` running there, and the tunnel up?)")
    })?;
    stream.set_read_timeout(Some(SILENCE))?;
    stream.set_write_timeout(Some(super::WRITE_TIMEOUT))?;
    stream.set_nodelay(true)?;
    Frame::Hello(Hello { version: VERSION, token: token.to_owned() }).write(&mut stream)?;
    match Frame::read(&mut stream).with_context(|| format!("{addr} did not answer as a vramscope server"))? {
        Frame::Welcome(welcome) if welcome.version == VERSION => Ok((stream, welcome)),
        Frame::Welcome(welcome) => {
            bail!("{addr} speaks version {} of the protocol, this vramscope {VERSION}", welcome.version)
        }
        Frame::Refused(why) => bail!("{addr} refused: {why}"),
        _ => bail!("{addr} did not answer as a vramscope server"),
    }
}

/// The copy of one served run.
struct Copy {
    dir: PathBuf,
    kind: Kind,
    /// The name of a served file's copy.
    file: String,
}

/// How one connection ended.
enum Ended {
    /// The run is over and copied.
    Run,
    /// The server said no (another run now, a token it no longer takes).
    Refused(String),
}

impl Copy {
    /// The directory the hook's and the shim's files are copied into.
    fn recording(&self) -> PathBuf {
        self.dir.join("recording")
    }

    /// Makes the copy ready to follow; what to follow.
    fn prepare(&self, welcome: &Welcome) -> Result<Source> {
        match self.kind {
            Kind::File => Ok(Source::File(self.dir.join(&self.file))),
            // Copied whole before: the trace.
            Kind::Recording if self.dir.join(TRACE).exists() => Ok(Source::File(self.dir.join(TRACE))),
            Kind::Recording => {
                let recording = self.recording();
                std::fs::create_dir_all(&recording)?;
                // This viewer is the recorder as far as the follower knows: the copy lives while
                // it does; the trace it becomes is the copy's.
                let manifest = Manifest {
                    recorder_pid: std::process::id(),
                    command: vec![welcome.label.clone()],
                    output: Some(self.dir.join(TRACE)),
                };
                manifest.write(&recording)?;
                Ok(Source::Recording(recording))
            }
        }
    }

    /// What the copy holds, for the server.
    fn held(&self) -> Vec<(String, u64)> {
        let size = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
        let mut held: Vec<(String, u64)> = Vec::new();
        if self.kind == Kind::Recording {
            if let Ok(entries) = std::fs::read_dir(self.recording()) {
                for entry in entries.filter_map(Result::ok) {
                    let Ok(name) = entry.file_name().into_string() else { continue };
                    if followed(&name) {
                        held.push((name, size(&entry.path())));
                    }
                }
            }
            let (whole, part) = (self.dir.join(TRACE), self.dir.join(format!("{TRACE}.part")));
            if whole.exists() {
                held.push((TRACE.to_owned(), size(&whole)));
            } else if part.exists() {
                held.push((TRACE.to_owned(), size(&part)));
            }
        }
        held.sort();
        held
    }

    /// Where bytes of `name` go while it is sent.
    fn path_of(&self, name: &str) -> Result<PathBuf> {
        Ok(match self.kind {
            Kind::File => self.dir.join(format!("{}.part", self.file)),
            Kind::Recording if name == TRACE => self.dir.join(format!("{TRACE}.part")),
            Kind::Recording if followed(name) => self.recording().join(name),
            Kind::Recording => bail!("the server sent a file this viewer does not take: {name:?}"),
        })
    }

    /// Copies until the run is over, connecting again when the connection drops.
    fn run(&self, mut stream: TcpStream, id: &str, addr: &str, token: &str, stop: &AtomicBool) {
        let mut said_lost = false;
        loop {
            match self.session(&mut stream, stop) {
                Ok(Ended::Run) => return,
                Ok(Ended::Refused(why)) => {
                    eprintln!("vramscope: {addr} refused: {why}");
                    return;
                }
                Err(error) if !said_lost => {
                    eprintln!("vramscope: the connection to {addr} was lost ({error:#}); connecting again");
                    said_lost = true;
                }
                Err(_) => {}
            }
            loop {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep(RETRY_EVERY);
                match connect(addr, token) {
                    Ok((again, welcome)) if welcome.id == id => {
                        stream = again;
                        if said_lost {
                            eprintln!("vramscope: connected to {addr} again");
                        }
                        said_lost = false;
                        break;
                    }
                    Ok(_) => {
                        eprintln!("vramscope: {addr} serves another run now; the copy stops here");
                        return;
                    }
                    Err(_) => {}
                }
            }
        }
    }

    /// One connection: what the copy holds said, then frames until the run is over.
    fn session(&self, stream: &mut TcpStream, stop: &AtomicBool) -> Result<Ended> {
        Frame::Have(self.held()).write(stream)?;
        loop {
            if stop.load(Ordering::Relaxed) {
                return Ok(Ended::Run);
            }
            match Frame::read(stream)? {
                Frame::Data { name, offset, bytes } => {
                    let path = self.path_of(&name)?;
                    // The recording's files, once its trace is copied whole, are not needed.
                    if self.kind == Kind::Recording && name != TRACE && self.dir.join(TRACE).exists() {
                        continue;
                    }
                    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&path)?;
                    let size = file.metadata()?.len();
                    if size != offset {
                        bail!("bytes of {name} at {offset}, but the copy holds {size}: out of order");
                    }
                    file.write_all(&bytes)?;
                }
                Frame::Done { name, size } => {
                    let path = self.path_of(&name)?;
                    let whole = path.to_str().and_then(|p| p.strip_suffix(".part")).map(PathBuf::from);
                    let size_of = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
                    // Copied whole by an earlier viewer: nothing was sent again.
                    if !path.exists() && whole.as_deref().is_some_and(|w| w.exists() && size_of(w) == size) {
                        continue;
                    }
                    let held = size_of(&path);
                    if held != size {
                        bail!("{name} complete at {size} bytes, but the copy holds {held}");
                    }
                    if let Some(whole) = whole {
                        std::fs::rename(&path, whole)?;
                    }
                }
                Frame::Reset { name } => {
                    let path = self.path_of(&name)?;
                    if path.exists() {
                        std::fs::remove_file(&path)?;
                    }
                }
                Frame::Ended { trace } => {
                    self.ended(trace.is_some())?;
                    return Ok(Ended::Run);
                }
                Frame::Alive => {}
                Frame::Refused(why) => return Ok(Ended::Refused(why)),
                Frame::Hello(_) | Frame::Welcome(_) | Frame::Have(_) => bail!("the server sent a frame out of turn"),
            }
        }
    }

    /// The run is over: with its trace copied, the follower reads it (the recording's copy
    /// goes, as `record` removes its directory); without, it is told the recorder is gone.
    fn ended(&self, with_trace: bool) -> Result<()> {
        if self.kind != Kind::Recording {
            return Ok(());
        }
        let recording = self.recording();
        if with_trace {
            if recording.exists() {
                std::fs::remove_dir_all(&recording)?;
            }
        } else if let Some(mut manifest) = Manifest::read(&recording) {
            manifest.recorder_pid = 0;
            manifest.write(&recording)?;
        }
        Ok(())
    }
}
