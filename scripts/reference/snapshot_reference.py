#!/usr/bin/env python3
"""Independent reference numbers for vramscope's Rust tests.

Usage: python3 snapshot_reference.py FILE [--range-us FROM TO]

With --range-us (snapshots only), each device also reports the highest allocated,
requested and reserved bytes over the part of its trace from FROM to TO microseconds after
the trace's first entry (both included), counting everything alive then: what
`vramscope info --range +FROMus..+TOus` must report as its peaks.

Prints one JSON object on stdout. The input kind is detected from the file's
content, not its name:

  * PyTorch memory snapshot pickle (torch.cuda.memory._dump_snapshot), first
    byte 0x80, or a header-less protocol 0/1 pickle -> "pytorch-snapshot"
  * chrome trace JSON from the PyTorch profiler -> "chrome-trace"
  * profiler memory timeline: the coalesced export
    ([times_us, rows]) or the raw export ([t_ns, action, bytes, category]
    tuples), optionally gzip-compressed        -> "memory-timeline"

Standard library only. This file must stay independent of the Rust code: it
re-derives every number from PyTorch's own definitions (see
docs/notes/pytorch-formats.md for where each rule comes from), so that a bug in
the Rust implementation cannot be copied into the expected values.
"""

import gzip
import json
import pickle
import sys

# ---------------------------------------------------------------------------
# Snapshot pickles
# ---------------------------------------------------------------------------

# The caching allocator never hands out less than this and rounds every request
# up to a multiple of it (CUDACachingAllocator.cpp, kMinBlockSize / round_size).
# roundup_power2_divisions can change the rounding of large requests; all
# fixtures run with it disabled, and the reference deliberately keeps the
# simple rule so that the Rust side has one unambiguous target.
MIN_BLOCK = 512

# PyTorch's allocator records a free in two steps: free_requested when the program frees the
# block (CUDACachingAllocator's free(): allocated_bytes, what memory_allocated() reports, drops
# there) and free_completed when the streams that used it are done (free_block(): active_bytes
# drops there). MemoryViz.js folds an adjacent pair into a synthetic 'free' event; a trace with
# no free_requested at all (a hand-made one) frees in one step.
ONE_STEP_FREES = ("free",)


def frees_in_two_steps(trace):
    """Whether the trace records frees in two steps (any free_requested at all)."""
    return any(e["action"] == "free_requested" for e in trace)


def ends_allocation(action, two_step):
    """Whether an entry ends its block's allocation: the program's free (memory_allocated()
    drops there)."""
    if action == "free_requested" or action in ONE_STEP_FREES:
        return True
    return action == "free_completed" and not two_step


def ends_activity(action):
    """Whether an entry ends its block's activity: the free completed (active_bytes drops)."""
    return action == "free_completed" or action in ONE_STEP_FREES


def round_block(size):
    """Allocator block size for a request when nothing better is known."""
    if size < MIN_BLOCK:
        return MIN_BLOCK
    return (size + MIN_BLOCK - 1) // MIN_BLOCK * MIN_BLOCK


def block_requested(block):
    """Requested bytes of a block, following _memory_viz.py's _block_extra.

    Current snapshots carry 'frames' and 'requested_size' on each block. Older
    ones (before ~2.1) had neither and kept a 'history' list whose first
    entry's 'real_size' was the request; without history the block size is
    the best available answer.
    """
    if "frames" in block:
        return block.get("requested_size", block["size"])
    history = block.get("history")
    if history:
        return history[0]["real_size"]
    return block.get("requested_size", block["size"])


def iter_blocks(segment):
    """Yield (address, block); old snapshots have no per-block 'address'."""
    addr = segment["address"]
    for block in segment.get("blocks", ()):
        yield block.get("address", addr), block
        addr += block["size"]


def final_state(segments):
    """The segsum numbers of torch/cuda/_memory_viz.py, per device, with PyTorch's allocator's
    own definition for one kind of block.

    segsum counts a block as allocated only when its state is 'active_allocated', as the
    allocator's memory_allocated() and each segment's allocated_size do. A block freed by the
    program but still waiting on its streams ('active_pending_free') is not allocated (its
    free was requested) and counts in active_size; segsum calls it external free space, but
    nothing can use it until its streams are done, so it is kept apart here: awaiting free.
    Internal free space is the rounding slack of allocated blocks: size - requested. So
    reserved = requested + internal + awaiting + external.
    """
    reserved = allocated = requested = internal = external = awaiting = 0
    for seg in segments:
        reserved += seg["total_size"]
        for _addr, block in iter_blocks(seg):
            if block["state"] == "active_allocated":
                req = block_requested(block)
                allocated += block["size"]
                requested += req
                internal += block["size"] - req
            elif block["state"] == "active_pending_free":
                awaiting += block["size"]
            else:
                external += block["size"]
    return {
        "segments": len(segments),
        "reserved_bytes": reserved,
        "allocated_bytes": allocated,
        "awaiting_free_bytes": awaiting,
        "active_bytes": allocated + awaiting,
        "requested_bytes": requested,
        "free_internal_bytes": internal,
        "free_external_bytes": external,
        # segsum asserts this is zero; a hand-made snapshot (mosaic) violates
        # it because its blocks do not tile their segments.
        "segment_bytes_not_in_blocks": reserved - (requested + internal + awaiting + external),
    }


