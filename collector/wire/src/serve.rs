//! The protocol of `vramscope serve` / `record --serve` and `open --connect`: a recording's
//! files sent to a viewer on another machine as they are written, then the finished trace.
//!
//! Over one TCP connection, both ways, a sequence of frames: a kind byte, the payload's length
//! (u32, little-endian, at most [`MAX_PAYLOAD`]) and the payload. The viewer speaks first
//! ([`Hello`]: the protocol's version and the token); the server answers [`Welcome`] (which run
//! this is) or [`Frame::Refused`]; the viewer says what it holds of that run already
//! ([`Frame::Have`], so a dropped connection resumes where it stopped); then the server sends [`Frame::Data`] (bytes of a file at an offset: files only grow, so the viewer
//! appends and checks that the offset is its size: nothing lost, nothing twice), [`Frame::Done`]
//! (a file complete, at a size), [`Frame::Reset`] (a watched file was rewritten), [`Frame::Alive`]
//! (nothing new) and [`Frame::Ended`] (the run is over).
//!
//! Everything read from the network is hostile until checked: lengths before allocating, names
//! against [`valid_name`], text as UTF-8, counts against their limits. A decoding error is an
//! [`Error`], never a panic.

use std::io::{Read, Write};

/// The protocol's version; a peer speaking another is refused with a message that says so.
pub const VERSION: u32 = 1;

/// The first word of a hello and a welcome.
pub const MAGIC: &str = "vramscope-serve";

/// The largest payload of one frame (a data frame carries at most [`CHUNK`] bytes of a file).
pub const MAX_PAYLOAD: usize = CHUNK + 1024;

/// The most bytes of a file one data frame carries.
pub const CHUNK: usize = 256 << 10;

/// The most files a hello may say it holds.
pub const MAX_FILES: usize = 4096;

/// The longest file name sent.
pub const MAX_NAME: usize = 128;

/// Frame kinds.
mod kind {
    pub const HELLO: u8 = 1;
    pub const WELCOME: u8 = 2;
    pub const REFUSED: u8 = 3;
    pub const DATA: u8 = 4;
    pub const DONE: u8 = 5;
    pub const RESET: u8 = 6;
    pub const ENDED: u8 = 7;
    pub const ALIVE: u8 = 8;
    pub const HAVE: u8 = 9;
}

/// What went wrong reading or checking a frame.
#[derive(Debug)]
pub enum Error {
    /// The connection failed or closed.
    Io(std::io::Error),
    /// The peer sent something this protocol does not allow.
    Protocol(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Io(e) => write!(f, "{e}"),
            Self::Protocol(what) => write!(f, "not vramscope's serve protocol: {what}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e)
    }
}

fn bad<T>(what: impl Into<String>) -> Result<T, Error> {
    Err(Error::Protocol(what.into()))
}

/// Whether `name` may name a file sent: 1 to [`MAX_NAME`] letters, digits, `.`, `_` and `-`, not
/// starting with a dot (so never `..`, a path, or a hidden file).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// What the viewer says first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hello {
    /// The protocol version it speaks.
    pub version: u32,
    /// The token the server printed (empty: none).
    pub token: String,
}

/// What the server answers a viewer it accepts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Welcome {
    /// The protocol version it speaks.
    pub version: u32,
    /// Which run this is (the same for a recording however often it is served), for the
    /// viewer's copy of it: letters, digits, `.`, `_`, `-`.
    pub id: String,
    /// What is served: a recording in progress, or a file read again when it changes.
    pub kind: Kind,
    /// The command recorded, or the file's name, for people.
    pub label: String,
}

/// What is served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Kind {
    /// A recording's files as they grow, then its trace.
    #[default]
    Recording,
    /// One file, sent whole again whenever it changes.
    File,
}

