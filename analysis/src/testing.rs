//! What the crate's tests build traces with: stacks of named frames and annotation spans.

use vramscope_trace_format::{Annotation, AnnotationKind, Frame, FrameId, ProcessId, StackId, Trace};

/// A stack of `(file, function)` frames, innermost first, each at line 1.
pub(crate) fn stack(trace: &mut Trace, frames: &[(&str, &str)]) -> StackId {
    let ids: Vec<FrameId> = frames
        .iter()
        .map(|(file, function)| {
            let (file, function) = (trace.interner.string(file), trace.interner.string(function));
            trace.interner.frame(Frame { function, file, line: 1 })
        })
        .collect();
    trace.interner.stack(&ids)
}

/// An annotation of `kind` from `start_ns` to `end_ns` on every device.
pub(crate) fn span(trace: &mut Trace, kind: AnnotationKind, name: &str, start_ns: i64, end_ns: i64) {
    let name = trace.interner.string(name);
    trace.annotations.push(Annotation {
        kind,
        device: None,
        process: ProcessId(0),
        start_ns,
        end_ns,
        name,
        stack: StackId(0),
    });
}
