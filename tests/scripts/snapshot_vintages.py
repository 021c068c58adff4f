#!/usr/bin/env python3
"""Writes PyTorch memory snapshots of every vintage and shape a user may have, and a manifest of
what vramscope must read from each (numbers counted by hand from what is written below, or the
error it must give). CUDA is not needed: the files are written with Python's pickle in the shape
PyTorch's own code gives them.

    python3 snapshot_vintages.py OUT_DIR                  the vintages, OUT_DIR/manifest.json
    python3 snapshot_vintages.py --random N --seed S OUT  N random snapshots of consistent
                                                          allocator states (for property tests)

Sources of each shape (facts only; written from scratch here):

* 2.0 (pytorch/pytorch@c263bd43e8e8502d4726643bc6fd046f0130ac0e, torch/cuda/_memory_viz.py, and
  the compiled key strings of the 2.0.0 wheel): segments of device, address, total_size,
  allocated_size, active_size, requested_size, stream, segment_type and blocks; blocks of size,
  state and (when not empty) history [{addr, real_size, frames}], no address; trace entries of
  action, addr (device_free for an oom), size, stream, frames; no time_us.
* 2.1+ (torch/csrc/cuda/Module.cpp at pytorch/pytorch@87a08c18736e7cf8a3b2a5d72d1c8564a159b746):
  segments add segment_pool_id, is_expandable, frames; blocks add address (the segment's address
  plus the sizes of the blocks before it), requested_size, frames. torch.cuda.memory_snapshot()
  returns the list of segments alone.
* time_us from 2.2; allocator_settings from 2.3; external_annotations from 2.5; compile_context
  from 2.8 ("N/A" by default); user_metadata from 2.10 (_set_memory_metadata, dicts as compact
  JSON); annotate entries from 2.14 (_annotate_tensor: addr of the storage, user_metadata);
  host_traces for pinned host memory from 2.14 (record_pinned_host_memory=True);
  augment_with_fx_traces frames from 2.10 (torch/_utils.py _augment_frames in 2.15: fx_node_op,
  fx_node_name, fx_node_target, fx_original_trace on frames of fx_generated_*.py files).
* oom entries carry device_free and the size, no addr; snapshot entries addr 0 and the total
  active bytes (c10/cuda/CUDACachingAllocator.cpp record_trace calls).
* PyTorch 2.0's trace_plot page: PlotWriter.to_html in the 2.0 _memory_viz.py (alloc_data with
  actions, elements {size, info}, suffix_table, string_table, initially_allocated).
* The profiler's export_memory_timeline(".html") page: export_memory_timeline_html in
  torch/profiler/_memory_profiler.py (2.1 to 2.15): a PNG in an <img> tag, no data.

Standard library only.
"""

import argparse
import base64
import json
import os
import pickle
import random
import sys

KIB, MIB = 1 << 10, 1 << 20
FR = [{"name": "forward", "filename": "/src/model.py", "line": 12},
      {"name": "<module>", "filename": "/src/train.py", "line": 40}]


def seg21(device, address, total, blocks, pool_id=(0, 0), expandable=False, stream=0):
    """A 2.1+ segment; blocks are (size, state, requested) laid out from the segment's start."""
    out, addr = [], address
    allocated = active = requested = 0
    for size, state, req in blocks:
        out.append({"address": addr, "size": size, "requested_size": req, "state": state,
                    "frames": FR if state != "inactive" else []})
        if state == "active_allocated":
            allocated += size
        if state != "inactive":
            active += size
            requested += req
        addr += size
    assert addr == address + total, "blocks must tile the segment"
    return {"device": device, "address": address, "total_size": total, "allocated_size": allocated,
            "active_size": active, "requested_size": requested, "stream": stream,
            "segment_type": "large" if total > 2 * MIB else "small", "segment_pool_id": pool_id,
            "is_expandable": expandable, "frames": FR, "blocks": out}


