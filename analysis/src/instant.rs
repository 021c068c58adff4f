//! Everything alive at one instant: the live blocks with their categories, bytes by category,
//! by name and by stack, and the allocator's segments with the blocks inside them.
//!
//! Segments at an instant: the final segment state, with the segment events after the instant
//! undone (a segment allocated later did not exist yet; one freed later still did). Blocks are
//! the live set at the instant placed by address; the gaps between them are free.

use std::collections::BTreeMap;

use vramscope_trace_format::{
    Category, Context, DeviceId, EventKind, Frame, FrameId, SegmentPool, StackId, StringId, Trace,
};

use super::attribution::{Attribution, Attributor, Evidence};
pub use super::frames::{is_generated_code, is_program_file};
use super::peak::{self, LiveBlock};
use super::segments::Fragmentation;

/// A live block and what it is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttributedBlock {
    /// The block.
    pub block: LiveBlock,
    /// Its category and the evidence.
    pub attribution: Attribution,
    /// When it was allocated (`None`: before the trace).
    pub alloc_ns: Option<i64>,
}

/// A segment at an instant, with the live blocks inside it.
#[derive(Clone, Debug, PartialEq)]
pub struct SegmentAt {
    /// Start address.
    pub address: u64,
    /// Size.
    pub size_bytes: u64,
    /// Small or large pool, when known.
    pub pool: Option<SegmentPool>,
    /// The stream it serves.
    pub stream: u64,
    /// Its memory pool (PyTorch's `segment_pool_id`): other than (0, 0) for a private pool (a
    /// CUDA graph's, a `MemPool`), which only that pool's allocations use.
    pub pool_id: (u64, u64),
    /// Indices into [`Instant::blocks`] of the blocks inside, by address.
    pub blocks: Vec<usize>,
    /// Indices into [`Instant::awaiting`] of the blocks inside that the program freed and that
    /// wait for their streams, by address.
    pub awaiting: Vec<usize>,
    /// Its fragmentation.
    pub fragmentation: Fragmentation,
}

/// The state of a device right after one event.
#[derive(Clone, Debug, Default)]
pub struct Instant {
    /// The event (`None`: before the first).
    pub event: Option<usize>,
    /// When.
    pub time_ns: i64,
    /// Live blocks (allocated: not freed by the program), largest first.
    pub blocks: Vec<AttributedBlock>,
    /// Blocks the program freed that still wait for their streams (active, not allocated),
    /// largest first.
    pub awaiting: Vec<LiveBlock>,
    /// Bytes by category.
    pub by_category: BTreeMap<Category, u64>,
    /// Bytes by tag name (blocks without a tag are not counted).
    pub by_name: Vec<(StringId, u64)>,
    /// Bytes and blocks by the user metadata of their allocation (`_set_memory_metadata`,
    /// `_annotate_tensor`), largest first; blocks without any are not counted.
    pub by_metadata: Vec<(StringId, u64, usize)>,
    /// Segments, by address (empty when the trace has no segment information).
    pub segments: Vec<SegmentAt>,
    /// Totals over the segments.
    pub total: Fragmentation,
}

