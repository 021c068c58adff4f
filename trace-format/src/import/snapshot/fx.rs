//! Frames of `torch.compile`'s generated code, augmented by
//! `torch.cuda.memory._snapshot(augment_with_fx_traces=True)` (PyTorch 2.10+) with the FX node
//! each line runs and that node's original source trace (`fx_original_trace`: the user's
//! `File "model.py", line 12, in forward` lines). The original trace explains an allocation far
//! better than the generated file does, so it becomes real frames of the stack, right after (as
//! the callers of) the generated frame.

use rustc_hash::FxHashMap;

use crate::model::ids::{FrameId, StackId, StringId};
use crate::model::interner::{Frame, Interner};
use crate::model::trace::Trace;

/// At most this many frames are taken from one original trace.
const MAX_ORIGINAL_FRAMES: usize = 64;

/// The frames of a Python traceback text, innermost first (a traceback lists the outermost
/// first). A text without `File "...", line N, in f` lines becomes one frame holding its first
/// line, so that it still shows.
fn original_frames(interner: &mut Interner, text: &str) -> Vec<FrameId> {
    let mut frames = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        let Some(rest) = line.strip_prefix("File \"") else { continue };
        let Some((file, rest)) = rest.split_once("\", line ") else { continue };
        let (number, function) = rest.split_once(", in ").unwrap_or((rest, ""));
        let Ok(number) = number.trim().parse::<u32>() else { continue };
        let frame = Frame { function: interner.string(function.trim()), file: interner.string(file), line: number };
        frames.push(interner.frame(frame));
        if frames.len() == MAX_ORIGINAL_FRAMES {
            break;
        }
    }
    if frames.is_empty()
        && let Some(first) = text.lines().map(str::trim).find(|l| !l.is_empty())
    {
        let frame = Frame { function: interner.string(first), file: StringId(0), line: 0 };
        frames.push(interner.frame(frame));
    }
    frames.reverse();
    frames
}

/// Rewrites every stack that holds an augmented frame so that the node's original frames follow
/// it, and points every record at the rewritten stacks.
pub(super) fn expand_stacks(trace: &mut Trace, fx_traces: &FxHashMap<FrameId, StringId>) {
    let interner = &mut trace.interner;
    // Many frames can share one trace text: each text is read once.
    let mut by_text: FxHashMap<StringId, Vec<FrameId>> = FxHashMap::default();
    let mut originals: FxHashMap<FrameId, Vec<FrameId>> = FxHashMap::default();
    for (&frame, &text) in fx_traces {
        let frames = match by_text.get(&text) {
            Some(frames) => frames.clone(),
            None => {
                let owned = interner.resolve(text).to_owned();
                let frames = original_frames(interner, &owned);
                by_text.insert(text, frames.clone());
                frames
            }
        };
        originals.insert(frame, frames);
    }
    let mut map: FxHashMap<StackId, StackId> = FxHashMap::default();
    let count = interner.stack_count();
    let mut expanded = Vec::new();
    for index in 1..count {
        let stack = StackId(index as u32);
        let frames = interner.frames_of(stack);
        if !frames.iter().any(|f| originals.contains_key(f)) {
            continue;
        }
        expanded.clear();
        // How many times each frame occurs further out than the one being looked at.
        let mut outer: FxHashMap<FrameId, usize> = FxHashMap::default();
        for f in frames {
            *outer.entry(*f).or_insert(0) += 1;
        }
        for f in frames {
            if let Some(count) = outer.get_mut(f) {
                *count -= 1;
            }
            expanded.push(*f);
            if let Some(extra) = originals.get(f) {
                // The original trace often repeats the outer frames the real stack has anyway
                // (the training script's line): those are left to the real stack.
                expanded.extend(extra.iter().filter(|o| outer.get(o).is_none_or(|&n| n == 0)));
            }
        }
        let frames = std::mem::take(&mut expanded);
        map.insert(stack, interner.stack(&frames));
        expanded = frames;
    }
    if map.is_empty() {
        return;
    }
    let remap = |stack: &mut StackId| {
        if let Some(&to) = map.get(stack) {
            *stack = to;
        }
    };
    trace.events.iter_mut().for_each(|e| remap(&mut e.stack));
    trace.ooms.iter_mut().for_each(|o| remap(&mut o.stack));
    trace.annotations.iter_mut().for_each(|a| remap(&mut a.stack));
    for segment in &mut trace.segments {
        remap(&mut segment.stack);
        segment.blocks.iter_mut().for_each(|b| remap(&mut b.stack));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceback_becomes_frames_innermost_first() {
        let mut interner = Interner::new();
        let text = "  File \"/src/train.py\", line 40, in <module>\n    loss = model(x)\n  File \"/src/model.py\", \
                    line 12, in forward\n    return self.proj(x) + x\n";
        let frames = original_frames(&mut interner, text);
        let named: Vec<(String, String, u32)> = frames
            .iter()
            .filter_map(|&f| interner.frame_of(f).copied())
            .map(|f| (interner.resolve(f.function).to_owned(), interner.resolve(f.file).to_owned(), f.line))
            .collect();
        assert_eq!(
            named,
            [
                ("forward".to_owned(), "/src/model.py".to_owned(), 12),
                ("<module>".to_owned(), "/src/train.py".to_owned(), 40)
            ]
        );
        let frames = original_frames(&mut interner, "no traceback here\nsecond");
        assert_eq!(frames.len(), 1);
    }
}