def entry(action, addr, size, t=None, frames=FR, **extra):
    e = {"action": action, "addr": addr, "size": size, "stream": 0}
    if t is not None:
        e["time_us"] = t
    e.update(extra)
    e["frames"] = frames
    return e


def dump(out_dir, name, obj, protocol=4):
    with open(os.path.join(out_dir, name), "wb") as f:
        pickle.dump(obj, f, protocol=protocol)
    return name


def vintages(out_dir):
    manifest = []
    settings = {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1, "expandable_segments": False}

    # --- _dump_snapshot() without _record_memory_history: segments, and one empty trace per
    # device. The final state is the only instant: every peak equals it. ------------------------
    s0 = 0x7F0000000000
    segments = [
        seg21(0, s0, 20 * MIB, [(8 * MIB, "active_allocated", 8_000_000), (12 * MIB, "inactive", 0)]),
        seg21(0, s0 + 20 * MIB, 2 * MIB, [(512, "active_allocated", 100), (1024, "active_pending_free", 1000),
                                           (2 * MIB - 1536, "inactive", 0)]),
    ]
    snap = {"segments": segments, "device_traces": [[]], "allocator_settings": settings,
            "external_annotations": []}
    name = dump(out_dir, "dump_snapshot_without_history.pickle", snap)
    # Alive at the end: 8 MiB + 512 allocated, 1024 freed but waiting for its stream (its free
    # requested, so not allocated, as memory_allocated() says; active until the free completes),
    # at the peak and at the end alike.
    manifest.append({"file": name, "note": "No allocation history", "reference": True, "devices": [
        {"label": "cuda:0", "peak_allocated_bytes": 8 * MIB + 512, "allocated_bytes": 8 * MIB + 512,
         "awaiting_free_bytes": 1024, "active_bytes": 8 * MIB + 512 + 1024, "peak_active_bytes": 8 * MIB + 512 + 1024,
         "requested_bytes": 8_000_000 + 100,
         "peak_reserved_bytes": 22 * MIB, "reserved_bytes": 22 * MIB, "segments": 2}]})

    # --- The same on a machine with 8 GPUs, used on devices 0 and 3: device_traces has 8 empty
    # lists; device 3 holds more and is where to look first. -----------------------------------
    segments = [seg21(0, s0, 2 * MIB, [(1 * MIB, "active_allocated", MIB), (1 * MIB, "inactive", 0)]),
                seg21(3, s0 + 64 * MIB, 20 * MIB, [(20 * MIB, "active_allocated", 20 * MIB)])]
    snap = {"segments": segments, "device_traces": [[] for _ in range(8)], "allocator_settings": settings}
    name = dump(out_dir, "eight_gpus_two_used.pickle", snap)
    manifest.append({"file": name, "focus_device": 3, "note": "No allocation history", "reference": True, "devices": [
        {"label": "cuda:0", "peak_allocated_bytes": MIB, "allocated_bytes": MIB},
        {"label": "cuda:3", "peak_allocated_bytes": 20 * MIB, "allocated_bytes": 20 * MIB}]})

    # --- torch.cuda.memory_snapshot() pickled: the list of segments alone. ---------------------
    name = dump(out_dir, "memory_snapshot_list.pickle", segments)
    manifest.append({"file": name, "note": "No allocation history", "reference": True, "devices": [
        {"label": "cuda:0", "peak_allocated_bytes": MIB}, {"label": "cuda:3", "peak_allocated_bytes": 20 * MIB}]})

    # --- PyTorch 2.0: blocks without address, with history; entries without time_us. ----------
    S = 0x7F1000000000
    blocks20 = [
        {"size": 4 * MIB, "state": "active_allocated", "history": [{"addr": S, "real_size": 4_000_000, "frames": FR}]},
        {"size": 2 * MIB, "state": "inactive", "history": [{"addr": S + 4 * MIB, "real_size": 2_000_000, "frames": FR}]},
        {"size": 1 * MIB, "state": "active_allocated", "history": [{"addr": S + 6 * MIB, "real_size": MIB, "frames": FR}]},
        {"size": 13 * MIB, "state": "inactive"},
    ]
    seg20 = {"device": 0, "address": S, "total_size": 20 * MIB, "allocated_size": 5 * MIB, "active_size": 5 * MIB,
             "requested_size": 4_000_000 + MIB, "stream": 0, "segment_type": "large", "blocks": blocks20}
    trace20 = [
        {"action": "segment_alloc", "addr": S, "size": 20 * MIB, "stream": 0, "frames": FR},
        {"action": "alloc", "addr": S, "size": 4_000_000, "stream": 0, "frames": FR},
        {"action": "alloc", "addr": S + 4 * MIB, "size": 2_000_000, "stream": 0, "frames": FR},
        {"action": "alloc", "addr": S + 6 * MIB, "size": MIB, "stream": 0, "frames": FR},
        {"action": "free_requested", "addr": S + 4 * MIB, "size": 2_000_000, "stream": 0, "frames": FR},
        {"action": "free_completed", "addr": S + 4 * MIB, "size": 2_000_000, "stream": 0, "frames": FR},
        {"action": "oom", "device_free": 123 * MIB, "size": 1 << 30, "stream": 0, "frames": FR},
    ]
    name = dump(out_dir, "torch2.0_history_no_addresses.pickle", {"segments": [seg20], "device_traces": [trace20]},
                protocol=2)
    # Alive at the end (exact sizes from the final blocks, found at the addresses the offsets
    # give): 4 MiB and 1 MiB; the freed block's size is its request rounded to 512: 2,000,384.
    manifest.append({"file": name, "reference": True, "oom_events": 1, "devices": [
        {"label": "cuda:0", "peak_allocated_bytes": 4 * MIB + 2_000_384 + MIB, "allocated_bytes": 5 * MIB,
         "requested_bytes": 4_000_000 + MIB, "peak_reserved_bytes": 20 * MIB, "segments": 1}]})

    # --- PyTorch 2.0's trace_plot page of that snapshot (PlotWriter's alloc_data). --------------
    string_table, suffix_table, elements, actions, initially = [], [], [], [], []
    strings, suffixes = {}, {}

    def intern_str(s):
        if s not in strings:
            string_table.append(s)
            strings[s] = len(string_table) - 1
        return strings[s]

    def intern_stack(frames):
        next_id = None
        for sid in reversed([intern_str(f) for f in frames]):
            key = (sid, next_id)
            if key not in suffixes:
                suffix_table.append(key)
                suffixes[key] = len(suffix_table) - 1
            next_id = suffixes[key]
        return next_id

    def format_size(num):
        # The 2.0 _memory_viz.py's _format_size: "3.8MiB".
        for unit in ["", "Ki", "Mi", "Gi", "Ti"]:
            if abs(num) < 1024.0:
                return f"{num:3.1f}{unit}B"
            num /= 1024.0
        return f"{num:.1f}PiB"

    open_allocs = {}
    for e in trace20:
        lines = [f"{format_size(e['size'])} allocation"]
        lines += [f"{f['filename']}:{f['line']}:{f['name']}" for f in e["frames"]]
        if e["action"] == "alloc":
            elements.append({"size": e["size"], "info": intern_stack(lines)})
            open_allocs[e["addr"]] = len(elements) - 1
            actions.append(len(elements) - 1)
        elif e["action"] == "free_completed":
            actions.append(open_allocs.pop(e["addr"]))
    plot = {"actions": actions, "elements": elements, "suffix_table": suffix_table, "string_table": string_table,
            "initially_allocated": list(reversed(initially))}
    page = ("\n<!DOCTYPE html>\n<html>\n<head></head>\n<body>\n<script type=\"module\">\n"
            "import * as d3 from \"https://cdn.jsdelivr.net/npm/d3@7.7.0/+esm\";\n"
            f"let alloc_data = {json.dumps(plot)}\n\nfunction process_alloc_data() {{}}\n</script>\n</body>\n</html>\n")
    with open(os.path.join(out_dir, "torch2.0_trace_plot.html"), "w") as f:
        f.write(page)
    # Sizes there are requests, rounded to 512 as for any estimated size; no segments.
    manifest.append({"file": "torch2.0_trace_plot.html", "wrapped_in": ["memory_viz HTML"], "devices": [
        {"label": "cuda:0", "peak_allocated_bytes": 4_000_256 + 2_000_384 + MIB,
         "peak_requested_bytes": 4_000_000 + 2_000_000 + MIB, "allocated_bytes": 4_000_256 + MIB}]})

    # --- The profiler's export_memory_timeline(".html"): a picture only. -----------------------
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 32).decode()
    page = (f"<html>\n<head><meta charset=\"utf-8\" /><title>GPU Memory Timeline HTML</title></head>\n<body>\n"
            f"  <img src='data:image/png;base64,{png}'>\n</body>\n</html>")
    with open(os.path.join(out_dir, "memory_timeline.html"), "w") as f:
        f.write(page)
    manifest.append({"file": "memory_timeline.html", "error": "export_memory_timeline"})

    # --- Private pools (a CUDA graph's, pool id (1, 0)), pending frees, two snapshot markers, an
    # OOM without an address, an expandable segment. -------------------------------------------
    P = 0x7F2000000000
    segments = [
        seg21(0, P, 20 * MIB, [(6 * MIB, "active_allocated", 6 * MIB), (14 * MIB, "inactive", 0)]),
        seg21(0, P + 32 * MIB, 20 * MIB, [(2 * MIB, "active_allocated", 2 * MIB), (2 * MIB, "active_pending_free", 2 * MIB),
                                          (16 * MIB, "inactive", 0)], pool_id=(1, 0)),
        seg21(0, P + 64 * MIB, 4 * MIB, [(4 * MIB, "inactive", 0)], expandable=True),
    ]
    trace = [
        entry("segment_alloc", P + 32 * MIB, 20 * MIB, 100),
        entry("alloc", P + 32 * MIB, 2 * MIB, 110),
        entry("alloc", P + 34 * MIB, 2 * MIB, 120),
        entry("snapshot", 0, 10 * MIB, 130),
        entry("free_requested", P + 34 * MIB, 2 * MIB, 140),
        entry("segment_map", P + 64 * MIB, 4 * MIB, 145),
        entry("oom", 0, 64 * MIB, 150, device_free=3 * MIB),
        entry("snapshot", 0, 10 * MIB, 160),
    ]
    snap = {"segments": segments, "device_traces": [trace], "allocator_settings": settings}
    name = dump(out_dir, "cuda_graph_private_pool.pickle", snap)
    # Before the window: the 6 MiB block (default pool) and its 20 MiB segment. The free of the
    # second 2 MiB block was requested (allocated drops to 8 MiB there) and never completed (it
    # stays active): the peak is 10 MiB at the second alloc, the end 8 MiB allocated and 10 active.
    manifest.append({"file": name, "reference": True, "oom_events": 1, "annotations": 2, "devices": [
        {"label": "cuda:0", "peak_allocated_bytes": 10 * MIB, "allocated_bytes": 8 * MIB,
         "awaiting_free_bytes": 2 * MIB, "active_bytes": 10 * MIB, "peak_active_bytes": 10 * MIB,
         "private_pool_segments": 1,
         "private_pool_reserved_bytes": 20 * MIB, "peak_reserved_bytes": 44 * MIB, "reserved_bytes": 44 * MIB}]})

    # --- 2.14-era metadata: _set_memory_metadata (compact JSON), compile_context, an annotate
    # entry naming a tensor's storage, FX-augmented frames, pinned host memory. -----------------
    M = 0x7F3000000000
    fx_frame = {"name": "call", "filename": "/tmp/torchinductor_u/ab/fx_generated_ab12.py", "line": 20,
                "fx_node_op": "call_function", "fx_node_name": "addmm", "fx_node_target": "aten.addmm.default",
                "fx_original_trace": "  File \"/src/train.py\", line 40, in <module>\n    loss = model(x)\n"
                                     "  File \"/src/model.py\", line 12, in forward\n    return self.proj(x)\n"}
    fx_frames = [fx_frame, {"name": "<module>", "filename": "/src/train.py", "line": 40}]
    segments = [seg21(0, M, 20 * MIB, [(4 * MIB, "active_allocated", 4 * MIB), (8 * MIB, "active_allocated", 8 * MIB),
                                       (8 * MIB, "inactive", 0)])]
    for b in segments[0]["blocks"][:2]:
        b["frames"] = fx_frames
    trace = [
        entry("segment_alloc", M, 20 * MIB, 10, compile_context="N/A", user_metadata=""),
        entry("alloc", M, 4 * MIB, 20, frames=fx_frames, compile_context="Torch-Compiled Region: 0/0",
              user_metadata='{"step":3}'),
        entry("alloc", M + 4 * MIB, 8 * MIB, 30, frames=fx_frames, compile_context="N/A", user_metadata=""),
        entry("annotate", M + 4 * MIB, 0, 40, compile_context="N/A", user_metadata="kv_cache"),
    ]
    host = [entry("alloc", 0x7F9000000000, 64 * KIB, 15, frames=FR), entry("alloc", 0x7F9000010000, 32 * KIB, 25)]
    snap = {"segments": segments, "device_traces": [trace], "allocator_settings": settings,
            "external_annotations": [{"name": "train_step", "stage": "START", "device": 0, "time_us": 5},
                                     {"name": "train_step", "stage": "END", "device": 0, "time_us": 45}],
            "host_segments": [], "host_traces": host}
    name = dump(out_dir, "metadata_annotate_fx_host.pickle", snap, protocol=5)
    manifest.append({"file": name, "devices": [
        {"label": "host", "peak_allocated_bytes": 96 * KIB},
        {"label": "cuda:0", "peak_allocated_bytes": 12 * MIB, "allocated_bytes": 12 * MIB}],
        "blocks": [{"size_bytes": 8 * MIB, "context": ["user metadata: kv_cache"], "site": "forward  /src/model.py:12"},
                   {"size_bytes": 4 * MIB, "context": ['user metadata: {"step":3}',
                                                      "compile context: Torch-Compiled Region: 0/0"]}]})

    # --- Integers of 9 bytes and more: a stream handle of 2**64 - 1 (how a -1 handle ends up
    # pickled, pytorch/pytorch#115234) and an XPU-style address above 2**63 (#170645) read
    # exactly; an address of 2**70 is refused by name. ------------------------------------------
    X = 18446720620317114368
    segments = [seg21(0, X, 2 * MIB, [(1 * MIB, "active_allocated", MIB), (1 * MIB, "inactive", 0)],
                      stream=2**64 - 1)]
    snap = {"segments": segments, "device_traces": [[entry("alloc", X, MIB, 5)]]}
    name = dump(out_dir, "wide_integers.pickle", snap)
    manifest.append({"file": name, "reference": True, "devices": [
        {"label": "cuda:0", "peak_allocated_bytes": MIB, "allocated_bytes": MIB}]})
    snap = {"segments": [], "device_traces": [[entry("alloc", 2**70, MIB, 5)]]}
    name = dump(out_dir, "address_wider_than_64_bits.pickle", snap)
    manifest.append({"file": name, "error": "wider than 64 bits"})

    # --- Protocols 0 and 1 (no header; what pickle.dump(..., protocol=0) writes). --------------
    snap = {"segments": [seg21(0, s0, 2 * MIB, [(512, "active_allocated", 500), (2 * MIB - 512, "inactive", 0)])],
            "device_traces": [[entry("alloc", s0, 500, 7), entry("alloc", s0 + 512, 700, 8),
                               entry("free_requested", s0 + 512, 700, 9), entry("free_completed", s0 + 512, 700, 9)]]}
    for protocol in (0, 1):
        name = dump(out_dir, f"protocol{protocol}.pickle", snap, protocol=protocol)
        manifest.append({"file": name, "reference": True, "devices": [
            {"label": "cuda:0", "peak_allocated_bytes": 512 + 1024, "allocated_bytes": 512}]})

    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


