//! The stack-frame rules: the category a block gets from the frames that allocated it, when
//! no tag or phase says (frames in `torch/optim` -> optimizer state, the autograd engine ->
//! gradient, a Python `forward` -> activation, ...).

use vramscope_trace_format::{Category, StackId, Trace};

use super::{Attribution, Evidence};

/// A stack-frame rule: a frame whose file contains `file` (with `/` or `\`) and whose function
/// contains `function` (either may be empty) gives `category`.
struct Rule {
    file: &'static str,
    function: &'static str,
    category: Category,
    describe: &'static str,
}

/// Checked innermost frame first, each frame against every rule in order, so the frame nearest
/// to the allocation decides.
const RULES: &[Rule] = &[
    Rule {
        file: "",
        function: "AccumulateGrad",
        category: Category::Gradient,
        describe: "gradient accumulated by autograd",
    },
    Rule {
        file: "torch/optim/",
        function: "",
        category: Category::OptimizerState,
        describe: "allocated in torch/optim",
    },
    // What backward allocates and keeps is mostly gradients; its short-lived temporaries are
    // freed before the peak they would otherwise distort.
    Rule {
        file: "",
        function: "torch::autograd::Engine",
        category: Category::Gradient,
        describe: "allocated by the autograd engine in backward",
    },
    Rule {
        file: "torch/autograd/",
        function: "backward",
        category: Category::Gradient,
        describe: "allocated in backward",
    },
    Rule {
        file: "torch/nn/modules/module.py",
        function: "_apply",
        category: Category::Parameter,
        describe: "moved to the device by Module.to / .cuda",
    },
    Rule { file: "", function: "forward", category: Category::Activation, describe: "allocated in a forward" },
];

fn file_matches(file: &str, pattern: &str) -> bool {
    pattern.is_empty() || file.contains(pattern) || file.replace('\\', "/").contains(pattern)
}

/// What the rules say of `stack`: the first rule its innermost matching frame meets.
pub(super) fn classify_stack(trace: &Trace, stack: StackId) -> Attribution {
    let interner = &trace.interner;
    for &frame_id in interner.frames_of(stack) {
        let Some(frame) = interner.frame_of(frame_id) else { continue };
        let file = interner.resolve(frame.file);
        let function = interner.resolve(frame.function);
        for rule in RULES {
            if file_matches(file, rule.file) && (rule.function.is_empty() || function.contains(rule.function)) {
                // `forward` only as a Python frame: C++ names containing it are not modules.
                if rule.function == "forward" && (function != "forward" || !file.ends_with(".py")) {
                    continue;
                }
                // A module's forward in a library (torch's Linear) called from the program's
                // own forward: the evidence names the program's, the line a user can change.
                let frame = if rule.function == "forward" && !crate::frames::is_program_file(file) {
                    program_forward(trace, stack).unwrap_or(frame_id)
                } else {
                    frame_id
                };
                return Attribution {
                    category: rule.category,
                    evidence: Evidence::Frame { rule: rule.describe, frame },
                };
            }
        }
    }
    Attribution::UNKNOWN
}

/// The innermost `forward` of a stack in the program's own files, if it has one.
fn program_forward(trace: &Trace, stack: StackId) -> Option<vramscope_trace_format::FrameId> {
    let interner = &trace.interner;
    interner.frames_of(stack).iter().copied().find(|&f| {
        interner.frame_of(f).is_some_and(|frame| {
            interner.resolve(frame.function) == "forward"
                && crate::frames::is_program_file(interner.resolve(frame.file))
        })
    })
}