class Curve:
    """A step function known only as deltas until the replay has finished.

    How much memory was already in use when the trace window opened is only
    known after the whole trace has been seen (a free near the end may be the
    first sign of a block allocated before the window). So the replay tracks
    the running delta and the maximum delta, and the absolute curve is
    baseline + delta.
    """

    def __init__(self, start_time):
        self.delta = 0
        self.best = 0  # the window start is a candidate for the maximum
        self.best_time = start_time
        self.baseline = 0
        self.history = []  # (time, delta after the entry), for peaks over part of the trace

    def add(self, amount, time):
        self.delta += amount
        self.history.append((time, self.delta))
        # Strictly greater: report the first moment the peak is reached.
        if self.delta > self.best:
            self.best = self.delta
            self.best_time = time

    def peak(self):
        return self.baseline + self.best

    def peak_between(self, lo, hi):
        """The highest value from time lo to hi (both included), counting the value when lo
        begins (after the last entry before it)."""
        before = 0
        best = None
        for time, delta in self.history:
            if time < lo:
                before = delta
            elif time <= hi:
                best = delta if best is None else max(best, delta)
        best = before if best is None else max(best, before)
        return self.baseline + best

    def end(self):
        return self.baseline + self.delta


def held_blocks(segments):
    """Final blocks by address that are still held at the end of the window: allocated,
    or 'active_pending_free' (free_requested seen, free_completed not): their sizes are exact."""
    held = {}
    for seg in segments:
        for addr, block in iter_blocks(seg):
            if block["state"] in ("active_allocated", "active_pending_free"):
                held[addr] = block
    return held