/// Works out the state of `device` right after event `event` (before the first when `None`), at
/// `time_ns` (sources without events, like the memory timeline, have only the time).
pub fn instant(trace: &Trace, device: DeviceId, event: Option<usize>, time_ns: i64) -> Instant {
    let events = super::replay::device_events(trace, device);
    let initial = super::replay::initial_state(trace, device, &events);
    let (mut live, mut awaiting) = (Vec::new(), Vec::new());
    peak::live_and_awaiting_at_each_from(trace, &events, &initial, &[event], |_, blocks, waiting| {
        live = blocks;
        awaiting = waiting;
    });
    let mut attributor = Attributor::new(trace, device);
    let mut blocks: Vec<AttributedBlock> = live
        .into_iter()
        .map(|block| {
            let alloc_ns = block.alloc_event.and_then(|i| trace.events.get(i)).map(|e| e.time_ns);
            let attribution = attributor.block(block.address, alloc_ns.unwrap_or(i64::MIN), time_ns, block.stack);
            AttributedBlock { block, attribution, alloc_ns }
        })
        .collect();
    // Sources that report categories as counters (the memory timeline) have no blocks to attribute.
    let mut by_category: BTreeMap<Category, u64> = BTreeMap::new();
    if trace
        .counters
        .iter()
        .any(|c| c.device == device && matches!(c.kind, vramscope_trace_format::CounterKind::Category(_)))
    {
        let plain: Vec<LiveBlock> = blocks.iter().map(|b| b.block).collect();
        by_category = peak::categories_at(trace, device, time_ns, &plain);
    } else {
        for b in &blocks {
            *by_category.entry(b.attribution.category).or_insert(0) += b.block.size_bytes;
        }
    }
    let mut names: BTreeMap<StringId, u64> = BTreeMap::new();
    for b in &blocks {
        if let Evidence::Tag(name) = b.attribution.evidence {
            *names.entry(name).or_insert(0) += b.block.size_bytes;
        }
    }
    let mut by_name: Vec<(StringId, u64)> = names.into_iter().collect();
    by_name.sort_by_key(|b| std::cmp::Reverse(b.1));
    let mut metadata: BTreeMap<StringId, (u64, usize)> = BTreeMap::new();
    for b in &blocks {
        let text = block_context(trace, &b.block).user_metadata;
        if text != StringId(0) {
            let entry = metadata.entry(text).or_insert((0, 0));
            entry.0 += b.block.size_bytes;
            entry.1 += 1;
        }
    }
    let mut by_metadata: Vec<(StringId, u64, usize)> = metadata.into_iter().map(|(k, (b, n))| (k, b, n)).collect();
    by_metadata.sort_by_key(|b| std::cmp::Reverse(b.1));
    blocks.sort_by(|a, b| b.block.size_bytes.cmp(&a.block.size_bytes).then(a.block.address.cmp(&b.block.address)));
    let segments = segments_at(trace, device, event, &blocks, &awaiting);
    let mut total = Fragmentation::default();
    for s in &segments {
        total.add(&s.fragmentation);
    }
    Instant { event, time_ns, blocks, awaiting, by_category, by_name, by_metadata, segments, total }
}

/// What PyTorch attached to a block's allocation: its `torch.compile` context and user metadata
/// (empty for blocks allocated before the trace, or without any).
pub fn block_context(trace: &Trace, block: &LiveBlock) -> Context {
    block
        .alloc_event
        .and_then(|i| trace.events.get(i))
        .map(|e| trace.interner.context_of(e.context))
        .unwrap_or_default()
}

fn is_segment_event(kind: EventKind) -> bool {
    matches!(kind, EventKind::SegmentAlloc | EventKind::SegmentMap | EventKind::SegmentFree | EventKind::SegmentUnmap)
}

/// What is known of a segment before its blocks are placed.
struct Shape {
    size_bytes: u64,
    pool: Option<SegmentPool>,
    stream: u64,
    pool_id: (u64, u64),
}

impl Shape {
    /// A segment as an event tells it (no pool known).
    fn of_event(e: &vramscope_trace_format::Event) -> Self {
        Self { size_bytes: e.size_bytes, pool: None, stream: e.stream.raw(), pool_id: (0, 0) }
    }
}

