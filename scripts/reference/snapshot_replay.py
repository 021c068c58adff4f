"""The reference's snapshot rules: the allocator's block rounding and two-step frees, the final
state of a snapshot's segments (the segsum numbers of torch/cuda/_memory_viz.py), and the replay
of its trace into allocated, active, requested and reserved curves with MemoryViz's rules for
memory in use before the trace's first entry.
"""

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