def random_snapshot(rng):
    """A consistent random allocator history: segments cut into slots, allocations into them,
    frees, pending frees, segment frees; then a ring-buffer window of it, maybe no history at
    all, maybe no times."""
    devices = rng.choice([[0], [0], [0, 1], [1, 3]])
    segments, traces = [], [[] for _ in range(max(devices) + 1)]
    t = 1_700_000_000_000_000
    for device in devices:
        trace = []
        base = 0x7F0000000000 + device * (1 << 36)
        live_segments = []
        for k in range(rng.randint(1, 5)):
            size = rng.choice([2 * MIB, 20 * MIB, 64 * MIB])
            slot = rng.choice([512, 4096, MIB // 2, 2 * MIB])
            slot = min(slot, size)
            address = base + k * 128 * MIB
            live_segments.append({"address": address, "size": size, "slot": slot,
                                  "slots": {address + i * slot: None for i in range(size // slot)}})
            t += rng.randint(1, 50)
            trace.append(entry("segment_alloc", address, size, t))
        for _ in range(rng.randint(0, 400)):
            t += rng.randint(1, 50)
            seg = rng.choice(live_segments)
            free_slots = [a for a, v in seg["slots"].items() if v is None]
            used = [a for a, v in seg["slots"].items() if v is not None and v[1] == "active_allocated"]
            if free_slots and (not used or rng.random() < 0.55):
                a = rng.choice(free_slots)
                req = rng.randint(1, seg["slot"])
                seg["slots"][a] = (req, "active_allocated")
                trace.append(entry("alloc", a, req, t))
            elif used:
                a = rng.choice(used)
                req = seg["slots"][a][0]
                trace.append(entry("free_requested", a, req, t))
                if rng.random() < 0.1:
                    seg["slots"][a] = (req, "active_pending_free")
                else:
                    trace.append(entry("free_completed", a, req, t))
                    seg["slots"][a] = None
        # Segments with nothing in them may be released.
        for seg in list(live_segments):
            if len(live_segments) > 1 and all(v is None for v in seg["slots"].values()) and rng.random() < 0.5:
                t += 1
                trace.append(entry("segment_free", seg["address"], seg["size"], t))
                live_segments.remove(seg)
        for seg in live_segments:
            blocks = []
            for a in sorted(seg["slots"]):
                v = seg["slots"][a]
                blocks.append((seg["slot"], v[1], v[0]) if v else (seg["slot"], "inactive", 0))
            segments.append(seg21(device, seg["address"], seg["size"], blocks))
        if rng.random() < 0.5:
            trace = trace[-rng.randint(1, max(1, len(trace))):]
        if rng.random() < 0.2:
            for e in trace:
                e.pop("time_us", None)
        traces[device] = trace
    if rng.random() < 0.15:
        traces = [[] for _ in traces]
    return {"segments": segments, "device_traces": traces}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir")
    parser.add_argument("--random", type=int, default=0, help="write this many random snapshots instead")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    if args.random:
        rng = random.Random(args.seed)
        names = []
        for i in range(args.random):
            snap = random_snapshot(rng)
            name = dump(args.out_dir, f"random{i:03}.pickle", snap, protocol=rng.choice([2, 4, 5]))
            entry_ = {"file": name, "reference": True}
            if not any(snap["device_traces"]):
                entry_["note"] = "No allocation history"
            names.append(entry_)
        with open(os.path.join(args.out_dir, "manifest.json"), "w") as f:
            json.dump(names, f)
        return
    vintages(args.out_dir)


if __name__ == "__main__":
    main()