fn segments_at(
    trace: &Trace,
    device: DeviceId,
    event: Option<usize>,
    blocks: &[AttributedBlock],
    awaiting: &[LiveBlock],
) -> Vec<SegmentAt> {
    let mut segments: BTreeMap<u64, Shape> = BTreeMap::new();
    if !trace.segments.is_empty() {
        // A snapshot: its final state, with the segment events after the instant undone.
        segments = trace
            .segments
            .iter()
            .filter(|s| s.device == device)
            .map(|s| {
                (
                    s.address,
                    Shape { size_bytes: s.size_bytes, pool: Some(s.pool), stream: s.stream, pool_id: s.pool_id },
                )
            })
            .collect();
        let after = event.map_or(0, |i| i + 1);
        for e in trace.events.get(after..).unwrap_or_default().iter().rev().filter(|e| e.device == device) {
            match e.kind {
                EventKind::SegmentAlloc | EventKind::SegmentMap => {
                    segments.remove(&e.address);
                }
                EventKind::SegmentFree | EventKind::SegmentUnmap => {
                    segments.insert(e.address, Shape::of_event(e));
                }
                _ => {}
            }
        }
    } else if trace.events.iter().any(|e| e.device == device && is_segment_event(e.kind)) {
        // A recording: no final state, but every segment event from the start.
        let upto = event.map_or(0, |i| i + 1);
        for e in trace.events.get(..upto).unwrap_or_default().iter().filter(|e| e.device == device) {
            match e.kind {
                EventKind::SegmentAlloc | EventKind::SegmentMap => {
                    segments.insert(e.address, Shape::of_event(e));
                }
                EventKind::SegmentFree | EventKind::SegmentUnmap => {
                    segments.remove(&e.address);
                }
                _ => {}
            }
        }
    } else {
        return Vec::new();
    }
    let mut by_address: Vec<usize> = (0..blocks.len()).collect();
    by_address.sort_by_key(|&i| blocks.get(i).map_or(0, |b| b.block.address));
    let mut awaiting_by_address: Vec<usize> = (0..awaiting.len()).collect();
    awaiting_by_address.sort_by_key(|&i| awaiting.get(i).map_or(0, |b| b.address));
    // The indices (into `list`, sorted by `address_of`) of what lies in `address..end`.
    fn inside<T>(order: &[usize], list: &[T], address_of: impl Fn(&T) -> u64, address: u64, end: u64) -> Vec<usize> {
        let first = order.partition_point(|&i| list.get(i).is_some_and(|b| address_of(b) < address));
        order
            .get(first..)
            .unwrap_or_default()
            .iter()
            .copied()
            .take_while(|&i| list.get(i).is_some_and(|b| address_of(b) < end))
            .collect()
    }
    let mut out = Vec::with_capacity(segments.len());
    for (address, Shape { size_bytes, pool, stream, pool_id }) in segments {
        let end = address.saturating_add(size_bytes);
        let allocated = inside(&by_address, blocks, |b| b.block.address, address, end);
        let waiting = inside(&awaiting_by_address, awaiting, |b| b.address, address, end);
        let mut f = Fragmentation { reserved_bytes: size_bytes, ..Fragmentation::default() };
        for b in allocated.iter().filter_map(|&i| blocks.get(i)) {
            f.allocated_bytes += b.block.size_bytes;
            f.requested_bytes += b.block.requested_bytes;
            f.free_internal_bytes += b.block.size_bytes.saturating_sub(b.block.requested_bytes);
        }
        f.awaiting_free_bytes = waiting.iter().filter_map(|&i| awaiting.get(i)).map(|b| b.size_bytes).sum();
        // Free ranges lie between what is taken: allocated blocks and blocks awaiting their streams.
        let mut taken: Vec<(u64, u64)> = allocated
            .iter()
            .filter_map(|&i| blocks.get(i))
            .map(|b| (b.block.address, b.block.size_bytes))
            .chain(waiting.iter().filter_map(|&i| awaiting.get(i)).map(|b| (b.address, b.size_bytes)))
            .collect();
        taken.sort_unstable();
        let mut cursor = address;
        for (at, size) in taken {
            f.largest_free_bytes = f.largest_free_bytes.max(at.saturating_sub(cursor));
            cursor = cursor.max(at.saturating_add(size));
        }
        f.largest_free_bytes = f.largest_free_bytes.max(end.saturating_sub(cursor));
        f.free_external_bytes = size_bytes.saturating_sub(f.allocated_bytes).saturating_sub(f.awaiting_free_bytes);
        out.push(SegmentAt {
            address,
            size_bytes,
            pool,
            stream,
            pool_id,
            blocks: allocated,
            awaiting: waiting,
            fragmentation: f,
        });
    }
    out
}

/// A node of the allocation-stack tree: bytes live under a frame, outermost frame first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StackNode {
    /// The frame's label (`function  file:line`); empty at the root.
    pub label: String,
    /// Bytes live under it.
    pub bytes: u64,
    /// Blocks live under it.
    pub blocks: usize,
    /// Callees, largest first.
    pub children: Vec<StackNode>,
}

