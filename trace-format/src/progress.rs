//! Progress reports and cancellation for long reads.

/// Receives progress of a long read; returning `false` cancels it.
pub trait Progress: Sync {
    /// `done` of `total` units (bytes of input) are processed. Return `false` to cancel.
    fn update(&self, done: u64, total: u64) -> bool;

    /// Bytes `start..end` of the input will not be read again soon (their pages can go).
    fn release(&self, _start: u64, _end: u64) {}
}

/// Progress that nobody watches.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn update(&self, _done: u64, _total: u64) -> bool {
        true
    }
}

impl<F: Fn(u64, u64) -> bool + Sync> Progress for F {
    fn update(&self, done: u64, total: u64) -> bool {
        self(done, total)
    }
}
