//! The snapshot importer must never panic, hang or allocate without bound, whatever the bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vramscope_trace_format::NoProgress;
use vramscope_trace_format::import::snapshot::import_snapshot;

fuzz_target!(|data: &[u8]| {
    let _ = import_snapshot(data, &NoProgress);
});
