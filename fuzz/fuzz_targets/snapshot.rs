//! The snapshot importer must never panic, hang or allocate without bound, whatever the bytes:
//! read whole, and read in part (the entries outside the range folded as they are read).
#![no_main]

use libfuzzer_sys::fuzz_target;
use vramscope_trace_format::import::snapshot::import_snapshot;
use vramscope_trace_format::{NoProgress, TraceRange, import_range};

fuzz_target!(|data: &[u8]| {
    let _ = import_snapshot(data, &NoProgress);
    let n = data.len() as u64;
    let by_events = TraceRange::Events { from: Some(n % 7), to: Some(n % 7 + 1 + n % 13) };
    let _ = import_range(data, &NoProgress, Some(by_events));
    let by_time = TraceRange::Time { from_ns: Some((n % 5 * 1000) as i64), to_ns: None };
    let _ = import_range(data, &NoProgress, Some(by_time));
});
