//! Interned strings, frames, stacks and event contexts, shared by every event of a trace.

use std::collections::HashMap;

use super::ids::{ContextId, FrameId, StackId, StringId};

/// One frame of a call stack: a function in a file at a line (0 when unknown).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Frame {
    /// Function name (C++ frames carry the demangled signature).
    pub function: StringId,
    /// Source file; `??` or empty when the unwinder did not know it.
    pub file: StringId,
    /// Line number, 0 when unknown.
    pub line: u32,
}

/// Per-event context that PyTorch attaches to trace entries: the `torch.compile` context and
/// free-form user metadata (`torch.cuda.memory._set_memory_metadata`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Context {
    /// `compile_context` of the entry, empty when absent.
    pub compile_context: StringId,
    /// `user_metadata` of the entry, empty when absent.
    pub user_metadata: StringId,
}

/// The interned tables of a trace.
///
/// Ids are dense indices; id 0 of strings, stacks and contexts is the empty value, so that
/// "absent" needs no `Option`. Stacks list frames innermost first, as PyTorch records them.
#[derive(Clone, Debug)]
pub struct Interner {
    strings: Vec<Box<str>>,
    string_ids: HashMap<Box<str>, StringId>,
    frames: Vec<Frame>,
    frame_ids: HashMap<Frame, FrameId>,
    stack_ranges: Vec<(u32, u32)>,
    stack_frames: Vec<FrameId>,
    stack_ids: HashMap<Box<[FrameId]>, StackId>,
    contexts: Vec<Context>,
    context_ids: HashMap<Context, ContextId>,
}

impl Default for Interner {
    fn default() -> Self {
        Self::new()
    }
}

impl Interner {
    /// Tables holding only the empty string, the empty stack and the empty context.
    pub fn new() -> Self {
        let mut interner = Self {
            strings: Vec::new(),
            string_ids: HashMap::new(),
            frames: Vec::new(),
            frame_ids: HashMap::new(),
            stack_ranges: Vec::new(),
            stack_frames: Vec::new(),
            stack_ids: HashMap::new(),
            contexts: Vec::new(),
            context_ids: HashMap::new(),
        };
        interner.string("");
        interner.stack(&[]);
        interner.context(Context::default());
        interner
    }

    /// Interns `text`.
    pub fn string(&mut self, text: &str) -> StringId {
        if let Some(&id) = self.string_ids.get(text) {
            return id;
        }
        let id = StringId(self.strings.len() as u32);
        let boxed: Box<str> = text.into();
        self.strings.push(boxed.clone());
        self.string_ids.insert(boxed, id);
        id
    }

    /// Looks up an already interned string without adding it.
    pub fn find_string(&self, text: &str) -> Option<StringId> {
        self.string_ids.get(text).copied()
    }

    /// Interns a frame.
    pub fn frame(&mut self, frame: Frame) -> FrameId {
        if let Some(&id) = self.frame_ids.get(&frame) {
            return id;
        }
        let id = FrameId(self.frames.len() as u32);
        self.frames.push(frame);
        self.frame_ids.insert(frame, id);
        id
    }

    /// Interns a stack given innermost frame first.
    pub fn stack(&mut self, frames: &[FrameId]) -> StackId {
        if let Some(&id) = self.stack_ids.get(frames) {
            return id;
        }
        let id = StackId(self.stack_ranges.len() as u32);
        let start = self.stack_frames.len() as u32;
        self.stack_frames.extend_from_slice(frames);
        self.stack_ranges.push((start, frames.len() as u32));
        self.stack_ids.insert(frames.into(), id);
        id
    }

    /// Interns an event context.
    pub fn context(&mut self, context: Context) -> ContextId {
        if let Some(&id) = self.context_ids.get(&context) {
            return id;
        }
        let id = ContextId(self.contexts.len() as u32);
        self.contexts.push(context);
        self.context_ids.insert(context, id);
        id
    }

    /// The text of a string id; empty for an id this table does not hold.
    pub fn resolve(&self, id: StringId) -> &str {
        self.strings.get(id.index()).map_or("", |s| s)
    }

    /// The frame behind an id.
    pub fn frame_of(&self, id: FrameId) -> Option<&Frame> {
        self.frames.get(id.index())
    }

    /// The frames of a stack, innermost first; empty for an id this table does not hold.
    pub fn frames_of(&self, id: StackId) -> &[FrameId] {
        let Some(&(start, len)) = self.stack_ranges.get(id.index()) else {
            return &[];
        };
        self.stack_frames
            .get(start as usize..(start + len) as usize)
            .unwrap_or(&[])
    }

    /// The context behind an id (the empty context for an id this table does not hold).
    pub fn context_of(&self, id: ContextId) -> Context {
        self.contexts.get(id.index()).copied().unwrap_or_default()
    }

    /// Number of interned strings (including the empty string).
    pub fn string_count(&self) -> usize {
        self.strings.len()
    }

    /// Number of interned frames.
    pub fn frame_count(&self) -> usize {
        self.frames.len()
    }

    /// Number of interned stacks (including the empty stack).
    pub fn stack_count(&self) -> usize {
        self.stack_ranges.len()
    }

    /// Number of interned contexts (including the empty context).
    pub fn context_count(&self) -> usize {
        self.contexts.len()
    }

    /// All strings in id order.
    pub fn strings(&self) -> impl ExactSizeIterator<Item = &str> {
        self.strings.iter().map(|s| &**s)
    }

    /// All frames in id order.
    pub fn frames(&self) -> &[Frame] {
        &self.frames
    }

    /// All contexts in id order.
    pub fn contexts(&self) -> &[Context] {
        &self.contexts
    }

    /// All stacks in id order, each as its frames innermost first.
    pub fn stacks(&self) -> impl ExactSizeIterator<Item = &[FrameId]> {
        self.stack_ranges.iter().map(|&(start, len)| {
            self.stack_frames
                .get(start as usize..(start + len) as usize)
                .unwrap_or(&[])
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_is_idempotent_and_zero_is_empty() {
        let mut interner = Interner::new();
        assert_eq!(interner.string(""), StringId(0));
        let a = interner.string("forward");
        assert_eq!(interner.string("forward"), a);
        assert_eq!(interner.resolve(a), "forward");
        let file = interner.string("model.py");
        let f1 = interner.frame(Frame { function: a, file, line: 3 });
        let f2 = interner.frame(Frame { function: a, file, line: 4 });
        assert_ne!(f1, f2);
        assert_eq!(interner.stack(&[]), StackId(0));
        let s = interner.stack(&[f1, f2]);
        assert_eq!(interner.stack(&[f1, f2]), s);
        assert_ne!(interner.stack(&[f2, f1]), s);
        assert_eq!(interner.frames_of(s), &[f1, f2]);
        assert_eq!(interner.frames_of(StackId(999)), &[] as &[FrameId]);
        assert_eq!(interner.context(Context::default()), ContextId(0));
    }
}
