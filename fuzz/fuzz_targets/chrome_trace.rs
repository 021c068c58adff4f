//! The Chrome-trace importer must never panic on any bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vramscope_trace_format::NoProgress;
use vramscope_trace_format::import::chrome::import_chrome_trace;

fuzz_target!(|data: &[u8]| {
    let _ = import_chrome_trace(data, &NoProgress);
});
