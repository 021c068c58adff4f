//! The model's repeated blocks found in the stacks, for traces without module spans (a PyTorch
//! snapshot, a profiler trace): a transformer's forward calls its blocks in a loop, from one line
//! (`for layer in self.layers: x = layer(x)`), so every allocation a block makes has that line
//! in its stack, with a module call (`torch/nn/modules/module.py`'s `_call_impl`) below it and
//! the block's own `forward` below that. A block's forward runs its lines in order: where the
//! line it is at goes back to an earlier one, the next block has begun.
//!
//! Each allocation made inside the loop gets its block, `block.K` (K counted from 0 in each pass
//! through the loop), the way `blocks.K` names a block by its module span.

use rustc_hash::FxHashMap as HashMap;
use vramscope_trace_format::{DeviceId, EventKind, FrameId, StackId, Trace};

use crate::replay;

/// The repeated blocks of a trace by its stacks.
#[derive(Clone, Debug, Default)]
pub struct StackBlocks {
    /// Allocation event index -> (pass through the loop, block in it).
    by_event: HashMap<usize, (u32, u32)>,
    /// When each pass through the loop made its last allocation.
    pass_ends: Vec<i64>,
}

/// A module call in a stack: the frame that made it and the callee's frame (its `forward`).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Call {
    caller: FrameId,
    callee_function: vramscope_trace_format::StringId,
    callee_file: vramscope_trace_format::StringId,
}

/// Whether a frame is PyTorch's module call machinery (`Module._call_impl`, and the `inner` it
/// calls the module's `forward` from when hooks are registered: accelerate's, FSDP's, a
/// profiler's).
fn is_module_call(trace: &Trace, frame: FrameId) -> bool {
    let interner = &trace.interner;
    interner.frame_of(frame).is_some_and(|f| {
        let function = interner.resolve(f.function);
        let file = interner.resolve(f.file).replace('\\', "/");
        matches!(function, "_call_impl" | "_wrapped_call_impl" | "inner")
            && file.ends_with("torch/nn/modules/module.py")
    })
}

/// The module calls of a stack, outermost first, each with the line its callee is at.
fn calls(trace: &Trace, stack: StackId) -> Vec<(Call, u32)> {
    let interner = &trace.interner;
    // Python's frames only: a stack with C++ frames has the interpreter's between them.
    let frames: Vec<FrameId> = interner
        .frames_of(stack)
        .iter()
        .copied()
        .filter(|&f| interner.frame_of(f).is_some_and(|f| interner.resolve(f.file).ends_with(".py")))
        .collect();
    let mut out = Vec::new();
    // Innermost first: a module call's callee is the frame before its machinery, its caller
    // the frame after.
    let mut i = 0;
    while i < frames.len() {
        if !is_module_call(trace, frames[i]) {
            i += 1;
            continue;
        }
        let callee = i.checked_sub(1).and_then(|j| interner.frame_of(frames[j]));
        let mut k = i;
        while k < frames.len() && is_module_call(trace, frames[k]) {
            k += 1;
        }
        if let (Some(callee), Some(&caller)) = (callee, frames.get(k)) {
            let call = Call { caller, callee_function: callee.function, callee_file: callee.file };
            out.push((call, callee.line));
        }
        i = k;
    }
    out.reverse();
    out
}

/// Where counting is under one call site.
#[derive(Default)]
struct Site {
    /// The line the callee was at in the last allocation, when the last allocation was under
    /// this site.
    last_line: Option<u32>,
    pass: u32,
    block: u32,
    /// Whether an allocation was under this site yet.
    started: bool,
    /// The most blocks in a pass.
    most: u32,
}

impl Site {
    /// An allocation under this site with its callee at `line`: its (pass, block).
    fn under(&mut self, line: u32) -> (u32, u32) {
        match self.last_line {
            // The code around the loop ran in between: a new pass.
            None if self.started => {
                self.pass += 1;
                self.block = 0;
            }
            None => self.started = true,
            // The block's forward went back to an earlier line: the next block.
            Some(last) if line < last => self.block += 1,
            Some(_) => {}
        }
        self.last_line = Some(line);
        self.most = self.most.max(self.block + 1);
        (self.pass, self.block)
    }
}

/// Traces with more allocations than this on the device are not searched (the rules that need
/// blocks go without them).
const MAX_ALLOCATIONS: usize = 2_000_000;

impl StackBlocks {
    /// The repeated blocks of `device`'s forward by its allocations' stacks, when some call
    /// site ran two blocks or more in a pass; `None` otherwise (or when the trace has module
    /// spans, which say the blocks better).
    pub fn of(trace: &Trace, device: DeviceId) -> Option<Self> {
        if trace.annotations.iter().any(|a| a.kind == vramscope_trace_format::AnnotationKind::Module) {
            return None;
        }
        let events = replay::device_events(trace, device);
        let allocations: Vec<usize> = events
            .iter()
            .map(|i| i as usize)
            .filter(|&i| trace.events.get(i).is_some_and(|e| e.kind == EventKind::Alloc))
            .collect();
        if allocations.len() > MAX_ALLOCATIONS {
            return None;
        }
        let mut cache: HashMap<StackId, Vec<(Call, u32)>> = HashMap::default();
        let mut chains: Vec<StackId> = Vec::with_capacity(allocations.len());
        for &i in &allocations {
            let stack = trace.events[i].stack;
            cache.entry(stack).or_insert_with(|| calls(trace, stack));
            chains.push(stack);
        }
        // Every site counted; then the one that ran the most blocks in a pass (two or more).
        let mut sites: HashMap<Call, Site> = HashMap::default();
        let empty = Vec::new();
        let mut previous = &empty;
        for stack in &chains {
            let chain = &cache[stack];
            // Only the sites the last allocation was under have a place to lose.
            for (call, _) in previous {
                if !chain.iter().any(|(c, _)| c == call)
                    && let Some(site) = sites.get_mut(call)
                {
                    site.last_line = None;
                }
            }
            for &(call, line) in chain {
                sites.entry(call).or_default().under(line);
            }
            previous = chain;
        }
        let (best, most) =
            sites.iter().map(|(call, site)| (*call, site.most)).filter(|s| s.1 >= 2).max_by_key(|s| s.1)?;
        let mut site = Site::default();
        let mut by_event = HashMap::default();
        let mut pass_ends: Vec<i64> = Vec::new();
        for (&i, stack) in allocations.iter().zip(&chains) {
            match cache[stack].iter().find(|(c, _)| *c == best) {
                Some(&(_, line)) => {
                    let (pass, block) = site.under(line);
                    by_event.insert(i, (pass, block));
                    pass_ends.resize(pass as usize + 1, i64::MIN);
                    pass_ends[pass as usize] = trace.events[i].time_ns;
                }
                None => site.last_line = None,
            }
        }
        debug_assert!(most >= 2);
        Some(Self { by_event, pass_ends })
    }

    /// Whether a block allocated in `pass` and freed at `freed_ns` outlived the pass through the
    /// blocks: saved for backward, not a temporary of the forward.
    pub fn outlives_pass(&self, pass: u32, freed_ns: i64) -> bool {
        self.pass_ends.get(pass as usize).is_some_and(|&end| freed_ns > end)
    }

    /// The block an allocation was made in (`block.3`), with the pass through the loop.
    pub fn block_of(&self, event: usize) -> Option<(u32, String)> {
        self.by_event.get(&event).map(|&(pass, block)| (pass, format!("block.{block}")))
    }
}
