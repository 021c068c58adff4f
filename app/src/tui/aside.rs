//! What is written to standard error while the terminal view is drawn (warnings, a progress
//! bar, the recorder's notes) would land on the view: it is set aside in a file and written to
//! the real standard error once the view is closed.
#![allow(unsafe_code)]

use std::io::{Read, Seek, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Standard error set aside until dropped.
pub struct StderrAside {
    saved: OwnedFd,
    file: std::fs::File,
}

impl StderrAside {
    /// Sets standard error aside (`None` when it cannot be: it is then left as it is).
    pub fn start() -> Option<Self> {
        let file = tempfile::tempfile().ok()?;
        // SAFETY: dup and dup2 on descriptors this process holds; the duplicate is owned here.
        unsafe {
            let saved = libc::dup(libc::STDERR_FILENO);
            if saved < 0 {
                return None;
            }
            let saved = OwnedFd::from_raw_fd(saved);
            if libc::dup2(file.as_raw_fd(), libc::STDERR_FILENO) < 0 {
                return None;
            }
            Some(Self { saved, file })
        }
    }
}

impl Drop for StderrAside {
    fn drop(&mut self) {
        // SAFETY: puts back the descriptor saved in `start`.
        unsafe {
            libc::dup2(self.saved.as_raw_fd(), libc::STDERR_FILENO);
        }
        let mut said = Vec::new();
        if self.file.rewind().is_ok() && self.file.read_to_end(&mut said).is_ok() && !said.is_empty() {
            let _ = std::io::stderr().write_all(&said);
        }
    }
}
