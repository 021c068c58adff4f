//! The `.vtrace` reader must never panic on any bytes, and what it loads must write back, whole
//! and cut to a part.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vramscope_trace_format::{NoProgress, TraceRange, range, vtrace};

/// What a read may hold: well under the 2 GiB RSS limit `scripts/fuzz.sh` runs with (a file
/// declaring more is refused as too large, which is an answer, not a crash).
const FUZZ_MEMORY: vramscope_trace_format::memory::Limit = vramscope_trace_format::memory::Limit {
    bytes: 1 << 30,
    source: vramscope_trace_format::memory::LimitSource::Set,
};

fuzz_target!(|data: &[u8]| {
    if let Ok(loaded) = vtrace::read_within(data, &NoProgress, FUZZ_MEMORY) {
        let _ = vtrace::write(&loaded.trace, Vec::new());
        let mut part = loaded.trace;
        let n = part.events.len() as u64;
        if range::apply(&mut part, TraceRange::Events { from: Some(n / 3), to: Some(n / 3 + 1 + n / 4) }).is_ok() {
            let _ = vtrace::write(&part, Vec::new());
        }
    }
});
