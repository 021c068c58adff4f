//! The memory-timeline importers (`.json` and `raw.json.gz`) must never panic on any bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vramscope_trace_format::NoProgress;
use vramscope_trace_format::import::memory_timeline::{import_json, import_raw_gz};

fuzz_target!(|data: &[u8]| {
    let _ = import_json(data, &NoProgress);
    let _ = import_raw_gz(data, &NoProgress);
});
