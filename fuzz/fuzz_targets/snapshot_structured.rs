//! The snapshot importer on snapshot-shaped pickles built from the fuzzer's bytes (valid opcode
//! streams with shared references, wrong types and repeated objects: the generator the property
//! tests use), so that mutations reach the importer's logic past the pickle's syntax.
#![no_main]

#[path = "../../trace-format/tests/common/generate.rs"]
mod generate;

use libfuzzer_sys::fuzz_target;
use vramscope_trace_format::NoProgress;

fuzz_target!(|data: &[u8]| {
    let pickle = generate::snapshot_pickle(data);
    let _ = vramscope_trace_format::import(&pickle, &NoProgress);
});