/// Builds the top-down tree of live bytes by allocating stack, with frames that `keep` rejects
/// left out (and stacks with no frame left grouped under "(no stack recorded)").
pub fn stack_tree(trace: &Trace, blocks: &[AttributedBlock], keep: &dyn Fn(&str, &str) -> bool) -> StackNode {
    let mut root = StackNode::default();
    let mut by_stack: BTreeMap<StackId, (u64, usize)> = BTreeMap::new();
    for b in blocks {
        let entry = by_stack.entry(b.block.stack).or_insert((0, 0));
        entry.0 += b.block.size_bytes;
        entry.1 += 1;
    }
    let interner = &trace.interner;
    for (stack, (bytes, count)) in by_stack {
        let mut labels: Vec<String> = interner
            .frames_of(stack)
            .iter()
            .rev()
            .filter_map(|&f| interner.frame_of(f))
            .filter(|f| keep(interner.resolve(f.file), interner.resolve(f.function)))
            .map(|f| frame_label(interner.resolve(f.function), interner.resolve(f.file), f.line))
            .collect();
        if labels.is_empty() {
            labels.push("(no stack recorded)".to_owned());
        }
        root.bytes += bytes;
        root.blocks += count;
        let mut node = &mut root;
        for label in labels {
            let index = match node.children.iter().position(|c| c.label == label) {
                Some(i) => i,
                None => {
                    node.children.push(StackNode { label, ..StackNode::default() });
                    node.children.len() - 1
                }
            };
            let Some(child) = node.children.get_mut(index) else { break };
            child.bytes += bytes;
            child.blocks += count;
            node = child;
        }
    }
    sort_tree(&mut root);
    root
}

fn sort_tree(node: &mut StackNode) {
    node.children.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.label.cmp(&b.label)));
    node.children.iter_mut().for_each(sort_tree);
}

/// The frame of a stack that names where it allocated: its innermost Python frame if it has one
/// (what the user wrote or called; code `torch.compile` generated only when nothing else is
/// Python), else the first frame past the allocation plumbing (which operator it was), else its
/// innermost frame worth showing (all frames count when `hide_noise` is off).
pub fn site_frame(trace: &Trace, stack: StackId, hide_noise: bool) -> Option<FrameId> {
    let interner = &trace.interner;
    let frames: Vec<(FrameId, &Frame)> =
        interner.frames_of(stack).iter().filter_map(|&f| Some((f, interner.frame_of(f)?))).collect();
    let noise = |f: &Frame| is_noise_frame(interner.resolve(f.file), interner.resolve(f.function));
    let python_frame = |(_, f): &&(FrameId, &Frame)| interner.resolve(f.file).ends_with(".py") && !noise(f);
    let python = frames
        .iter()
        .filter(python_frame)
        .find(|(_, f)| !is_generated_code(interner.resolve(f.file)))
        .or_else(|| frames.iter().find(python_frame));
    let worth = |(_, f): &&(FrameId, &Frame)| !hide_noise || !noise(f);
    let operator = || frames.iter().filter(worth).find(|(_, f)| !is_plumbing_frame(interner.resolve(f.function)));
    python.or_else(operator).or_else(|| frames.iter().find(worth)).map(|&(id, _)| id)
}

/// The program's own frame of a stack: its innermost frame in the program's files
/// ([`is_program_file`]), with its index among the stack's frames (innermost first).
pub fn program_frame(trace: &Trace, stack: StackId) -> Option<(usize, FrameId)> {
    let interner = &trace.interner;
    interner.frames_of(stack).iter().enumerate().find_map(|(i, &f)| {
        let frame = interner.frame_of(f)?;
        is_program_file(interner.resolve(frame.file)).then_some((i, f))
    })
}

