//! Writing an output file atomically: through a temporary file beside it, renamed into place
//! when complete, so that the output is never half-written and an existing file is replaced only
//! when asked. The temporary file gets the permissions a new file gets (0666 less the umask, as
//! with `>` in a shell), and an interrupting SIGINT, SIGTERM or SIGHUP, or an abort, removes it.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use vramscope_collector::cleanup::Registered;

/// A file being written in place of `output`.
pub struct AtomicFile {
    temp: tempfile::NamedTempFile,
    output: PathBuf,
    _cleanup: Registered,
}

impl AtomicFile {
    /// Starts writing `output` (nothing is there yet).
    pub fn create(output: &Path) -> Result<Self> {
        use std::os::unix::fs::PermissionsExt;
        let dir = output.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let temp = tempfile::Builder::new()
            .prefix(".vramscope-")
            .suffix(".part")
            .permissions(std::fs::Permissions::from_mode(0o666))
            .tempfile_in(dir)
            .with_context(|| format!("cannot create a file in {}", dir.display()))?;
        let cleanup = Registered::new(temp.path());
        Ok(Self { temp, output: output.to_owned(), _cleanup: cleanup })
    }

    /// Where it goes once complete.
    pub fn output(&self) -> &Path {
        &self.output
    }

    /// The file to write to.
    pub fn file(&mut self) -> &mut std::fs::File {
        self.temp.as_file_mut()
    }

    /// Flushes to disk and renames into place, replacing an existing output only with `force`.
    /// Returns the bytes written.
    pub fn commit(self, force: bool) -> Result<u64> {
        let output = self.output;
        let cannot = || format!("cannot write {}", output.display());
        self.temp.as_file().sync_all().with_context(cannot)?;
        let written = self.temp.as_file().metadata().with_context(cannot)?.len();
        if force {
            self.temp.persist(&output).map_err(|e| e.error).with_context(cannot)?;
        } else {
            self.temp
                .persist_noclobber(&output)
                .map_err(|e| e.error)
                .with_context(|| format!("cannot write {} (it appeared in the meantime?)", output.display()))?;
        }
        Ok(written)
    }
}

/// Writes `bytes` to `output` atomically.
pub fn write(output: &Path, bytes: &[u8], force: bool) -> Result<u64> {
    let mut file = AtomicFile::create(output)?;
    file.file().write_all(bytes).with_context(|| format!("cannot write {}", output.display()))?;
    file.commit(force)
}

/// Checks, before any work, that `output` can be written: its directory exists and takes new
/// files, it is not a directory, and it is not there already unless `force`.
pub fn check_writable(output: &Path, force: bool) -> Result<()> {
    if output.is_dir() {
        anyhow::bail!("{} is a directory; give the path of the file to write", output.display());
    }
    if output.exists() && !force {
        anyhow::bail!("{} already exists; pass --force to replace it", output.display());
    }
    let dir = output.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !dir.is_dir() {
        anyhow::bail!("cannot write {}: the directory {} does not exist", output.display(), dir.display());
    }
    // Writable means a file can be made there: try it (permissions, read-only mounts, quotas).
    tempfile::Builder::new()
        .prefix(".vramscope-check-")
        .tempfile_in(dir)
        .with_context(|| format!("cannot write {}: {} does not take new files", output.display(), dir.display()))?;
    Ok(())
}
