//! Errors of reading and writing traces.

/// Why a file could not be read as a trace.
///
/// Messages say what is wrong and where in the file; the caller adds the file's name.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or writing failed.
    #[error("{0}")]
    Io(std::io::Error),
    /// The file is empty.
    #[error("the file is empty")]
    Empty,
    /// The content is none of the formats vramscope reads.
    #[error("not a format vramscope reads; it starts with {0}. vramscope reads {FORMATS}")]
    UnknownFormat(String),
    /// The pickle is malformed or truncated.
    #[error("malformed pickle at byte {offset}: {message}")]
    Pickle {
        /// Byte offset of the opcode that failed.
        offset: u64,
        /// What is wrong.
        message: String,
    },
    /// The pickle would run code when loaded by Python; it is refused, never executed.
    #[error(
        "refusing to load this pickle: it contains the opcode {opcode} at byte {offset}, which \
         imports or calls Python code. Memory snapshots hold only plain data (dicts, lists, \
         strings, numbers), so this file is either not a snapshot or has been tampered with"
    )]
    UnsafePickle {
        /// Byte offset of the opcode.
        offset: u64,
        /// Name of the opcode.
        opcode: &'static str,
    },
    /// The data is well-formed but not shaped like the format it claims to be.
    #[error("{0}")]
    Structure(String),
    /// A JSON file could not be parsed.
    #[error("malformed JSON: {0}")]
    Json(serde_json::Error),
    /// A `.vtrace` file is damaged before any usable data.
    #[error("damaged .vtrace at byte {offset}: {message}")]
    Vtrace {
        /// Byte offset where the damage starts.
        offset: u64,
        /// What is wrong.
        message: String,
    },
    /// A `.vtrace` file is of a newer version than this build reads.
    #[error(".vtrace version {found} is newer than this vramscope reads (up to {supported}); update vramscope")]
    VtraceVersion {
        /// Version in the file.
        found: u16,
        /// Highest version this build reads.
        supported: u16,
    },
    /// Reading would take more memory than the machine has available.
    #[error(
        "reading it needs more memory than this machine has available: {what} would take {} MiB \
         and at most {} MiB may be used{}",
        needed_bytes >> 20,
        limit.bytes >> 20,
        limit.why()
    )]
    Memory {
        /// What needs the memory, in words.
        what: String,
        /// Bytes it would take, at least.
        needed_bytes: u64,
        /// What the read may take.
        limit: crate::memory::Limit,
    },
    /// The caller cancelled the work.
    #[error("cancelled")]
    Cancelled,
}

// Not `#[from]`: that would make the inner error the source too, and an error chain printed
// whole (`{:#}`) would say its message twice.
impl From<std::io::Error> for Error {
    fn from(error: std::io::Error) -> Self {
        Self::Io(error)
    }
}

impl From<serde_json::Error> for Error {
    fn from(error: serde_json::Error) -> Self {
        Self::Json(error)
    }
}

/// The formats vramscope reads, for messages about a file that is none of them.
pub const FORMATS: &str = "PyTorch memory snapshots (torch.cuda.memory._dump_snapshot's .pickle, or \
     memory_viz's .html), PyTorch profiler traces (export_chrome_trace's .json, \
     tensorboard_trace_handler's .pt.trace.json.gz), memory timelines (export_memory_timeline's .json or \
     .raw.json.gz), and .vtrace (vramscope record, convert); any of them gzip- or zstd-compressed";

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
