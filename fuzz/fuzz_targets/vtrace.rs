//! The `.vtrace` reader must never panic on any bytes, and what it loads must write back, whole
//! and cut to a part.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vramscope_trace_format::{NoProgress, TraceRange, range, vtrace};

fuzz_target!(|data: &[u8]| {
    if let Ok(loaded) = vtrace::read(data, &NoProgress) {
        let _ = vtrace::write(&loaded.trace, Vec::new());
        let mut part = loaded.trace;
        let n = part.events.len() as u64;
        if range::apply(&mut part, TraceRange::Events { from: Some(n / 3), to: Some(n / 3 + 1 + n / 4) }).is_ok() {
            let _ = vtrace::write(&part, Vec::new());
        }
    }
});