/// The library call under a stack's program frame ([`program_frame`]): the innermost Python
/// frame inside it, where in the library the memory was asked for (what sites were named by
/// before; the call the program made is often the same, `einsum`, `Linear.forward`). A native
/// frame is not one: which ATen
/// kernel ran says less than the program's own line, and changes with dtypes and devices; nor is
/// code `torch.compile` generated.
fn library_call(trace: &Trace, stack: StackId, program: usize, hide_noise: bool) -> Option<FrameId> {
    let interner = &trace.interner;
    let inner: Vec<(FrameId, &Frame)> = interner
        .frames_of(stack)
        .iter()
        .take(program)
        .filter_map(|&f| Some((f, interner.frame_of(f)?)))
        .filter(|(_, f)| !hide_noise || !is_noise_frame(interner.resolve(f.file), interner.resolve(f.function)))
        .collect();
    // Code `torch.compile` wrote is no call the program made either.
    inner
        .iter()
        .find(|(_, f)| {
            let file = interner.resolve(f.file);
            file.ends_with(".py") && !is_generated_code(file)
        })
        .map(|&(id, _)| id)
}

/// Where a stack allocated, the name sites are grouped and compared by: the program's own line
/// first, with the library call it made beside it (`forward  llm/attention.py:41 via forward
/// nn/modules/linear.py:125`), else, for a stack that never leaves the library, its
/// `site_frame` (each as `frame_label` says a frame).
pub fn allocation_site(trace: &Trace, stack: StackId, hide_noise: bool) -> String {
    let interner = &trace.interner;
    let label = |id: FrameId| {
        interner.frame_of(id).map(|f| frame_label(interner.resolve(f.function), interner.resolve(f.file), f.line))
    };
    if let Some((index, program)) = program_frame(trace, stack) {
        let own = label(program).unwrap_or_default();
        return match library_call(trace, stack, index, hide_noise).and_then(label) {
            Some(library) => format!("{own} via {library}"),
            None => own,
        };
    }
    site_frame(trace, stack, hide_noise).and_then(label).unwrap_or_else(|| "(no stack recorded)".to_owned())
}

/// A stack as a person reads it, innermost first, one line each: with `hide_noise`, the program's
/// own frame first, with the library call it made (as [`allocation_site`] names it), then its
/// callers, the allocator's, the interpreter's and the library's frames inside it folded away;
/// a stack that never reaches the program keeps its frames but the noise. Without
/// `hide_noise`, every frame.
pub fn stack_lines(trace: &Trace, stack: StackId, hide_noise: bool) -> Vec<String> {
    let interner = &trace.interner;
    let frames = interner.frames_of(stack);
    let text = |f: &Frame| frame_text(interner.resolve(f.function), interner.resolve(f.file), f.line);
    let shown = |f: &&Frame| !hide_noise || !is_noise_frame(interner.resolve(f.file), interner.resolve(f.function));
    let program = if hide_noise { program_frame(trace, stack) } else { None };
    let Some((index, own)) = program else {
        return frames.iter().filter_map(|&f| interner.frame_of(f)).filter(shown).map(text).collect();
    };
    let mut lines = Vec::with_capacity(frames.len().saturating_sub(index));
    let own_text = interner.frame_of(own).map(text).unwrap_or_default();
    lines.push(match library_call(trace, stack, index, hide_noise).and_then(|id| interner.frame_of(id)) {
        Some(library) => format!("{own_text} via {}", text(library)),
        None => own_text,
    });
    lines.extend(frames.iter().skip(index + 1).filter_map(|&f| interner.frame_of(f)).filter(shown).map(text));
    lines
}

/// Live bytes and blocks of one allocation site.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct SiteBytes {
    /// The site: `function  file:line`.
    pub site: String,
    /// Bytes live there.
    pub bytes: u64,
    /// Blocks live there.
    pub blocks: usize,
}

/// Live bytes and blocks by allocation site, largest first.
pub fn by_site(trace: &Trace, blocks: &[AttributedBlock]) -> Vec<SiteBytes> {
    let mut by_stack: BTreeMap<StackId, (u64, usize)> = BTreeMap::new();
    for b in blocks {
        let entry = by_stack.entry(b.block.stack).or_insert((0, 0));
        entry.0 += b.block.size_bytes;
        entry.1 += 1;
    }
    let mut sites: BTreeMap<String, (u64, usize)> = BTreeMap::new();
    for (stack, (bytes, count)) in by_stack {
        let entry = sites.entry(allocation_site(trace, stack, true)).or_insert((0, 0));
        entry.0 += bytes;
        entry.1 += count;
    }
    let mut out: Vec<SiteBytes> =
        sites.into_iter().map(|(site, (bytes, blocks))| SiteBytes { site, bytes, blocks }).collect();
    out.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.site.cmp(&b.site)));
    out
}

