//! The `.vtrace` reader must never panic on any bytes, and what it loads must write back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vramscope_trace_format::{NoProgress, vtrace};

fuzz_target!(|data: &[u8]| {
    if let Ok(loaded) = vtrace::read(data, &NoProgress) {
        let _ = vtrace::write(&loaded.trace, Vec::new());
    }
});
