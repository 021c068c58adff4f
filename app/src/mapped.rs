//! A large input file mapped into memory, whose already-read pages can be handed back.
//!
//! Reading a 500 MB snapshot into a buffer keeps all of it resident until the import ends, on
//! top of what the import builds. Mapped, the pages the parser has moved past are returned to
//! the kernel as it goes (and read again from the page cache should the parser look back), so
//! the file costs a window of memory rather than its size.
#![allow(unsafe_code)]

use std::fs::File;
use std::sync::atomic::{AtomicUsize, Ordering};

use memmap2::{Mmap, UncheckedAdvice};

/// A read-only mapping of a whole file.
pub struct MappedFile {
    map: Mmap,
    released: AtomicUsize,
}

impl MappedFile {
    /// Maps `file`.
    pub fn map(file: &File) -> std::io::Result<Self> {
        // SAFETY: the mapping is read-only and shared, and its bytes are only ever parsed as
        // untrusted input; what is undefined is another process truncating or rewriting the
        // file while it is mapped, the same assumption every tool that maps its input makes
        // (and the reason small files are read instead).
        let map = unsafe { Mmap::map(file)? };
        Ok(Self { map, released: AtomicUsize::new(0) })
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// Hands the whole pages inside `start..end` back to the kernel.
    pub fn release_range(&self, start: usize, end: usize) {
        const PAGE: usize = 4096;
        let start = start.div_ceil(PAGE) * PAGE;
        let end = end.min(self.map.len()) / PAGE * PAGE;
        if end <= start {
            return;
        }
        // SAFETY: as in `release_before`: dropping pages of a shared read-only file mapping
        // leaves its contents as they are; a later access reads them again from the file.
        let _ = unsafe { self.map.unchecked_advise_range(UncheckedAdvice::DontNeed, start, end - start) };
    }

    /// Hands the whole pages before `offset` back to the kernel.
    pub fn release_before(&self, offset: usize) {
        const PAGE: usize = 4096;
        let end = offset.min(self.map.len()) / PAGE * PAGE;
        let start = self.released.load(Ordering::Relaxed);
        if end <= start {
            return;
        }
        // SAFETY: the mapping is of a file, shared and read-only: on Linux, MADV_DONTNEED on it
        // drops this process's pages and a later access reads the same bytes again from the
        // file, so the borrowed slice keeps its contents. Failure only leaves the pages resident.
        let released = unsafe { self.map.unchecked_advise_range(UncheckedAdvice::DontNeed, start, end - start) };
        if released.is_ok() {
            self.released.store(end, Ordering::Relaxed);
        }
    }
}
