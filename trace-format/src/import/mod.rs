//! Importers of other tools' files, chosen by content, never by file name.

pub mod chrome;
pub mod memory_timeline;
mod pickle;
pub mod snapshot;

use crate::error::{Error, Result};
use crate::model::metadata::SourceFormat;
use crate::model::trace::Trace;
use crate::progress::Progress;

/// A trace read from a file, with what was odd about the file but not fatal.
#[derive(Debug)]
pub struct Imported {
    /// The trace.
    pub trace: Trace,
    /// Things the reader skipped or repaired, for the user to see.
    pub warnings: Vec<String>,
    /// The format of the file itself (a `.vtrace` converted from a snapshot is `Vtrace` here and
    /// `PytorchSnapshot` in its metadata).
    pub format: SourceFormat,
}

/// The formats vramscope reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Detected {
    /// A `.vtrace`.
    Vtrace,
    /// A pickle (a PyTorch memory snapshot if anything).
    Pickle,
    /// Gzip-compressed data (the profiler's `raw.json.gz` memory timeline export).
    Gzip,
    /// JSON: a Chrome trace or a memory timeline.
    Json,
}

/// Tells the format from the first bytes of a file.
pub fn detect(data: &[u8]) -> Result<Detected> {
    if data.is_empty() {
        return Err(Error::Empty);
    }
    if data.starts_with(&crate::vtrace::MAGIC) {
        return Ok(Detected::Vtrace);
    }
    if data[0] == 0x80 && data.len() > 1 && (2..=5).contains(&data[1]) {
        return Ok(Detected::Pickle);
    }
    if data.starts_with(&[0x1f, 0x8b]) {
        return Ok(Detected::Gzip);
    }
    let first = data.iter().copied().find(|b| !b.is_ascii_whitespace());
    if matches!(first, Some(b'{') | Some(b'[')) {
        return Ok(Detected::Json);
    }
    if data.starts_with(&[0xef, 0xbb, 0xbf]) {
        return Ok(Detected::Json);
    }
    Err(Error::UnknownFormat(describe_start(data)))
}

/// A short, printable description of a file's first bytes, for error messages.
fn describe_start(data: &[u8]) -> String {
    let head = &data[..data.len().min(16)];
    let printable = head.iter().all(|b| b.is_ascii_graphic() || *b == b' ');
    if printable {
        format!("{:?}", String::from_utf8_lossy(head))
    } else {
        let hex: Vec<String> = head.iter().map(|b| format!("{b:02x}")).collect();
        format!("the bytes {}", hex.join(" "))
    }
}

/// Reads any supported file from its bytes.
///
/// `.vtrace` files damaged at the end load up to the damage; the damage is reported as a warning.
pub fn import(data: &[u8], progress: &dyn Progress) -> Result<Imported> {
    match detect(data)? {
        Detected::Vtrace => {
            let loaded = crate::vtrace::read(data, progress)?;
            let warnings = loaded.damage.iter().map(ToString::to_string).collect();
            Ok(Imported { trace: loaded.trace, warnings, format: SourceFormat::Vtrace })
        }
        Detected::Pickle => snapshot::import_snapshot(data, progress),
        Detected::Gzip => memory_timeline::import_raw_gz(data, progress),
        Detected::Json => import_json(data, progress),
    }
}

/// Reads any supported file from its bytes, taking them so that they can be freed as soon as
/// they have been read (a snapshot's bytes go before its trace is built): less memory at the peak.
pub fn import_owned(data: Vec<u8>, progress: &dyn Progress) -> Result<Imported> {
    match detect(&data)? {
        Detected::Pickle => {
            let parsed = snapshot::parse(&data, progress)?;
            drop(data);
            parsed.build()
        }
        _ => import(&data, progress),
    }
}

fn import_json(data: &[u8], progress: &dyn Progress) -> Result<Imported> {
    let data = data.strip_prefix(&[0xef, 0xbb, 0xbf]).unwrap_or(data);
    let first = data.iter().copied().find(|b| !b.is_ascii_whitespace());
    match first {
        // The Chrome trace is an object with `traceEvents` (or, rarely, a bare array of events);
        // the memory timeline is `[times, sizes]` and the raw export a list of 4-number lists.
        Some(b'{') => chrome::import_chrome_trace(data, progress),
        _ => {
            if memory_timeline::looks_like_timeline(data) {
                memory_timeline::import_json(data, progress)
            } else {
                chrome::import_chrome_trace(data, progress)
            }
        }
    }
}