def replay(trace, segments, range_us=None):
    """Peaks over the trace window, using MemoryViz.js's pre-window rule.

    Allocated memory is the allocator's memory_allocated(): a block counts from its alloc to
    the program's free (free_requested, where the trace has them); active memory (active_bytes)
    to the free's completion (free_completed). The trace is a ring buffer, so memory can be in
    use before its first entry. MemoryViz (process_alloc_data) treats as "initially
    allocated":
      1. a free whose address has no earlier alloc in the window, with the size the free event
         carries (a completion without its request: active before the window, not allocated);
      2. every 'active_allocated' block of the final segments whose address is not held by an
         alloc of the window that is still open at the end, with the block's requested_size
         (and here every 'active_pending_free' one likewise as active, not allocated).
    The same reasoning is applied to segments for the reserved curve.
    """
    two_step = frees_in_two_steps(trace)
    times = [e.get("time_us", i) for i, e in enumerate(trace)]
    start_time = times[0] if trace else None

    final_held = held_blocks(segments)

    # Pass 1: which allocs of the window still hold their block at the end. Their size can be
    # taken from the final block at that address, which is exact; otherwise only the rounded
    # request is known (the allocator may have handed out a bigger block when the remainder
    # was too small to split).
    open_alloc = {}
    last_entry = {}   # addr -> index of its last entry
    for i, e in enumerate(trace):
        action = e["action"]
        last_entry[e.get("addr")] = i
        if action == "alloc":
            open_alloc[e["addr"]] = i
        elif ends_activity(action):
            open_alloc.pop(e["addr"], None)
    open_at_end = set(open_alloc.values())

    requested = Curve(start_time)
    allocated = Curve(start_time)
    active = Curve(start_time)
    reserved = Curve(start_time)
    pre_requested = pre_allocated = pre_active = pre_reserved = 0

    allocated_after = []  # the allocated delta after each entry, for the phases' high points
    live = {}        # addr -> (requested, allocated) of blocks allocated and not freed
    awaiting = {}    # addr -> (requested, allocated) of blocks freed, waiting for their streams
    live_segs = {}   # addr -> size of segment_alloc'ed segments of the window
    net_mapped = 0   # bytes mapped minus unmapped (expandable segments)
    actions = {}

    for i, e in enumerate(trace):
        action = e["action"]
        actions[action] = actions.get(action, 0) + 1
        t = times[i]
        if action == "alloc":
            req = e["size"]
            held = final_held.get(e["addr"]) if i in open_at_end else None
            alloc_size = held["size"] if held is not None else round_block(req)
            # An alloc over an address that is already open replaces it in the
            # lookup, and the older allocation is never closed: this mirrors
            # MemoryViz's addr_to_alloc map. Real traces never do this.
            live[e["addr"]] = (req, alloc_size)
            requested.add(req, t)
            allocated.add(alloc_size, t)
            active.add(alloc_size, t)
        elif ends_allocation(action, two_step):
            entry = live.pop(e["addr"], None)
            if entry is None:
                # Rule 1: allocated before the window, alive until now (its size is the final
                # block's when it still waits for its streams at the end).
                held = final_held.get(e["addr"]) if last_entry.get(e["addr"]) == i and action == "free_requested" else None
                entry = (e["size"], held["size"] if held is not None else round_block(e["size"]))
                pre_requested += entry[0]
                pre_allocated += entry[1]
                pre_active += entry[1]
            requested.add(-entry[0], t)
            allocated.add(-entry[1], t)
            if ends_activity(action):
                active.add(-entry[1], t)
            else:
                awaiting[e["addr"]] = entry
        elif ends_activity(action):
            entry = awaiting.pop(e["addr"], None)
            if entry is None:
                # Rule 1 for a completion: freed before the window, active until now.
                entry = (e["size"], round_block(e["size"]))
                pre_active += entry[1]
            active.add(-entry[1], t)
        elif action == "segment_alloc":
            live_segs[e["addr"]] = e["size"]
            reserved.add(e["size"], t)
        elif action == "segment_free":
            size = live_segs.pop(e["addr"], None)
            if size is None:
                size = e["size"]
                pre_reserved += size
            reserved.add(-size, t)
        elif action == "segment_map":
            net_mapped += e["size"]
            reserved.add(e["size"], t)
        elif action == "segment_unmap":
            net_mapped -= e["size"]
            reserved.add(-e["size"], t)
        # oom, snapshot and unknown actions do not move the curves.
        allocated_after.append(allocated.delta)

    # Rule 2 for blocks: final blocks the window leaves unexplained were there all along.
    for seg in segments:
        for addr, block in iter_blocks(seg):
            if addr in live or addr in awaiting:
                continue
            if block["state"] == "active_allocated":
                pre_requested += block_requested(block)
                pre_allocated += block["size"]
                pre_active += block["size"]
            elif block["state"] == "active_pending_free":
                pre_active += block["size"]

    # Rule 2 for segments. Expandable segments never produce segment_alloc or
    # segment_free; they grow and shrink with segment_map/segment_unmap, and
    # the snapshot reports one segment per contiguous mapped range, so their
    # addresses cannot be matched to events. For them the mapped bytes at the
    # window start are the final total minus what the window added (the same
    # formula the newest MemoryViz uses for private-pool envelopes).
    expandable_total = 0
    for seg in segments:
        if seg.get("is_expandable"):
            expandable_total += seg["total_size"]
        elif seg["address"] not in live_segs:
            pre_reserved += seg["total_size"]
    pre_reserved += max(0, expandable_total - net_mapped)

    requested.baseline = pre_requested
    allocated.baseline = pre_allocated
    active.baseline = pre_active
    reserved.baseline = pre_reserved

    in_range = {}
    if range_us is not None and trace:
        lo, hi = start_time + range_us[0], start_time + range_us[1]
        in_range = {
            "range_peak_allocated_bytes": allocated.peak_between(lo, hi),
            "range_peak_requested_bytes": requested.peak_between(lo, hi),
            "range_peak_reserved_bytes": reserved.peak_between(lo, hi),
        }

    return {
        **in_range,
        "_allocated_after": [pre_allocated + d for d in allocated_after],
        "_allocated_before": pre_allocated,
        "peak_allocated_bytes": allocated.peak(),
        "peak_allocated_time_us": allocated.best_time,
        "peak_active_bytes": active.peak(),
        "peak_requested_bytes": requested.peak(),
        "peak_requested_time_us": requested.best_time,
        "peak_reserved_bytes": reserved.peak(),
        "trace_entries": len(trace),
        "trace_first_time_us": times[0] if trace else None,
        "trace_last_time_us": times[-1] if trace else None,
        "actions": dict(sorted(actions.items())),
        # Where the replay ends; equals the final-state numbers when the trace
        # and the segments agree.
        "replay_end_allocated_bytes": allocated.end(),
        "replay_end_active_bytes": active.end(),
        "replay_end_reserved_bytes": reserved.end(),
        "initial_allocated_bytes": pre_allocated,
        "initial_active_bytes": pre_active,
        "initial_requested_bytes": pre_requested,
        "initial_reserved_bytes": pre_reserved,
    }