/// A C++ function's name without its return type, argument list and template arguments:
/// `void at::meta::check<T>(at::Tensor const&)` -> `at::meta::check`.
pub fn short_native_name(function: &str) -> std::borrow::Cow<'_, str> {
    // `(anonymous namespace)::` would read as an argument list.
    if function.contains("(anonymous namespace)::") {
        let plain = function.replace("(anonymous namespace)::", "");
        return std::borrow::Cow::Owned(short_native_name(&plain).into_owned());
    }
    std::borrow::Cow::Borrowed(short_name(function))
}

fn short_name(function: &str) -> &str {
    let mut depth = 0i32;
    let mut start = 0;
    let mut end = function.len();
    for (i, c) in function.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            ' ' if depth == 0 => start = i + 1,
            '(' if depth == 0 && i > start => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    let name = function.get(start..end).unwrap_or(function);
    // Template arguments at the end: cut at the `<` that opens them.
    let mut depth = 0i32;
    for (i, c) in name.char_indices().rev() {
        match c {
            '>' => depth += 1,
            '<' => {
                depth -= 1;
                if depth == 0 {
                    return name.get(..i).filter(|n| !n.is_empty()).unwrap_or(name);
                }
            }
            _ if depth == 0 => break,
            _ => {}
        }
    }
    if name.is_empty() { function } else { name }
}

/// A frame in full, as a stack lists it: `function  path/to/file.py:12`, the function alone when
/// the file is not known (see [`frame_label`] for the short form sites are named by).
pub fn frame_text(function: &str, file: &str, line: u32) -> String {
    if file.is_empty() || file == "??" { function.to_owned() } else { format!("{function}  {file}:{line}") }
}

/// `function  file:line`, with the file shortened to its last three components and C++ names
/// to their qualified name.
pub fn frame_label(function: &str, file: &str, line: u32) -> String {
    let function = if file.ends_with(".py") || file.starts_with('<') {
        std::borrow::Cow::Borrowed(function)
    } else {
        short_native_name(function)
    };
    if file.is_empty() || file == "??" {
        return function.into_owned();
    }
    let parts: Vec<&str> = file.split(['/', '\\']).collect();
    let short = parts.get(parts.len().saturating_sub(3)..).unwrap_or_default().join("/");
    if line > 0 { format!("{function}  {short}:{line}") } else { format!("{function}  {short}") }
}

/// Native frames that only pass an allocation along: ATen's `empty*` factories, output
/// allocation, the dispatcher's wrappers.
pub fn is_plumbing_frame(function: &str) -> bool {
    const PLUMBING: [&str; 9] = [
        "at::detail::",
        "at::empty",
        "at::native::empty",
        "_ops::empty",
        "create_out",
        "set_output",
        "wrap_kernel_functor",
        "TensorIterator",
        "c10::impl::",
    ];
    PLUMBING.iter().any(|p| function.contains(p)) || function.starts_with("c10::")
}

/// Frames that say nothing about the program: the Python interpreter's and libc's own C
/// functions, the unwinder and the caching allocator that recorded the stack, and
/// `torch.nn.Module`'s call plumbing.
pub fn is_noise_frame(file: &str, function: &str) -> bool {
    let native =
        file.is_empty() || file == "??" || file.ends_with(".c") || file.ends_with(".cpp") || file.ends_with(".h");
    if native && !function.contains("::") && !function.contains('(') {
        // A C function in a native frame: CPython or libc.
        return true;
    }
    const RECORDER: [&str; 5] =
        ["torch::unwind", "CapturedTraceback", "gather_with_cpp", "CUDACachingAllocator", "memory_snapshot"];
    if RECORDER.iter().any(|r| function.contains(r) || file.contains(r)) {
        return true;
    }
    let python_plumbing =
        file.ends_with("torch/nn/modules/module.py") || file.ends_with("torch\\nn\\modules\\module.py");
    python_plumbing && matches!(function, "_call_impl" | "_wrapped_call_impl")
}

#[cfg(test)]
mod tests;
