#!/usr/bin/env python3
"""Writes a memory snapshot of a multi-GPU run that ran out of memory in its first forward pass,
as `torch.cuda.memory._dump_snapshot` writes one (protocol 4, Python frames), and what any face
must say of it, worked out here from the entries alone (standard library only).

    python3 forward_oom.py OUT.pickle      -> OUT.pickle, and a JSON line of expectations on stdout

Three devices run the same decoder's first forward (no backward, no optimizer step): each layer
allocates its attention's projections, output and MLP activations (kept for backward) and two
temporaries (freed within the layer), every allocation with the stack of `model.py`'s forward
calling the layer. The devices start at different times (cuda:1 1.28 s after cuda:0, cuda:2
0.64 s after it); cuda:1 runs out of memory in its twentieth layer, the others finish their
twenty-four. Nothing here is an iteration of the program's loop: the layers repeat inside one
call of the model, and what each keeps is what backward needs.

The expectations: the trace's first event (cuda:0's first entry) is the origin of every time;
cuda:1's allocated peak is reached at its last allocation before the OOM, and the OOM comes
after it; each device's peak allocated bytes.
"""

import json
import pickle
import sys

MIB = 1 << 20
T0 = 1_700_000_000_000_000  # µs
LAYERS = 24
TOKENS, HIDDEN = 2048, 1024
ACT = TOKENS * HIDDEN * 4  # one fp32 activation: 8 MiB


def frame(name, filename, line):
    return {"name": name, "filename": filename, "line": line}


SITE = "/opt/conda/lib/python3.11/site-packages/torch"
PROGRAM = "/home/user/llm"
CALL = [frame("_call_impl", f"{SITE}/nn/modules/module.py", 1784),
        frame("_wrapped_call_impl", f"{SITE}/nn/modules/module.py", 1773)]
OUTER = [frame("forward", f"{PROGRAM}/model.py", 212)] + CALL + [
    frame("train_step", f"{PROGRAM}/train.py", 58), frame("main", f"{PROGRAM}/train.py", 101),
    frame("<module>", f"{PROGRAM}/train.py", 120)]
ALLOCATOR = [frame("torch::unwind::unwind()", "??", 0), frame("torch::CapturedTraceback::gather(bool, bool, bool)", "??", 0),
             frame("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)", "??", 0)]


def stack(*inner):
    """Frames innermost first: the allocator's, the operator's, then the layer's forward called
    from the model's loop over its layers."""
    return ALLOCATOR + list(inner) + CALL + OUTER


LINEAR = frame("forward", f"{SITE}/nn/modules/linear.py", 125)
STACKS = {
    "q": stack(LINEAR, frame("forward", f"{PROGRAM}/attention.py", 41)),
    "k": stack(LINEAR, frame("forward", f"{PROGRAM}/attention.py", 42)),
    "v": stack(LINEAR, frame("forward", f"{PROGRAM}/attention.py", 43)),
    "scores": stack(frame("einsum", f"{SITE}/functional.py", 373), frame("forward", f"{PROGRAM}/attention.py", 47)),
    "out": stack(LINEAR, frame("forward", f"{PROGRAM}/attention.py", 52)),
    "up": stack(LINEAR, frame("forward", f"{PROGRAM}/mlp.py", 18)),
    "act": stack(frame("gelu", f"{SITE}/nn/functional.py", 1701), frame("forward", f"{PROGRAM}/mlp.py", 19)),
    "tmp": stack(frame("forward", f"{PROGRAM}/mlp.py", 20)),
}
# What each allocation is: its size, and whether the layer frees it (a temporary).
# The attention's scores (heads x tokens x tokens) are the largest, and go within the layer.
LAYER = [("q", ACT, False), ("k", ACT, False), ("v", ACT, False), ("scores", 10 * ACT, True), ("out", ACT, False),
         ("up", 4 * ACT, False), ("act", 4 * ACT, False), ("tmp", 4 * ACT, True)]


def entry(action, addr, size, t, frames=()):
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t, "frames": list(frames)}


def device_run(device, start_us, layers, oom_layer):
    """One device's entries and final segments; its peak allocated bytes and when (µs)."""
    entries, segments = [], []
    base = 0x7F0000000000 + device * (1 << 40)
    t = start_us
    allocated = peak = 0
    peak_us = start_us
    for layer in range(layers):
        if layer == oom_layer:
            entries.append({"action": "oom", "addr": 0, "size": 8 * ACT, "stream": 0, "time_us": t + 1000,
                            "device_free": 3 * MIB, "frames": STACKS["up"]})
            return entries, segments, peak, peak_us, t + 1000
        freed = []
        for name, size, temporary in LAYER:
            t += 2000
            addr = base
            base += size
            entries.append(entry("segment_alloc", addr, size, t, STACKS[name]))
            entries.append(entry("alloc", addr, size, t, STACKS[name]))
            allocated += size
            if allocated > peak:
                peak, peak_us = allocated, t
            block = {"address": addr, "size": size, "requested_size": size, "state": "active_allocated",
                     "frames": STACKS[name]}
            if temporary:
                freed.append((addr, size, block))
            segments.append({"device": device, "address": addr, "total_size": size, "allocated_size": size,
                             "active_size": size, "requested_size": size, "stream": 0, "segment_type": "large",
                             "segment_pool_id": (0, 0), "is_expandable": False, "frames": STACKS[name],
                             "blocks": [block]})
        for addr, size, block in freed:
            t += 500
            entries.append(entry("free_requested", addr, size, t, STACKS["tmp"]))
            entries.append(entry("free_completed", addr, size, t, STACKS["tmp"]))
            allocated -= size
            block.update(state="inactive", requested_size=0, frames=[])
        t += 30_000 - 8 * 2000 - len(freed) * 500
    return entries, segments, peak, peak_us, None


def main(out):
    starts = {0: T0, 1: T0 + 1_280_000, 2: T0 + 640_000}
    traces, segments, expect = [], [], {"devices": {}}
    for device in (0, 1, 2):
        entries, segs, peak, peak_us, oom_us = device_run(device, starts[device], LAYERS, 19 if device == 1 else None)
        traces.append(entries)
        segments.extend(segs)
        expect["devices"][f"cuda:{device}"] = {
            "first_us": entries[0]["time_us"], "peak_allocated_bytes": peak, "peak_allocated_time_us": peak_us,
            "oom_time_us": oom_us}
    # The origin of every time: the first entry of any device.
    expect["origin_us"] = min(e["time_us"] for entries in traces for e in entries[:1])
    snapshot = {"segments": segments, "device_traces": traces,
                "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1, "expandable_segments": False}}
    with open(out, "wb") as f:
        pickle.dump(snapshot, f, protocol=4)
    print(json.dumps(expect))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: forward_oom.py OUT.pickle")
    main(sys.argv[1])