# Stack-frame rules for blocks without tags, as DESIGN.md and vramscope's attribution state
# them: frames innermost first, each frame against the rules in order; the first match wins.
def _rule_category(filename, function):
    path = filename.replace("\\", "/")
    if "AccumulateGrad" in function:
        return "gradient"
    if "torch/optim/" in path:
        return "optimizer_state"
    if "torch::autograd::Engine" in function:
        return "gradient"
    if "torch/autograd/" in path and "backward" in function:
        return "gradient"
    if "torch/nn/modules/module.py" in path and "_apply" in function:
        return "parameter"
    if function == "forward" and path.endswith(".py"):
        return "activation"
    return None


def category_of(frames):
    for f in frames or []:
        c = _rule_category(f.get("filename", ""), f.get("name", ""))
        if c is not None:
            return c
    return "unknown"


def categories_at_peak(trace, segments):
    """Bytes by category of the blocks alive when allocated memory first reaches its peak."""
    return categories_at(trace, segments, None)[None]


def categories_at(trace, segments, targets):
    """Bytes by category of the blocks alive right after each entry index in `targets` (-1:
    before the first), or with `targets` None at the first instant allocated memory peaks
    (under the key None).

    The live set follows the same rules as replay(): blocks the program freed in the window
    without their alloc were alive from the start (no stack), final 'active_allocated' blocks
    without an open alloc were too (with the block's own frames), and each alloc is live until
    the program frees it (free_requested, or the one free of a trace without them).
    """
    two_step = frees_in_two_steps(trace)
    final_held = held_blocks(segments)
    open_alloc = {}   # allocs that still hold their block at the end (for exact sizes)
    seen = set()
    pre = {}
    for i, e in enumerate(trace):
        action = e["action"]
        if action == "alloc":
            open_alloc[e["addr"]] = i
            seen.add(e["addr"])
        elif ends_allocation(action, two_step):
            if e["addr"] not in seen and e["addr"] not in pre:
                pre[e["addr"]] = (round_block(e["size"]), [])
            seen.add(e["addr"])
            if ends_activity(action):
                open_alloc.pop(e["addr"], None)
        elif ends_activity(action):
            seen.add(e["addr"])
            open_alloc.pop(e["addr"], None)
    open_at_end = set(open_alloc.values())
    live = dict(pre)
    for seg in segments:
        for addr, block in iter_blocks(seg):
            if block["state"] == "active_allocated" and addr not in open_alloc and addr not in live:
                # Older snapshots keep the current allocation's frames first in `history`.
                frames = block.get("frames")
                if frames is None and block.get("history"):
                    frames = block["history"][0].get("frames")
                live[addr] = (block["size"], frames or [])
    total = sum(size for size, _ in live.values())
    best, best_live = total, dict(live)
    kept = {}
    if targets is not None and -1 in targets:
        kept[-1] = dict(live)
    for i, e in enumerate(trace):
        action = e["action"]
        if action == "alloc":
            held = final_held.get(e["addr"]) if i in open_at_end else None
            size = held["size"] if held is not None else round_block(e["size"])
            live[e["addr"]] = (size, e.get("frames") or [])
            total += size
        elif ends_allocation(action, two_step):
            entry = live.pop(e["addr"], None)
            if entry is not None:
                total -= entry[0]
        if targets is not None and i in targets:
            kept[i] = dict(live)
        if targets is None and total > best:
            best, best_live = total, dict(live)
    if targets is None:
        kept = {None: best_live}
    named = model_state_by_size(trace, segments, open_alloc)
    result = {}
    for key, alive in kept.items():
        out = {}
        for addr, (size, frames) in alive.items():
            c = category_of(frames)
            if c == "unknown" and addr in named:
                c = named[addr]
            out[c] = out.get(c, 0) + size
        result[key] = {k: v for k, v in sorted(out.items()) if v > 0}
    return result