/// One frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// The viewer's first frame.
    Hello(Hello),
    /// The server's answer to a viewer it accepts.
    Welcome(Welcome),
    /// The files of the run the viewer holds already, with their sizes.
    Have(Vec<(String, u64)>),
    /// The server's answer to one it does not, and why.
    Refused(String),
    /// Bytes of file `name` at `offset`.
    Data {
        /// The file.
        name: String,
        /// Where the bytes go.
        offset: u64,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// File `name` is complete at `size` bytes.
    Done {
        /// The file.
        name: String,
        /// Its size.
        size: u64,
    },
    /// File `name` was rewritten: what was sent of it before is void.
    Reset {
        /// The file.
        name: String,
    },
    /// The run is over; `trace` names the finished trace when one was sent (its DONE came).
    Ended {
        /// The trace's name, if there is one.
        trace: Option<String>,
    },
    /// Nothing new; the server is there.
    Alive,
}

/// Text lines of `key value`: the hello's and the welcome's payload.
fn lines(payload: &[u8]) -> Result<Vec<(&str, &str)>, Error> {
    let Ok(text) = std::str::from_utf8(payload) else { return bad("text that is not UTF-8") };
    Ok(text.lines().filter(|l| !l.is_empty()).map(|l| l.split_once(' ').unwrap_or((l, ""))).collect())
}

fn number(value: &str, what: &str) -> Result<u64, Error> {
    value.parse::<u64>().or_else(|_| bad(format!("{what} is not a number: {:?}", cut(value))))
}

/// At most 64 characters of untrusted text, for a message.
fn cut(text: &str) -> String {
    text.chars().take(64).collect()
}

/// One line of free text: no newlines, at most 4 KiB.
fn one_line(text: &str) -> String {
    let mut out: String = text.chars().map(|c| if c == '\n' || c == '\r' { ' ' } else { c }).collect();
    while out.len() > 4096 {
        out.pop();
    }
    out
}

fn name_of(bytes: &[u8]) -> Result<(String, &[u8]), Error> {
    let Some((&len, rest)) = bytes.split_first() else { return bad("a frame without a file name") };
    let len = usize::from(len);
    let (Some(name), Some(rest)) = (rest.get(..len), rest.get(len..)) else { return bad("a file name cut short") };
    match std::str::from_utf8(name) {
        Ok(name) if valid_name(name) => Ok((name.to_owned(), rest)),
        _ => bad(format!("a file name that is not allowed: {:?}", cut(&String::from_utf8_lossy(name)))),
    }
}

fn u64_of(bytes: &[u8]) -> Result<(u64, &[u8]), Error> {
    match bytes.split_first_chunk::<8>() {
        Some((n, rest)) => Ok((u64::from_le_bytes(*n), rest)),
        None => bad("a number cut short"),
    }
}

fn push_name(out: &mut Vec<u8>, name: &str) {
    // Names are checked before they are sent; one that is not allowed goes as an empty name,
    // which the peer refuses.
    let name = if valid_name(name) { name } else { "" };
    out.push(name.len() as u8);
    out.extend_from_slice(name.as_bytes());
}

