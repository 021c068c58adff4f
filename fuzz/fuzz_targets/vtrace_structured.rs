//! The `.vtrace` reader on files of chunks with valid checksums around the fuzzer's bytes (the
//! generator the property tests use), so that mutations reach the chunk decoders past the CRC.
#![no_main]

#[path = "../../trace-format/tests/common/generate.rs"]
mod generate;

use libfuzzer_sys::fuzz_target;
use vramscope_trace_format::NoProgress;

fuzz_target!(|data: &[u8]| {
    let file = generate::vtrace_file(data);
    let _ = vramscope_trace_format::vtrace::read(&file, &NoProgress);
});
