//! The hook library `record` preloads into the workload, and the emulation library `estimate`
//! preloads. They travel inside the binary (built by `collector/build.rs` for the same target
//! and profile) and are written out for each recording, so that a `cargo install`ed binary, or
//! the one a pip wheel installs, needs nothing beside it. `VRAMSCOPE_HOOK` points at another
//! build of the hook instead.

#![allow(unsafe_code)]

use std::path::{Path, PathBuf};

use vramscope_wire::env;

use crate::error::Error;

/// The hook library's file name.
pub const HOOK_FILE: &str = "libvramscope_hook.so";

/// The hook library built with this binary.
#[allow(clippy::large_include_file, reason = "the library is what record preloads; it has to be carried")]
const LIBRARY: &[u8] = include_bytes!(env!("VRAMSCOPE_HOOK_LIBRARY"));

/// The emulation library (`collector/emulate`), which `estimate` preloads and offers as
/// `libcuda.so.1`.
#[allow(clippy::large_include_file, reason = "the library is what estimate preloads; it has to be carried")]
const EMULATION: &[u8] = include_bytes!(env!("VRAMSCOPE_EMULATE_LIBRARY"));

/// The hook library to preload for a recording whose directory is `dir`: `VRAMSCOPE_HOOK` when it
/// is set, else the one this binary carries, written into `dir` (or, where `dir` is on a file
/// system that may not hold programs, mounted `noexec`, into the user's cache directory).
pub fn hook_for(dir: &Path) -> Result<PathBuf, Error> {
    if let Some(path) = std::env::var_os(env::HOOK) {
        let path = PathBuf::from(path);
        if !path.is_file() {
            return Err(Error::MissingHook(path));
        }
        return Ok(path);
    }
    carry(dir, HOOK_FILE, "hook", LIBRARY)
}

/// The emulation library for an estimate whose directory is `dir`, as `libcuda.so.1` in a folder
/// of its own (`emulate/` in `dir`, or in the cache directory where `dir` is `noexec`): the
/// program preloads it, and finds it first on `LD_LIBRARY_PATH` when it opens the driver.
pub fn emulation_for(dir: &Path) -> Result<PathBuf, Error> {
    let folder = dir.join("emulate");
    std::fs::create_dir_all(&folder)
        .map_err(|source| Error::Io { what: format!("cannot create {}", folder.display()), source })?;
    carry(&folder, "libcuda.so.1", "emulate", EMULATION)
}

/// `library` written as `file` into `dir`, or into a folder of the cache directory named by its
/// content where `dir` is mounted `noexec`; its path. `what` names it in errors and the cache.
fn carry(dir: &Path, file: &str, what: &str, library: &[u8]) -> Result<PathBuf, Error> {
    if !noexec(dir) {
        let path = dir.join(file);
        std::fs::write(&path, library).map_err(|source| Error::Io {
            what: format!("cannot write the {what} library to {}", path.display()),
            source,
        })?;
        return Ok(path);
    }
    let cache = cache_dir().filter(|c| std::fs::create_dir_all(c).is_ok() && !noexec(c));
    let Some(cache) = cache else {
        return Err(Error::Io {
            what: format!(
                "{} is mounted noexec, so the {what} library cannot be loaded from there, and there is no cache \
                 directory that allows it; set TMPDIR to a directory that does",
                dir.display()
            ),
            source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        });
    };
    // Named by its content: recorders of different versions never load each other's.
    let folder = cache.join(format!("{what}-{}-{:016x}", env!("CARGO_PKG_VERSION"), fnv1a(library)));
    let path = folder.join(file);
    if std::fs::read(&path).is_ok_and(|held| held == library) {
        return Ok(path);
    }
    std::fs::create_dir_all(&folder)
        .map_err(|source| Error::Io { what: format!("cannot create {}", folder.display()), source })?;
    let partial = folder.join(format!(".{what}-{}.partial", std::process::id()));
    std::fs::write(&partial, library).and_then(|()| std::fs::rename(&partial, &path)).map_err(|source| Error::Io {
        what: format!("cannot write the {what} library to {}", path.display()),
        source,
    })?;
    Ok(path)
}

/// `$XDG_CACHE_HOME/vramscope`, else `~/.cache/vramscope`.
fn cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").filter(|v| !v.is_empty()).map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("vramscope"))
}

/// Whether the file system holding `dir` refuses to map programs from it.
fn noexec(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else { return false };
    let mut stats = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `path` is a NUL-terminated string and `stats` points at room for one statvfs.
    let status = unsafe { libc::statvfs(path.as_ptr(), stats.as_mut_ptr()) };
    // SAFETY: statvfs filled it in when it returned 0.
    status == 0 && unsafe { stats.assume_init() }.f_flag & libc::ST_NOEXEC != 0
}

/// FNV-1a, 64 bits: names a library by its bytes.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_carried_library_is_a_shared_object_that_exports_the_hook() {
        assert_eq!(&LIBRARY[..4], b"\x7fELF");
        // ET_DYN
        assert_eq!(u16::from_le_bytes([LIBRARY[16], LIBRARY[17]]), 3);
        let exported = |name: &[u8]| LIBRARY.windows(name.len()).any(|w| w == name);
        assert!(exported(b"cuGetProcAddress_v2"), "the carried library holds no CUDA driver hook");
    }

    #[test]
    fn a_recording_directory_gets_a_copy() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!noexec(dir.path()));
        let path = hook_for(dir.path()).unwrap();
        assert_eq!(path, dir.path().join(HOOK_FILE));
        assert_eq!(std::fs::read(&path).unwrap(), LIBRARY);
    }

    #[test]
    fn an_estimate_gets_the_emulation_as_the_driver() {
        let dir = tempfile::tempdir().unwrap();
        let path = emulation_for(dir.path()).unwrap();
        assert_eq!(path, dir.path().join("emulate").join("libcuda.so.1"));
        let library = std::fs::read(&path).unwrap();
        let exported = |name: &[u8]| library.windows(name.len()).any(|w| w == name);
        for name in [&b"cudaGetDeviceCount"[..], b"cuDevicePrimaryCtxGetState", b"cudaStreamIsCapturing"] {
            assert!(exported(name), "the emulation library does not define {}", String::from_utf8_lossy(name));
        }
    }
}
