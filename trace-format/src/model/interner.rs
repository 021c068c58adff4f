//! Interned strings, frames, stacks and event contexts, shared by every event of a trace.

use rustc_hash::FxHashMap as HashMap;

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
    /// Keyed by bytes, so that bytes already interned need no UTF-8 validation.
    string_ids: HashMap<Box<[u8]>, StringId>,
    frames: Vec<Frame>,
    frame_ids: HashMap<Frame, FrameId>,
    stack_ranges: Vec<(u32, u32)>,
    stack_frames: Vec<FrameId>,
    /// Stacks by [`stack_hash`]: the first stack with each hash, then any others (rare).
    stack_ids: HashMap<u64, StackId>,
    stack_collisions: Vec<(u64, StackId)>,
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
            string_ids: HashMap::default(),
            frames: Vec::new(),
            frame_ids: HashMap::default(),
            stack_ranges: Vec::new(),
            stack_frames: Vec::new(),
            stack_ids: HashMap::default(),
            stack_collisions: Vec::new(),
            contexts: Vec::new(),
            context_ids: HashMap::default(),
        };
        interner.string("");
        interner.stack(&[]);
        interner.context(Context::default());
        interner
    }

    /// Interns `text`.
    pub fn string(&mut self, text: &str) -> StringId {
        if let Some(&id) = self.string_ids.get(text.as_bytes()) {
            return id;
        }
        let id = StringId(self.strings.len() as u32);
        self.strings.push(text.into());
        self.string_ids.insert(text.as_bytes().into(), id);
        id
    }

    /// Interns UTF-8 `bytes`; `None` when they are not UTF-8. Bytes seen before are not
    /// validated again.
    pub fn string_from_utf8(&mut self, bytes: &[u8]) -> Option<StringId> {
        if let Some(&id) = self.string_ids.get(bytes) {
            return Some(id);
        }
        std::str::from_utf8(bytes).ok().map(|text| self.string(text))
    }

    /// Looks up an already interned string without adding it.
    pub fn find_string(&self, text: &str) -> Option<StringId> {
        self.string_ids.get(text.as_bytes()).copied()
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
        let hash = stack_hash(frames);
        if let Some(&id) = self.stack_ids.get(&hash) {
            if self.frames_of(id) == frames {
                return id;
            }
            if let Some(&(_, id)) =
                self.stack_collisions.iter().find(|&&(h, id)| h == hash && self.frames_of(id) == frames)
            {
                return id;
            }
        }
        let id = StackId(self.stack_ranges.len() as u32);
        let start = self.stack_frames.len() as u32;
        self.stack_frames.extend_from_slice(frames);
        self.stack_ranges.push((start, frames.len() as u32));
        match self.stack_ids.entry(hash) {
            std::collections::hash_map::Entry::Occupied(_) => self.stack_collisions.push((hash, id)),
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(id);
            }
        }
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
        self.stack_frames.get(start as usize..(start + len) as usize).unwrap_or(&[])
    }

    /// The context behind an id (the empty context for an id this table does not hold).
    pub fn context_of(&self, id: ContextId) -> Context {
        self.contexts.get(id.index()).copied().unwrap_or_default()
    }

    /// The sizes of the tables, to undo additions with [`Interner::truncate`].
    pub fn lens(&self) -> [usize; 4] {
        [self.strings.len(), self.frames.len(), self.stack_ranges.len(), self.contexts.len()]
    }

    /// Drops entries added after `lens` was taken (never the built-in id-0 entries).
    pub fn truncate(&mut self, lens: [usize; 4]) {
        let [strings, frames, stacks, contexts] = lens;
        for text in self.strings.drain(strings.max(1)..) {
            self.string_ids.remove(text.as_bytes());
        }
        for frame in self.frames.drain(frames..) {
            self.frame_ids.remove(&frame);
        }
        let keep = stacks.max(1);
        if let Some(&(start, _)) = self.stack_ranges.get(keep) {
            let removed: Vec<u64> = self.stack_ranges[keep..]
                .iter()
                .map(|&(s, l)| stack_hash(&self.stack_frames[s as usize..(s + l) as usize]))
                .collect();
            for hash in removed {
                if self.stack_ids.get(&hash).is_some_and(|id| id.index() >= keep) {
                    self.stack_ids.remove(&hash);
                }
            }
            self.stack_collisions.retain(|&(_, id)| id.index() < keep);
            self.stack_ranges.truncate(keep);
            self.stack_frames.truncate(start as usize);
        }
        for context in self.contexts.drain(contexts.max(1)..) {
            self.context_ids.remove(&context);
        }
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
        self.stack_ranges
            .iter()
            .map(|&(start, len)| self.stack_frames.get(start as usize..(start + len) as usize).unwrap_or(&[]))
    }
}

/// A fast 64-bit hash of a stack's frame ids, two ids per step.
fn stack_hash(frames: &[FrameId]) -> u64 {
    const K: u64 = 0xf135_7aea_2e62_a9c5;
    let mut hash = frames.len() as u64;
    let mut pairs = frames.chunks_exact(2);
    for pair in &mut pairs {
        let word = u64::from(pair[0].0) | (u64::from(pair[1].0) << 32);
        hash = (hash.rotate_left(26) ^ word).wrapping_mul(K);
    }
    if let [last] = pairs.remainder() {
        hash = (hash.rotate_left(26) ^ u64::from(last.0)).wrapping_mul(K);
    }
    hash ^ (hash >> 29)
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

    #[test]
    fn truncate_forgets_later_entries() {
        let mut interner = Interner::new();
        let a = interner.string("a");
        let f = interner.frame(Frame { function: a, file: a, line: 1 });
        let s = interner.stack(&[f]);
        let lens = interner.lens();
        let b = interner.string("b");
        let g = interner.frame(Frame { function: b, file: b, line: 2 });
        interner.stack(&[f, g]);
        interner.context(Context { compile_context: b, user_metadata: a });
        interner.truncate(lens);
        assert_eq!(interner.lens(), lens);
        assert_eq!(interner.find_string("b"), None);
        assert_eq!(interner.stack(&[f]), s);
        // Re-adding after truncation gives the same ids as the first time.
        assert_eq!(interner.string("b"), b);
        assert_eq!(interner.frame(Frame { function: b, file: b, line: 2 }), g);
    }
}
