//! Remedies applied to the recorded event stream, then replayed: the projected peak, its time
//! and so its phase come out of the same replay that measures the baseline, where a rule that
//! scales the memory of a few instants cannot follow what a remedy does over time.
//!
//! Activation checkpointing (`torch.utils.checkpoint`, `use_reentrant=False`, of each repeated
//! block): in forward, a checkpointed block keeps only what it hands on (its output, the input
//! of the next block); what it would have saved for backward is freed as soon as it is used, so
//! it is not held at all. In backward, the block's forward runs again just before its own
//! backward needs those activations: they are allocated again then, all at once, and freed
//! when the recorded run freed them (in that block's backward). So at most one block's
//! activations are live again at a time, at the point backward reaches it.

use rustc_hash::FxHashMap as HashMap;
use vramscope_trace_format::{AnnotationKind, Category, DeviceId, EventKind, Trace};

use super::parts::repeated_block;
use crate::attribution::{Attribution, Attributor, Evidence};
use crate::replay;

/// The peak of allocated bytes of a replayed stream, and when it was reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimulatedPeak {
    /// Bytes.
    pub bytes: u64,
    /// Time of the peak.
    pub time_ns: i64,
}

/// An allocation (or a free) in the stream: when, and by how much allocated bytes change.
#[derive(Clone, Copy, Debug)]
struct Change {
    time_ns: i64,
    /// Where it was in the trace (ties keep the trace's order).
    order: usize,
    delta: i64,
}

/// The allocations and frees of `device`, as changes of the allocated bytes; the bytes alive
/// from before the trace; and for each allocation its change, its free's, and the block.
struct Stream {
    start: u64,
    changes: Vec<Change>,
    /// (alloc change index, free change index (if freed), event index).
    blocks: Vec<(usize, Option<usize>, usize)>,
}

fn stream(trace: &Trace, device: DeviceId) -> Stream {
    let events = replay::device_events(trace, device);
    let initial = replay::initial_state(trace, device, &events);
    let mut before: HashMap<u64, u64> = initial.blocks.iter().map(|b| (b.address, b.size_bytes)).collect();
    let mut live: HashMap<u64, usize> = HashMap::default();
    let mut out = Stream { start: initial.allocated_bytes(), changes: Vec::new(), blocks: Vec::new() };
    for (order, &i) in events.iter().enumerate() {
        let Some(e) = trace.events.get(i) else { continue };
        match e.kind {
            EventKind::Alloc => {
                out.changes.push(Change { time_ns: e.time_ns, order, delta: e.size_bytes as i64 });
                live.insert(e.address, out.blocks.len());
                out.blocks.push((out.changes.len() - 1, None, i));
            }
            EventKind::FreeCompleted => {
                if let Some(block) = live.remove(&e.address) {
                    let size = out.changes[out.blocks[block].0].delta;
                    out.changes.push(Change { time_ns: e.time_ns, order, delta: -size });
                    out.blocks[block].1 = Some(out.changes.len() - 1);
                } else if let Some(size) = before.remove(&e.address) {
                    out.changes.push(Change { time_ns: e.time_ns, order, delta: -(size as i64) });
                }
            }
            _ => {}
        }
    }
    out
}

/// The highest allocated bytes of `changes` from `start`.
fn peak(start: u64, changes: &mut [Change]) -> SimulatedPeak {
    changes.sort_by_key(|c| (c.time_ns, c.order));
    let mut bytes = start as i64;
    let mut best = SimulatedPeak { bytes: start, time_ns: changes.first().map_or(0, |c| c.time_ns) };
    for c in changes.iter() {
        bytes += c.delta;
        if bytes > best.bytes as i64 {
            best = SimulatedPeak { bytes: bytes as u64, time_ns: c.time_ns };
        }
    }
    best
}

/// The baseline's peak by the same replay (it equals the trace's allocated peak).
pub fn baseline(trace: &Trace, device: DeviceId) -> SimulatedPeak {
    let mut s = stream(trace, device);
    peak(s.start, &mut s.changes)
}

