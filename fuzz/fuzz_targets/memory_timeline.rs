//! The memory-timeline importer (`.json`, and whatever a compressed container holds, through
//! `import`) must never panic on any bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vramscope_trace_format::NoProgress;
use vramscope_trace_format::import::memory_timeline::import_json;

fuzz_target!(|data: &[u8]| {
    let _ = import_json(data, &NoProgress);
    let _ = vramscope_trace_format::import(data, &NoProgress);
});