impl Frame {
    /// Decodes a frame of `kind` from its payload.
    pub fn decode(kind: u8, payload: &[u8]) -> Result<Self, Error> {
        match kind {
            kind::HELLO => {
                let mut hello = Hello::default();
                for (key, value) in lines(payload)? {
                    match key {
                        MAGIC => hello.version = number(value, "the version")? as u32,
                        "token" => hello.token = one_line(value),
                        _ => {}
                    }
                }
                if hello.version == 0 {
                    return bad("a hello without its version");
                }
                Ok(Self::Hello(hello))
            }
            kind::HAVE => {
                let mut have = Vec::new();
                for (key, value) in lines(payload)? {
                    if key != "have" {
                        continue;
                    }
                    let Some((size, name)) = value.split_once(' ') else { return bad("a have line without a name") };
                    if !valid_name(name) {
                        return bad(format!("a file name that is not allowed: {:?}", cut(name)));
                    }
                    if have.len() >= MAX_FILES {
                        return bad(format!("more than {MAX_FILES} files held"));
                    }
                    have.push((name.to_owned(), number(size, "a size")?));
                }
                Ok(Self::Have(have))
            }
            kind::WELCOME => {
                let mut welcome = Welcome::default();
                for (key, value) in lines(payload)? {
                    match key {
                        MAGIC => welcome.version = number(value, "the version")? as u32,
                        "id" if valid_name(value) => welcome.id = value.to_owned(),
                        "id" => return bad(format!("a run id that is not allowed: {:?}", cut(value))),
                        "kind" => {
                            welcome.kind = match value {
                                "recording" => Kind::Recording,
                                "file" => Kind::File,
                                other => return bad(format!("an unknown kind of run: {:?}", cut(other))),
                            }
                        }
                        "label" => welcome.label = one_line(value),
                        _ => {}
                    }
                }
                if welcome.version == 0 || welcome.id.is_empty() {
                    return bad("a welcome without its version or id");
                }
                Ok(Self::Welcome(welcome))
            }
            kind::REFUSED => Ok(Self::Refused(one_line(&String::from_utf8_lossy(payload)))),
            kind::DATA => {
                let (name, rest) = name_of(payload)?;
                let (offset, bytes) = u64_of(rest)?;
                if bytes.len() > CHUNK {
                    return bad("a data frame over its limit");
                }
                if offset.checked_add(bytes.len() as u64).is_none() {
                    return bad("a data frame past the end of any file");
                }
                Ok(Self::Data { name, offset, bytes: bytes.to_vec() })
            }
            kind::DONE => {
                let (name, rest) = name_of(payload)?;
                let (size, rest) = u64_of(rest)?;
                if !rest.is_empty() {
                    return bad("bytes after a done frame");
                }
                Ok(Self::Done { name, size })
            }
            kind::RESET => {
                let (name, rest) = name_of(payload)?;
                if !rest.is_empty() {
                    return bad("bytes after a reset frame");
                }
                Ok(Self::Reset { name })
            }
            kind::ENDED => {
                if payload.is_empty() {
                    return Ok(Self::Ended { trace: None });
                }
                let (name, _) = name_of(payload)?;
                Ok(Self::Ended { trace: Some(name) })
            }
            kind::ALIVE if payload.is_empty() => Ok(Self::Alive),
            other => bad(format!("an unknown frame kind {other}")),
        }
    }

    /// The frame's kind and payload.
    pub fn encode(&self) -> (u8, Vec<u8>) {
        let mut out = Vec::new();
        let kind = match self {
            Self::Hello(hello) => {
                out.extend_from_slice(
                    format!("{MAGIC} {}\ntoken {}\n", hello.version, one_line(&hello.token)).as_bytes(),
                );
                kind::HELLO
            }
            Self::Have(have) => {
                for (name, size) in have.iter().filter(|(n, _)| valid_name(n)).take(MAX_FILES) {
                    out.extend_from_slice(format!("have {size} {name}\n").as_bytes());
                }
                kind::HAVE
            }
            Self::Welcome(w) => {
                let kind = match w.kind {
                    Kind::Recording => "recording",
                    Kind::File => "file",
                };
                let text = format!("{MAGIC} {}\nid {}\nkind {kind}\nlabel {}\n", w.version, w.id, one_line(&w.label));
                out.extend_from_slice(text.as_bytes());
                kind::WELCOME
            }
            Self::Refused(why) => {
                out.extend_from_slice(one_line(why).as_bytes());
                kind::REFUSED
            }
            Self::Data { name, offset, bytes } => {
                push_name(&mut out, name);
                out.extend_from_slice(&offset.to_le_bytes());
                out.extend_from_slice(bytes);
                kind::DATA
            }
            Self::Done { name, size } => {
                push_name(&mut out, name);
                out.extend_from_slice(&size.to_le_bytes());
                kind::DONE
            }
            Self::Reset { name } => {
                push_name(&mut out, name);
                kind::RESET
            }
            Self::Ended { trace } => {
                if let Some(name) = trace {
                    push_name(&mut out, name);
                }
                kind::ENDED
            }
            Self::Alive => kind::ALIVE,
        };
        (kind, out)
    }

    /// Writes the frame.
    pub fn write(&self, out: &mut impl Write) -> Result<(), Error> {
        let (kind, payload) = self.encode();
        if payload.len() > MAX_PAYLOAD {
            return bad("a frame over its limit");
        }
        let mut head = [0u8; 5];
        head[0] = kind;
        head[1..].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        out.write_all(&head)?;
        out.write_all(&payload)?;
        Ok(())
    }

