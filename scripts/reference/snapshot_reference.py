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

# Both spellings remove a block from the "active" timeline. Raw pickles only
# ever contain free_completed; MemoryViz.js folds an adjacent
# free_requested/free_completed pair into a synthetic 'free' event and matches
# on both, so accept both here as well.
FREE_ACTIONS = ("free_completed", "free")


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
    """The segsum numbers of torch/cuda/_memory_viz.py, per device.

    segsum counts a block as allocated only when its state is
    'active_allocated'. Everything else -- 'inactive' and also
    'active_pending_free' (freed by the program but still waiting on a
    record_stream event) -- is reported as external free space. Internal free
    space is the rounding slack of allocated blocks: size - requested.
    """
    reserved = allocated = requested = internal = external = 0
    for seg in segments:
        reserved += seg["total_size"]
        for _addr, block in iter_blocks(seg):
            if block["state"] == "active_allocated":
                req = block_requested(block)
                allocated += block["size"]
                requested += req
                internal += block["size"] - req
            else:
                external += block["size"]
    return {
        "segments": len(segments),
        "reserved_bytes": reserved,
        "allocated_bytes": allocated,
        "requested_bytes": requested,
        "free_internal_bytes": internal,
        "free_external_bytes": external,
        # segsum asserts this is zero; a hand-made snapshot (mosaic) violates
        # it because its blocks do not tile their segments.
        "segment_bytes_not_in_blocks": reserved - (requested + internal + external),
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
    or 'active_pending_free' (free_requested seen, free_completed not)."""
    held = {}
    for seg in segments:
        for addr, block in iter_blocks(seg):
            if block["state"] in ("active_allocated", "active_pending_free"):
                held[addr] = block
    return held


def replay(trace, segments, range_us=None):
    """Peaks over the trace window, using MemoryViz.js's pre-window rule.

    The trace is a ring buffer, so memory can be in use before its first
    entry. MemoryViz (process_alloc_data) treats as "initially allocated":
      1. a free whose address has no earlier alloc in the window, with the size
         the free event carries;
      2. every 'active_allocated' block of the final segments whose address is
         not held by an alloc of the window that is still open at the end,
         with the block's requested_size (here also 'active_pending_free'
         blocks: see rule 2 below).
    The same reasoning is applied to segments for the reserved curve.
    """
    times = [e.get("time_us", i) for i, e in enumerate(trace)]
    start_time = times[0] if trace else None

    final_held = held_blocks(segments)

    # Pass 1: which allocs of the window are still open at the end. Their
    # allocated size can be taken from the final block at that address, which
    # is exact; otherwise only the rounded request is known (the allocator may
    # have handed out a bigger block when the remainder was too small to split).
    open_alloc = {}
    for i, e in enumerate(trace):
        action = e["action"]
        if action == "alloc":
            open_alloc[e["addr"]] = i
        elif action in FREE_ACTIONS:
            open_alloc.pop(e["addr"], None)
    open_at_end = set(open_alloc.values())

    requested = Curve(start_time)
    allocated = Curve(start_time)
    reserved = Curve(start_time)
    pre_requested = pre_allocated = pre_reserved = 0

    live = {}        # addr -> (requested, allocated) of allocs opened in the window
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
        elif action in FREE_ACTIONS:
            entry = live.pop(e["addr"], None)
            if entry is None:
                # Rule 1: allocated before the window, alive until now.
                entry = (e["size"], round_block(e["size"]))
                pre_requested += entry[0]
                pre_allocated += entry[1]
            requested.add(-entry[0], t)
            allocated.add(-entry[1], t)
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
        # free_requested, oom, snapshot and unknown actions do not move the
        # curves: the active timeline only drops when the block is returned.

    # Rule 2 for blocks. A block freed by the program but waiting for its stream
    # ('active_pending_free') is still allocated: its free has not completed (the definition
    # of allocated in DESIGN.md). MemoryViz leaves such blocks out of its initial level, but
    # counts them while open when their alloc is in the window; counting them in both cases
    # keeps a snapshot without history at its final state.
    for seg in segments:
        for addr, block in iter_blocks(seg):
            if block["state"] in ("active_allocated", "active_pending_free") and addr not in live:
                pre_requested += block_requested(block)
                pre_allocated += block["size"]

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
        "peak_allocated_bytes": allocated.peak(),
        "peak_allocated_time_us": allocated.best_time,
        "peak_requested_bytes": requested.peak(),
        "peak_requested_time_us": requested.best_time,
        "peak_reserved_bytes": reserved.peak(),
        "trace_entries": len(trace),
        "trace_first_time_us": times[0] if trace else None,
        "trace_last_time_us": times[-1] if trace else None,
        "actions": dict(sorted(actions.items())),
        # Where the replay ends; equals the final-state numbers when the trace
        # and the segments agree (allocated: plus any active_pending_free
        # blocks whose free was requested but not completed in the window).
        "replay_end_allocated_bytes": allocated.end(),
        "replay_end_reserved_bytes": reserved.end(),
        "initial_allocated_bytes": pre_allocated,
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
    """Bytes by category of the blocks alive when allocated memory first reaches its peak.

    The live set follows the same rules as replay(): blocks freed in the window without
    their alloc were alive from the start (no stack), final active blocks without an open
    alloc were too (with the block's own frames), and each alloc is live until its
    free_completed.
    """
    final_held = held_blocks(segments)
    open_alloc = {}
    seen = set()
    pre = {}
    for i, e in enumerate(trace):
        if e["action"] == "alloc":
            open_alloc[e["addr"]] = i
            seen.add(e["addr"])
        elif e["action"] in FREE_ACTIONS:
            if e["addr"] not in seen and e["addr"] not in pre:
                pre[e["addr"]] = (round_block(e["size"]), [])
            open_alloc.pop(e["addr"], None)
        elif e["action"] == "free_requested" and e["addr"] not in seen and e["addr"] not in pre:
            pre[e["addr"]] = (round_block(e["size"]), [])
    open_at_end = set(open_alloc.values())
    live = dict(pre)
    for seg in segments:
        for addr, block in iter_blocks(seg):
            if block["state"] != "inactive" and addr not in open_alloc and addr not in live:
                # Older snapshots keep the current allocation's frames first in `history`.
                frames = block.get("frames")
                if frames is None and block.get("history"):
                    frames = block["history"][0].get("frames")
                live[addr] = (block["size"], frames or [])
    total = sum(size for size, _ in live.values())
    best, best_live = total, dict(live)
    for i, e in enumerate(trace):
        action = e["action"]
        if action == "alloc":
            held = final_held.get(e["addr"]) if i in open_at_end else None
            size = held["size"] if held is not None else round_block(e["size"])
            live[e["addr"]] = (size, e.get("frames") or [])
            total += size
        elif action in FREE_ACTIONS:
            entry = live.pop(e["addr"], None)
            if entry is not None:
                total -= entry[0]
        else:
            continue
        if total > best:
            best, best_live = total, dict(live)
    named = parameters_by_size(trace, segments, open_alloc)
    out = {}
    for addr, (size, frames) in best_live.items():
        c = category_of(frames)
        if c == "unknown" and addr in named:
            c = "parameter"
        out[c] = out.get(c, 0) + size
    return {k: v for k, v in sorted(out.items()) if v > 0}


def parameters_by_size(trace, segments, open_at_end):
    """Addresses of blocks held from before the trace to its end that are parameters by size.

    DESIGN.md's rule: when the gradients (by the stack rules) are most in requested bytes,
    take how many of each requested size are alive; a size held by exactly that many blocks
    from before the trace (half as many for optimizer state, two per parameter under Adam)
    names those blocks parameters, when at least 4 blocks and nine tenths of the parameters'
    bytes are matched. Gradients first, then optimizer state.
    """
    held = {}
    for seg in segments:
        for addr, block in iter_blocks(seg):
            if block["state"] != "inactive" and addr not in open_at_end:
                held.setdefault(block_requested(block), []).append(addr)
    for category, per_parameter in (("gradient", 1), ("optimizer_state", 2)):
        alive, counts, total, most, at_most = {}, {}, 0, 0, {}
        for e in trace:
            if e["action"] == "alloc" and category_of(e.get("frames")) == category:
                alive[e["addr"]] = e["size"]
                counts[e["size"]] = counts.get(e["size"], 0) + 1
                total += e["size"]
                if total > most:
                    most, at_most = total, {k: v for k, v in counts.items() if v}
            elif e["action"] in FREE_ACTIONS and e["addr"] in alive:
                size = alive.pop(e["addr"])
                counts[size] -= 1
                total -= size
        matched = []
        for size, n in at_most.items():
            blocks = held.get(size, [])
            if len(blocks) * per_parameter == n:
                matched.extend(blocks)
        matched_bytes = sum(size * len(held[size]) for size, n in at_most.items()
                            if len(held.get(size, [])) * per_parameter == n)
        wanted = most // per_parameter
        if len(matched) >= 4 and wanted > 0 and matched_bytes * 10 >= wanted * 9:
            return set(matched)
    return set()


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
        result.append(entry)
    return {"format": "pytorch-snapshot", "devices": result}


# ---------------------------------------------------------------------------
# Chrome traces
# ---------------------------------------------------------------------------


def analyze_chrome_trace(events):
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
        devices.append({
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