def model_state_by_size(trace, segments, open_at_end):
    """Blocks held from before the trace to its end named by their sizes: address -> category.

    DESIGN.md's rule, from how PyTorch keeps a model: one gradient per parameter, and an
    optimizer's state as so many tensors of each parameter's size. When the gradients (by the
    stack rules) are most in requested bytes, take how many of each requested size are alive; a
    size the blocks from before the trace hold r times as often (the same r for nine tenths of
    the gradients' bytes, at least 4 blocks) is a parameter and r - 1 state tensors a gradient:
    blocks the stack rules name keep their names, and of the rest the lowest addresses are the
    parameters. Without gradients: a size held by half as many blocks as optimizer state tensors
    (Adam's two moments) names those blocks parameters.
    """
    two_step = frees_in_two_steps(trace)
    held = {}
    for seg in segments:
        for addr, block in iter_blocks(seg):
            if block["state"] == "active_allocated" and addr not in open_at_end:
                frames = block.get("frames")
                if frames is None and block.get("history"):
                    frames = block["history"][0].get("frames")
                held.setdefault(block_requested(block), []).append((addr, category_of(frames)))

    def most_alive(category):
        alive, counts, total, most, at_most = {}, {}, 0, 0, {}
        for e in trace:
            if e["action"] == "alloc" and category_of(e.get("frames")) == category:
                alive[e["addr"]] = e["size"]
                counts[e["size"]] = counts.get(e["size"], 0) + 1
                total += e["size"]
                if total > most:
                    most, at_most = total, {k: v for k, v in counts.items() if v}
            elif ends_allocation(e["action"], two_step) and e["addr"] in alive:
                size = alive.pop(e["addr"])
                counts[size] -= 1
                total -= size
        return most, at_most

    most, at_most = most_alive("gradient")
    by_ratio = {}
    for size, n in at_most.items():
        h = len(held.get(size, []))
        if n and h and h % n == 0:
            by_ratio[h // n] = by_ratio.get(h // n, 0) + size * n
    if by_ratio and most:
        ratio, explained = max(by_ratio.items(), key=lambda kv: (kv[1], -kv[0]))
        if explained * 10 >= most * 9:
            named = {}
            for size, n in at_most.items():
                blocks = held.get(size, [])
                if len(blocks) != n * ratio:
                    continue
                want_p = n - sum(1 for _, c in blocks if c == "parameter")
                want_s = n * (ratio - 1) - sum(1 for _, c in blocks if c == "optimizer_state")
                unknown = sorted(a for a, c in blocks if c == "unknown")
                if want_p < 0 or want_s < 0 or len(unknown) != want_p + want_s:
                    continue
                named.update((a, "parameter") for a in unknown[:want_p])
                named.update((a, "optimizer_state") for a in unknown[want_p:])
            if len(named) >= 4:
                return named
    most, at_most = most_alive("optimizer_state")
    matched = {}
    for size, n in at_most.items():
        unknown = [a for a, c in held.get(size, []) if c == "unknown"]
        if unknown and len(unknown) * 2 == n:
            matched.update((a, size) for a in unknown)
    if len(matched) >= 4 and most // 2 > 0 and sum(matched.values()) * 10 >= (most // 2) * 9:
        return {a: "parameter" for a in matched}
    return {}


# ---------------------------------------------------------------------------
# Phases of a training step (the rules analysis/src/phases.rs states in its documentation,
# written again here from the words, not the code): forward, backward and the optimizer step,
# told by ranges named like them or else by each allocation's frames, and the high point of
# allocated memory in each.
# ---------------------------------------------------------------------------


def _phase_of_range(name):
    if name.startswith("Optimizer.step#"):
        return "optimizer_step"
    if name.startswith("autograd::engine::evaluate_function"):
        return "backward"
    plain = "".join(c if c.isalnum() else "_" for c in name.strip().lower()).strip("_")
    if plain in ("forward", "forward_pass", "fwd", "model_forward"):
        return "forward"
    if plain in ("backward", "backward_pass", "bwd", "loss_backward"):
        return "backward"
    if plain in ("optimizer_step", "optimizer", "optim_step", "opt_step"):
        return "optimizer_step"
    return None


def _frames_phase(frames):
    """'optimizer_step' / 'backward' by the innermost frame that tells one, else 'forward' when
    a Python forward is on the stack; 'empty' without frames, None otherwise."""
    if not frames:
        return "empty"
    forward = False
    for f in frames:
        path = f.get("filename", "").replace("\\", "/")
        name = f.get("name", "")
        if "torch/optim/" in path:
            return "optimizer_step"
        if ("torch::autograd::Engine" in name or "_engine_run_backward" in name
                or ("torch/autograd/" in path and name == "backward")
                or (path.endswith("torch/utils/checkpoint.py")
                    and name in ("unpack_hook", "recompute_fn", "backward", "unpack"))):
            return "backward"
        if name == "forward" and path.endswith(".py"):
            forward = True
    return "forward" if forward else None


def _ranges(annotations):
    """Phase ranges (start_us, end_us, phase) from START/END pairs of external annotations."""
    open_at, out = {}, []
    for a in sorted(annotations, key=lambda a: a.get("time_us", 0)):
        phase = _phase_of_range(a.get("name", ""))
        if phase is None:
            continue
        if a.get("stage") == "START":
            open_at.setdefault(a["name"], []).append(a["time_us"])
        elif a.get("stage") == "END" and open_at.get(a["name"]):
            out.append((open_at[a["name"]].pop(), a["time_us"], phase))
    return sorted(out)


def _merge_ranges(ranges):
    """Overlapping ranges of one phase are one; so are backward ranges (a profiler's backward
    operators) one after another when the gap is at most 100 us or a quarter of the backward so
    far."""
    out = []
    for start, end, phase in sorted(ranges):
        if out and out[-1][2] == phase and (start <= out[-1][1] or (
                phase == "backward" and start - out[-1][1] <= max(100, (out[-1][1] - out[-1][0]) / 4))):
            out[-1] = (out[-1][0], max(out[-1][1], end), phase)
        else:
            out.append((start, end, phase))
    return out


def phase_windows(allocs, entries, ranges, iterations, python_only):
    """The phases over a device's entries: `allocs` lists (entry index, time, frames label) of
    each allocation, `ranges` the phase-named ranges (start, end, phase), `iterations` the
    profiler's step ranges. Returns windows {iteration, phase, first, last} over entry
    indices, micro-batches of one iteration taken together."""
    ranges = _merge_ranges(ranges)
    iterations = sorted(iterations)

    def in_range(t):
        # The range that started last at or before t, if it still runs at t.
        started = [r for r in ranges if r[0] <= t]
        return started[-1][2] if started and t <= started[-1][1] else None

    def step_ended(t):
        ends = [end for start, end, phase in ranges if phase == "optimizer_step" and start <= t]
        return bool(ends) and t > max(ends)

    def iteration_at(t):
        return sum(1 for start, _ in iterations if start <= t)

    starts = []  # (entry index, phase)
    current, last_span = None, 0
    for i, t, frames_label in allocs:
        label = in_range(t) or frames_label
        span = iteration_at(t)
        new_span = bool(iterations) and span != last_span
        last_span = span
        if label in ("forward", "backward", "optimizer_step"):
            new = label
        elif label == "empty" and python_only and current in ("forward", "backward"):
            new = "backward"
        elif new_span:
            new = "forward"
        elif current == "optimizer_step" and label is None:
            new = "forward"
        elif current == "optimizer_step" and label == "empty" and step_ended(t):
            new = "forward"
        else:
            new = current
        if new is not None and (new != current or new_span):
            starts.append((i, new, t))
            current = new
    if starts and starts[0][1] == "backward" and starts[0][0] > 0:
        starts.insert(0, (0, "forward", None))
    has_step = any(p == "optimizer_step" for _, p, _ in starts)
    windows = []
    iteration, previous = 0, None
    for k, (first, phase, t) in enumerate(starts):
        last = starts[k + 1][0] - 1 if k + 1 < len(starts) else entries - 1
        if iterations:
            iteration = max(1, iteration_at(t if t is not None else iterations[0][0]))
        elif (previous is None or (previous == "optimizer_step" and phase in ("forward", "backward"))
                or (previous == "backward" and phase == "forward" and not has_step)):
            iteration += 1
        previous = phase
        same = [w for w in windows if w["iteration"] == iteration and w["phase"] == phase]
        if same:
            same[0]["first"] = min(same[0]["first"], first)
            same[0]["last"] = max(same[0]["last"], last)
        else:
            windows.append({"iteration": iteration, "phase": phase, "first": first, "last": last})
    return windows


def phase_highs(windows, after, before, time_of):
    """The high point of each window and of each iteration: the most allocated after any of
    its entries or when it opens (after the entry before it). `_at` is the entry index."""
    def high(first, last):
        best, best_at = (after[first - 1] if first > 0 else before), first - 1
        for i in range(first, last + 1):
            if after[i] > best:
                best, best_at = after[i], i
        return best, time_of(max(best_at, 0)), best_at

    out = []
    for w in windows:
        bytes_, time, at = high(w["first"], w["last"])
        out.append({"iteration": w["iteration"], "phase": w["phase"], "high_bytes": bytes_,
                    "high_time_us": time, "_at": at})
    for it in sorted({w["iteration"] for w in windows}):
        mine = [w for w in windows if w["iteration"] == it]
        bytes_, time, at = high(min(w["first"] for w in mine), max(w["last"] for w in mine))
        out.append({"iteration": it, "phase": None, "high_bytes": bytes_, "high_time_us": time, "_at": at})
    return out


def phases(trace, annotations, after, before):
    """A snapshot's phases and their high points. Snapshots carry no recorded phase spans:
    phase-named external annotations label what they cover, each allocation's frames the rest."""
    if not trace:
        return []
    python_only = None
    for e in trace:
        if e["action"] != "alloc":
            continue
        for f in e.get("frames") or []:
            if f.get("filename", "").endswith(".py"):
                python_only = True if python_only is None else python_only
            else:
                python_only = False
    allocs = [(i, e.get("time_us", i), _frames_phase(e.get("frames")))
              for i, e in enumerate(trace) if e["action"] == "alloc"]
    windows = phase_windows(allocs, len(trace), _ranges(annotations), [], bool(python_only))
    return phase_highs(windows, after, before, lambda i: trace[i].get("time_us", i))


def analyze_snapshot(snap, range_us=None):
    # _memory_viz.py accepts a bare list of segments (the oldest format).
    if isinstance(snap, list):
        snap = {"segments": snap}
    segments = snap.get("segments") or []
    traces = snap.get("device_traces") or []

    # Same device list as MemoryViz's GPU selector: any device with segments
    # or with a non-empty trace. device_traces is indexed by device number.
    devices = {seg.get("device", 0) for seg in segments}
    devices |= {i for i, t in enumerate(traces) if t}

    result = []
    for device in sorted(devices):
        segs = [s for s in segments if s.get("device", 0) == device]
        trace = traces[device] if device < len(traces) else []
        entry = {"device": device}
        entry.update(final_state(segs))
        entry.update(replay(trace, segs, range_us))
        entry["categories_at_peak"] = categories_at_peak(trace, segs)
        after, before = entry.pop("_allocated_after"), entry.pop("_allocated_before")
        annotations = [a for a in snap.get("external_annotations") or [] if a.get("device", device) == device]
        found = phases(trace, annotations, after, before)
        at = categories_at(trace, segs, {p["_at"] for p in found})
        for p in found:
            p["categories"] = at[p.pop("_at")]
        entry["phases"] = found
        result.append(entry)
    return {"format": "pytorch-snapshot", "devices": result}


# ---------------------------------------------------------------------------
# Chrome traces
# ---------------------------------------------------------------------------


def analyze_chrome_trace(events):
    # Phase-named ranges and the profiler's steps (CPU ranges time the allocations the CPU
    # thread makes on every device).
    ranges, iterations = [], []
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        name, cat = e.get("name", ""), e.get("cat")
        start, end = e.get("ts", 0), e.get("ts", 0) + max(e.get("dur", 0) or 0, 0)
        if cat in ("user_annotation", "gpu_user_annotation") and name.startswith("ProfilerStep#"):
            iterations.append((start, end))
        elif cat in ("user_annotation", "gpu_user_annotation", "cpu_op"):
            phase = _phase_of_range(name)
            if phase is not None:
                ranges.append((start, end, phase))
    groups = {}
    for position, e in enumerate(events):
        if not isinstance(e, dict) or e.get("name") != "[memory]":
            continue
        args = e.get("args", {})
        key = (args.get("Device Type"), args.get("Device Id"))
        groups.setdefault(key, []).append((e.get("ts", 0), position, args))

    devices = []
    def sort_key(key):
        # Numeric order, with a missing Device Type/Id (None) last.
        return tuple((v is None, v if v is not None else 0) for v in key)

    for (dev_type, dev_id), items in sorted(groups.items(), key=lambda kv: sort_key(kv[0])):
        # The running totals only make sense in time order. The profiler
        # writes memory events in order already; sorting by ts with the file
        # position as tie-break keeps that order and fixes files that were
        # concatenated or merged.
        items.sort(key=lambda x: (x[0], x[1]))
        if not any("Total Allocated" in args for _, _, args in items):
            # Early kineto (PyTorch 1.9) wrote only Bytes: the running sum, lifted so that it
            # never goes below zero (a free of older memory shows at least that much was there).
            running, lowest, sums = 0, 0, []
            for ts, _pos, args in items:
                running += args.get("Bytes", 0)
                lowest = min(lowest, running)
                sums.append(running)
            for (ts, _pos, args), value in zip(items, sums):
                args["Total Allocated"] = value - lowest
        peak_alloc = None
        peak_time = None
        peak_reserved = None
        for ts, _pos, args in items:
            total = args.get("Total Allocated", 0)
            if peak_alloc is None or total > peak_alloc:
                peak_alloc = total
                peak_time = ts
            res = args.get("Total Reserved", 0)
            if peak_reserved is None or res > peak_reserved:
                peak_reserved = res
        first = items[0][2]
        last = items[-1][2]
        after = [args.get("Total Allocated", 0) for _, _, args in items]
        before = first.get("Total Allocated", 0) - first.get("Bytes", 0)
        allocs = [(k, ts, "empty") for k, (ts, _pos, args) in enumerate(items) if args.get("Bytes", 0) > 0]
        windows = phase_windows(allocs, len(items), ranges, iterations, False)
        found = phase_highs(windows, after, before, lambda k: items[k][0])
        for p in found:
            del p["_at"]
        devices.append({
            "phases": found,
            "device": dev_id,
            "device_type": dev_type,
            "memory_events": len(items),
            "peak_allocated_bytes": peak_alloc,
            "peak_allocated_time_us": peak_time,
            "peak_reserved_bytes": peak_reserved,
            "final_allocated_bytes": last.get("Total Allocated", 0),
            # "Total Allocated" is reported after the event's own change.
            "initial_allocated_bytes": first.get("Total Allocated", 0) - first.get("Bytes", 0),
        })
    return {"format": "chrome-trace", "devices": devices}


# ---------------------------------------------------------------------------
# Profiler memory timelines
# ---------------------------------------------------------------------------

# Column order of each row after the leading 0 (raw files use index - 1). It is
# the insertion order of _CATEGORY_TO_COLORS in torch/profiler/_memory_profiler.py,
# with None (unknown) last -- not the declaration order of the Category enum.
CATEGORIES = [
    "parameter",
    "optimizer_state",
    "input",
    "temporary",
    "activation",
    "gradient",
    "autograd_detail",
    "unknown",
]


def ns_to_us(t_ns):
    """PyTorch converts with int(t / 1000): true division to a float, then
    truncation. At today's epoch nanoseconds the float cannot hold the exact
    quotient, so this differs from t // 1000 for a good share of timestamps;
    keep Python's exact semantics so coalesced rows match the .json export."""
    return int(t_ns / 1000)


def coalesce_raw(raw):
    """Replay the raw export into the rows export_memory_timeline writes.

    Mirrors MemoryProfileTimeline._coalesce_timeline: events with the same
    (microsecond) time share a row, a row is a copy of the previous one plus
    the changes, and the -1 time of pre-existing tensors is replaced at the end
    by the smallest positive time seen (with PyTorch's own t_min bookkeeping).
    Raw rows already carry signed byte counts (DESTROY and the old version of
    an INCREMENT_VERSION are negative), so every action is a plain add.
    """
    times, rows = [], []
    t_min = -1
    for t, _action, nbytes, category in raw:
        if t != -1:
            t = ns_to_us(t)
        if t_min == -1 or (0 < t < t_min):
            t_min = t
        if not times:
            times.append(t)
            rows.append([0] * (len(CATEGORIES) + 1))
        elif t != times[-1]:
            times.append(t)
            rows.append(list(rows[-1]))
        rows[-1][category + 1] += nbytes
    times = [t_min if t < 0 else t for t in times]
    return times, rows


def analyze_timeline(times, rows, layout):
    def by_name(row):
        return {name: row[i + 1] for i, name in enumerate(CATEGORIES)}

    peak = None
    peak_index = None
    for i, row in enumerate(rows):
        total = sum(row)
        if peak is None or total > peak:
            peak, peak_index = total, i
    return {
        "format": "memory-timeline",
        "layout": layout,
        "samples": len(rows),
        "peak_total_bytes": peak if peak is not None else 0,
        "peak_time_us": times[peak_index] if peak_index is not None else None,
        "categories_at_peak": by_name(rows[peak_index]) if peak_index is not None else None,
        "final_categories": by_name(rows[-1]) if rows else None,
    }


# ---------------------------------------------------------------------------
# Dispatch
# ---------------------------------------------------------------------------


def is_number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def analyze_json(data):
    if isinstance(data, dict):
        if "traceEvents" in data:
            return analyze_chrome_trace(data["traceEvents"])
        raise SystemExit("unrecognised JSON object (no traceEvents)")
    if not isinstance(data, list):
        raise SystemExit("unrecognised JSON document")
    if data and all(isinstance(e, dict) for e in data[:10]):
        # Chrome's "JSON array format": a bare list of events.
        return analyze_chrome_trace(data)
    # [times, rows]: two lists, the second made of lists. A two-event raw file
    # is [[t,a,b,c],[t,a,b,c]] whose second element holds numbers, not lists.
    if (len(data) == 2 and isinstance(data[0], list) and isinstance(data[1], list)
            and all(is_number(t) for t in data[0][:10])
            and all(isinstance(r, list) for r in data[1][:10])):
        return analyze_timeline(data[0], data[1], "coalesced")
    if all(isinstance(r, list) and len(r) == 4 for r in data[:10]):
        times, rows = coalesce_raw(data)
        result = analyze_timeline(times, rows, "raw")
        result["raw_events"] = len(data)
        return result
    raise SystemExit("unrecognised JSON list")


def is_pickle(data):
    """Protocol 2+ starts with PROTO (0x80); protocols 0 and 1 start with the opcode building
    the top-level dict or list ('(d', '(l', '}', ']')."""
    return data[:1] == b"\x80" or data[:2] in (b"(d", b"(l") or data[:1] in (b"}", b"]")


def analyze_bytes(data, range_us=None):
    if is_pickle(data):
        # Snapshots are plain dicts/lists/ints/strings; no custom classes.
        return analyze_snapshot(pickle.loads(data), range_us)
    if data[:2] == b"\x1f\x8b":
        return analyze_bytes(gzip.decompress(data), range_us)
    return analyze_json(json.loads(data))


def analyze_file(path, range_us=None):
    with open(path, "rb") as f:
        return analyze_bytes(f.read(), range_us)


def main(argv):
    range_us = None
    if len(argv) == 5 and argv[2] == "--range-us":
        range_us = (int(argv[3]), int(argv[4]))
    elif len(argv) != 2:
        print("usage: snapshot_reference.py FILE [--range-us FROM TO]", file=sys.stderr)
        return 2
    json.dump(analyze_file(argv[1], range_us), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
