//! The `.vtrace` reader on files of chunks with valid checksums around the fuzzer's bytes (the
//! generator the property tests use), so that mutations reach the chunk decoders past the CRC.
#![no_main]

#[path = "../../trace-format/tests/common/generate.rs"]
mod generate;

use libfuzzer_sys::fuzz_target;
use vramscope_trace_format::NoProgress;

/// What a read may hold: well under the 2 GiB RSS limit `scripts/fuzz.sh` runs with (a file
/// declaring more is refused as too large, which is an answer, not a crash).
const FUZZ_MEMORY: vramscope_trace_format::memory::Limit = vramscope_trace_format::memory::Limit {
    bytes: 1 << 30,
    source: vramscope_trace_format::memory::LimitSource::Set,
};

fuzz_target!(|data: &[u8]| {
    let file = generate::vtrace_file(data);
    let _ = vramscope_trace_format::vtrace::read_within(&file, &NoProgress, FUZZ_MEMORY);
});
