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

Standard library only. These files (this script and the modules beside it) must stay
independent of the Rust code: they re-derive every number from PyTorch's own definitions (see
docs/notes/pytorch-formats.md for where each rule comes from), so that a bug in the Rust
implementation cannot be copied into the expected values.

This script reads the file, tells its kind and puts a snapshot's numbers together; the rules
live beside it: snapshot_replay.py (a snapshot's final state and the replay of its trace),
snapshot_categories.py (what the blocks alive at an instant are, by their frames and sizes),
training_phases.py (forward, backward and optimizer step, and their high points),
chrome_trace.py (the profiler's chrome trace) and memory_timeline.py (the profiler's memory
timeline exports).
"""

import gzip
import json
import pickle
import sys

from chrome_trace import analyze_chrome_trace
from memory_timeline import analyze_timeline, coalesce_raw
from snapshot_categories import categories_at, categories_at_peak
from snapshot_replay import final_state, replay
from training_phases import phases

# ---------------------------------------------------------------------------
# Snapshot pickles
# ---------------------------------------------------------------------------


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
