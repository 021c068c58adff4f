//! The sample recording built into the binary: what the desktop app shows when it is started
//! without a file. It is `samples/traces/h200-torch-plain.vtrace`, recorded with
//! `vramscope record` on an NVIDIA H200 (see `samples/README.md`).

use std::path::Path;

/// The name the sample goes by where a file would have a path.
pub const PATH: &str = "vramscope-sample:h200-gpt-adamw.vtrace";

/// What the window's title and the toolbar call it.
pub const TITLE: &str = "Sample: GPT, 167M parameters, AdamW, fp32, on an NVIDIA H200";

/// The trace's bytes.
pub const BYTES: &[u8] = include_bytes!("../../samples/traces/h200-torch-plain.vtrace");

/// Whether `path` names the built-in sample.
pub fn is_sample(path: &Path) -> bool {
    path == Path::new(PATH)
}

#[cfg(test)]
mod tests {
    use vramscope_trace_format::NoProgress;

    #[test]
    fn the_sample_is_a_recording_with_tags_and_phases() {
        let imported = vramscope_trace_format::import(super::BYTES, &NoProgress).expect("the sample imports");
        let trace = imported.trace;
        assert!(trace.events.len() > 1000);
        assert!(trace.tags.len() > 100);
        assert!(trace.annotations.len() > 10);
        assert!(trace.interner.stack_count() > 10);
    }
}
