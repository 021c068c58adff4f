//! Recording GPU memory events: the driver-level hook library, the PyTorch shim and the process
//! that merges what they report into one `.vtrace`.
//!
//! Nothing is recorded yet; this crate holds the place the workspace layout gives it, so that
//! the dependency direction (`trace-format` <- `collector`) is fixed from the start.

/// The version of the trace format the collector writes.
pub fn trace_format_version() -> u16 {
    vramscope_trace_format::vtrace::VERSION
}