    /// Reads one frame (its length checked before anything is allocated).
    pub fn read(input: &mut impl Read) -> Result<Self, Error> {
        let mut head = [0u8; 5];
        input.read_exact(&mut head)?;
        let [kind, a, b, c, d] = head;
        let len = u32::from_le_bytes([a, b, c, d]) as usize;
        if len > MAX_PAYLOAD {
            return bad(format!("a frame of {len} bytes, over the {MAX_PAYLOAD} allowed"));
        }
        let mut payload = vec![0u8; len];
        input.read_exact(&mut payload)?;
        Self::decode(kind, &payload)
    }
}

/// Compares two tokens in time that does not depend on where they differ.
pub fn same_token(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut differ = a.len() ^ b.len();
    for (i, &x) in a.iter().enumerate() {
        differ |= usize::from(x ^ b.get(i).copied().unwrap_or(!x));
    }
    differ == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(frame: Frame) {
        let mut bytes = Vec::new();
        assert!(frame.write(&mut bytes).is_ok());
        let back = Frame::read(&mut bytes.as_slice());
        assert_eq!(back.ok(), Some(frame));
    }

    #[test]
    fn every_frame_reads_back() {
        round_trip(Frame::Hello(Hello { version: VERSION, token: "abc".into() }));
        round_trip(Frame::Have(vec![("events.1.bin".into(), 4096), ("torch.1.jsonl".into(), 0)]));
        round_trip(Frame::Welcome(Welcome {
            version: VERSION,
            id: "host-1-x".into(),
            kind: Kind::File,
            label: "python train.py".into(),
        }));
        round_trip(Frame::Refused("wrong token".into()));
        round_trip(Frame::Data { name: "events.1.bin".into(), offset: 1 << 40, bytes: vec![1, 2, 3] });
        round_trip(Frame::Done { name: "trace.vtrace".into(), size: 7 });
        round_trip(Frame::Reset { name: "snap.pickle".into() });
        round_trip(Frame::Ended { trace: Some("trace.vtrace".into()) });
        round_trip(Frame::Ended { trace: None });
        round_trip(Frame::Alive);
    }

    #[test]
    fn hostile_frames_are_refused_not_obeyed() {
        let read = |bytes: &[u8]| Frame::read(&mut &bytes[..]);
        // A length past the limit is refused before anything is allocated.
        assert!(matches!(read(&[4, 0xff, 0xff, 0xff, 0xff]), Err(Error::Protocol(_))));
        // Names that would leave the viewer's directory.
        for name in ["../x", "a/b", ".hidden", "", "..", "x\0y"] {
            let mut payload = vec![name.len() as u8];
            payload.extend_from_slice(name.as_bytes());
            payload.extend_from_slice(&0u64.to_le_bytes());
            assert!(Frame::decode(4, &payload).is_err(), "{name:?}");
            assert!(!valid_name(name));
        }
        assert!(Frame::decode(9, b"have 1 ../../etc/passwd\n").is_err());
        assert!(Frame::decode(9, b"have x events.1.bin\n").is_err());
        assert!(Frame::decode(1, b"token x\n").is_err(), "a hello without a version");
        assert!(Frame::decode(1, &[0xff, 0xfe]).is_err());
        assert!(Frame::decode(2, b"vramscope-serve 1\nid ../x\n").is_err());
        assert!(Frame::decode(99, b"").is_err());
        assert!(Frame::decode(8, b"x").is_err());
        let many: String = (0..=MAX_FILES).map(|i| format!("have 1 f{i}\n")).collect();
        assert!(Frame::decode(9, many.as_bytes()).is_err());
        // Cut anywhere, a good frame is an error, never a panic.
        let mut bytes = Vec::new();
        let _ = Frame::Data { name: "events.1.bin".into(), offset: 9, bytes: vec![7; 100] }.write(&mut bytes);
        for end in 0..bytes.len() {
            assert!(read(&bytes[..end]).is_err());
        }
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same_token("abc", "abc"));
        assert!(!same_token("abc", "abd"));
        assert!(!same_token("abc", "ab"));
        assert!(!same_token("", "a"));
        assert!(same_token("", ""));
    }
}
