//! Why a recording could not be made: the one error the recorder's steps (finding the hook
//! library, starting the workload, reading what it wrote) return.

use std::path::PathBuf;

/// Why a recording could not be made (the workload's own failure is not one: it is in
/// [`Recording::status`](crate::session::Recording::status)).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `VRAMSCOPE_HOOK` names no file.
    #[error(
        "VRAMSCOPE_HOOK names {0}, which is not a file: point it at a build of libvramscope_hook.so \
         (`cargo build -p vramscope-hook`), or unset it to use the library this binary carries"
    )]
    MissingHook(PathBuf),
    /// Something around the workload failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
}

pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}