/// The peak with each repeated block checkpointed, or `None` when the trace does not show the
/// blocks' activations (no module spans, or fewer than two repeated blocks).
pub fn checkpointing(trace: &Trace, device: DeviceId) -> Option<SimulatedPeak> {
    let mut s = stream(trace, device);
    let mut forwards: Vec<i64> =
        trace.annotations.iter().filter(|a| a.kind == AnnotationKind::Forward).map(|a| a.start_ns).collect();
    forwards.sort_unstable();
    let mut attributor = Attributor::new(trace, device);
    // The activations of each block in each forward: (forward, block) -> its blocks.
    let mut groups: HashMap<(usize, String), Vec<usize>> = HashMap::default();
    for (b, &(alloc, free, i)) in s.blocks.iter().enumerate() {
        let Some(e) = trace.events.get(i) else { continue };
        if free.is_none() {
            continue;
        }
        let Attribution { category, evidence } = attributor.block(e.address, e.time_ns, i64::MAX, e.stack);
        let Evidence::Phase { module: Some(module), .. } = evidence else { continue };
        if category != Category::Activation {
            continue;
        }
        let Some(block) = repeated_block(trace.interner.resolve(module)) else { continue };
        let forward = forwards.partition_point(|&f| f <= s.changes[alloc].time_ns);
        groups.entry((forward, block.to_owned())).or_default().push(b);
    }
    let distinct: std::collections::BTreeSet<&str> = groups.keys().map(|(_, b)| b.as_str()).collect();
    if distinct.len() < 2 {
        return None;
    }
    for members in groups.values() {
        // The block's output (its last activation allocated) is what it hands on: kept.
        let Some(&output) = members.iter().max_by_key(|&&b| (s.changes[s.blocks[b].0].time_ns, s.blocks[b].0)) else {
            continue;
        };
        let recompute =
            members.iter().filter(|&&b| b != output).filter_map(|&b| s.blocks[b].1.map(|f| s.changes[f].time_ns)).min();
        let Some(recompute) = recompute else { continue };
        for &b in members.iter().filter(|&&b| b != output) {
            // Allocated again just before the first of them is freed in backward (its
            // recomputation), instead of in forward.
            let alloc = s.blocks[b].0;
            s.changes[alloc].time_ns = recompute;
            s.changes[alloc].order = 0;
        }
    }
    Some(peak(s.start, &mut s.changes))
}

#[cfg(test)]
mod tests {
    use vramscope_trace_format::{Annotation, Event, ProcessId, StackId};

    use super::*;

    fn span(trace: &mut Trace, kind: AnnotationKind, name: &str, start_ns: i64, end_ns: i64) {
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

    /// Two blocks, each saving 10 + 10 bytes and handing on 5, then a backward that frees
    /// block 1's, then block 0's. Without checkpointing: 50 live when backward starts. With it:
    /// the outputs (5 + 5), then block 1's 20 again (30), freed, then block 0's (30).
    #[test]
    fn checkpointed_blocks_hold_their_outputs_and_one_block_at_a_time() {
        let mut trace = Trace::default();
        span(&mut trace, AnnotationKind::Forward, "forward", 0, 100);
        span(&mut trace, AnnotationKind::Module, "blocks.0", 0, 49);
        span(&mut trace, AnnotationKind::Module, "blocks.1", 50, 99);
        span(&mut trace, AnnotationKind::Backward, "backward", 110, 200);
        let alloc = |trace: &mut Trace, at: i64, address: u64, size: u64| {
            trace.events.push(Event::new(EventKind::Alloc, at, 0, address, size));
        };
        for (base, at) in [(0x100u64, 10i64), (0x200, 60)] {
            alloc(&mut trace, at, base, 10);
            alloc(&mut trace, at + 1, base + 0x10, 10);
            alloc(&mut trace, at + 2, base + 0x20, 5);
        }
        let mut free =
            |at: i64, address: u64| trace.events.push(Event::new(EventKind::FreeCompleted, at, 0, address, 0));
        for (at, address) in [(120, 0x200), (121, 0x210), (122, 0x220), (150, 0x100), (151, 0x110), (152, 0x120)] {
            free(at, address);
        }
        assert_eq!(baseline(&trace, DeviceId(0)).bytes, 50);
        let checkpointed = checkpointing(&trace, DeviceId(0)).expect("two blocks");
        assert_eq!(checkpointed, SimulatedPeak { bytes: 30, time_ns: 120 });
    }
}
