#!/usr/bin/env python3
"""Writes PyTorch profiler Chrome traces of the vintages a real machine cannot make here (no GPU,
no ROCm, no old PyTorch), each in the shape its writer's source gives, and a manifest of what
vramscope must read from each: numbers counted by hand from the events written below, or the
error it must give.

    python3 chrome_vintages.py OUT_DIR      -> OUT_DIR/*.json[.gz], OUT_DIR/manifest.json

Sources of each shape (facts only; the files are written from scratch here):

* PyTorch 1.9, the first kineto memory events: torch/csrc/autograd/profiler_kineto.cpp at
  pytorch/pytorch@000455d7ccf574a69f3b4305f82d8105ea5396f6 adds only "Device Type", "Device Id"
  and "Bytes" to a CPU_INSTANT_EVENT named "[memory]"; kineto's writer of that era emits
  {"ph": "i", "s": "t", "name", "pid", "tid", "ts", "args"} with no "cat", integer microseconds.
* Current kineto: libkineto/src/output_json.cpp at
  pytorch/kineto@002d99198b93aa6eed09014a7c8b4959eb545372 ("cat": "cpu_instant_event",
  ts "{us}.{ns:03}" relative to "baseTimeNanoseconds", "displayTimeUnit", "deviceProperties",
  "distributedInfo" near the end) and the arguments of profiler_kineto.cpp at
  pytorch/pytorch@dbe015fe5fba7ebf5ff669e1c68bcd43dbe6e331 ("Device Type", "Device Id",
  "Addr", "Bytes", "Total Allocated", "Total Reserved", then "Ev Idx"; "[OutOfMemory]" has the
  same keys without "Addr"). Device Type is c10::DeviceType (c10/core/DeviceType.h at
  pytorch/pytorch@1e595cc245d9ec894f2fc63798cd24ceda0422ac): 1 CUDA, 6 HIP (what ROCm builds
  report, pytorch/pytorch#171318), 12 XPU.
* distributedInfo: torch/profiler/profiler.py _get_distributed_info at
  pytorch/pytorch@0015978cdddb8676ae59fbfb2586c45b0eed87ad (backend, rank, world_size, pg_count,
  pg_config, nccl_version); prof.add_metadata(key, value) lands as a top-level string.
* PaddlePaddle's profiler also names events "[memory]", with its own arguments:
  paddle/fluid/platform/profiler/chrometracing_logger.cc at
  PaddlePaddle/Paddle@d05f1b29d2dc6116f16d3d66cc3864eaaeea5687.

Standard library only.
"""

import gzip
import json
import os
import sys

MIB = 1 << 20


def memory(ts, device_type, device_id, nbytes, addr=None, total_allocated=None, total_reserved=None,
           index=None, name="[memory]", cat="cpu_instant_event", pid=4242, tid=4243):
    """A current-kineto memory event (arguments in profiler_kineto.cpp's order)."""
    args = {"Device Type": device_type, "Device Id": device_id}
    if addr is not None:
        args["Addr"] = addr
    args["Bytes"] = nbytes
    if total_allocated is not None:
        args["Total Allocated"] = total_allocated
    if total_reserved is not None:
        args["Total Reserved"] = total_reserved
    if index is not None:
        args["Ev Idx"] = index
    event = {"ph": "i"}
    if cat is not None:
        event["cat"] = cat
    event.update({"s": "t", "name": name, "pid": pid, "tid": tid, "ts": ts, "args": args})
    return event


def op(ts, dur, name, cat="cpu_op"):
    return {"ph": "X", "cat": cat, "name": name, "pid": 4242, "tid": 4243, "ts": ts, "dur": dur,
            "args": {"External id": 1, "Ev Idx": 0}}


class Allocator:
    """Running totals the way the caching allocator reports them, so the events are consistent."""

    def __init__(self, device_type, device_id, allocated=0, reserved=0):
        self.device_type, self.device_id = device_type, device_id
        self.allocated, self.reserved = allocated, reserved
        self.peak = allocated
        self.index = 0

    def event(self, ts, addr, nbytes, reserve=0):
        self.allocated += nbytes
        self.reserved += reserve
        self.peak = max(self.peak, self.allocated)
        self.index += 1
        return memory(ts, self.device_type, self.device_id, nbytes, addr, self.allocated, self.reserved,
                      self.index)


def kineto_document(events, extra_head=None, extra_tail=None, base_ns=1_700_000_000_000_000_000):
    doc = {"schemaVersion": 1, "deviceProperties": []}
    doc.update(extra_head or {})
    doc.update({"displayTimeUnit": "ms", "baseTimeNanoseconds": base_ns, "traceEvents": events})
    doc.update(extra_tail or {})
    doc["traceName"] = "/tmp/trace.json"
    return doc


def write(out_dir, name, doc, compress=False):
    path = os.path.join(out_dir, name)
    data = json.dumps(doc, indent=1).encode()
    if compress:
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        with open(path, "wb") as f:
            f.write(data)
    return name


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    manifest = []

    # --- PyTorch 1.9: Bytes, Device Type and Device Id only; integer ts; no cat. -------------
    # GPU: a free of 512 bytes allocated before the trace, then +2048, +4096, -2048, +1024.
    # The running sum -512, 1536, 5632, 3584, 4608 shows at least 512 bytes alive at the start:
    # lifted by 512 the curve is 0, 2048, 6144, 4096, 5120.
    gpu = [(1000, -512), (1010, 2048), (1020, 4096), (1030, -2048), (1040, 1024)]
    cpu = [(1005, 4096), (1035, -4096)]
    events = [{"ph": "X", "cat": "Operator", "name": "aten::mm", "pid": 31, "tid": 31, "ts": 999, "dur": 50}]
    for ts, nbytes in gpu:
        events.append(memory(ts, 1, 0, nbytes, cat=None, pid=31, tid=31))
    for ts, nbytes in cpu:
        events.append(memory(ts, 0, -1, nbytes, cat=None, pid=31, tid=31))
    events.sort(key=lambda e: e["ts"])
    name = write(out_dir, "torch1.9_kineto_no_addresses.json", {"schemaVersion": 1, "traceEvents": events})
    manifest.append({"file": name, "devices": [
        {"label": "host", "peak_allocated_bytes": 4096, "allocated_bytes": 0},
        {"label": "cuda:0", "peak_allocated_bytes": 6144, "allocated_bytes": 5120},
    ], "note": "memory allocated before the profiler started is not seen"})

    # --- ROCm: Device Type 6 (HIP), gzipped as tensorboard_trace_handler(use_gzip=True) writes.
    hip = Allocator(6, 0, allocated=0, reserved=0)
    events = [op(10.0, 100.0, "aten::empty")]
    events.append(hip.event(10.125, 0x7F0000000000, 2 * MIB, reserve=20 * MIB))
    events.append(hip.event(20.5, 0x7F0000200000, 8 * MIB))
    events.append(hip.event(30.75, 0x7F0000200000, -8 * MIB))
    events.append(hip.event(40.001, 0x7F0000A00000, 1 * MIB))
    props = [{"id": 0, "name": "AMD Instinct MI250X", "totalGlobalMem": 68702699520,
              "maxSharedMemoryPerMultiProcessor": 65536, "warpSize": 64}]
    doc = kineto_document(events, {"deviceProperties": props})
    name = write(out_dir, "rocm_mi250.pt.trace.json.gz", doc, compress=True)
    manifest.append({"file": name, "wrapped_in": ["gzip"], "devices": [
        {"label": "hip:0", "peak_allocated_bytes": hip.peak, "allocated_bytes": hip.allocated,
         "peak_reserved_bytes": 20 * MIB},
    ]})

    # --- A DDP rank: device 3, memory allocated before profiling began, an OOM, distributedInfo,
    # user metadata, ns display unit, integer and fractional ts mixed. --------------------------
    before = 10 * MIB
    rank = Allocator(1, 3, allocated=before, reserved=22 * MIB)
    events = [op(5, 60, "ProfilerStep#7", cat="user_annotation")]
    events.append(rank.event(6, 0x7E0000000000, 4 * MIB))
    events.append(rank.event(7.5, 0x7E0000400000, 6 * MIB))
    # A block allocated before the trace is freed: the totals already count it.
    events.append(rank.event(8.25, 0x7D0000000000, -2 * MIB))
    oom = memory(9, 1, 3, 64 * MIB, None, rank.allocated, rank.reserved, 99, name="[OutOfMemory]")
    events.append(oom)
    events.append(rank.event(10, 0x7E0000400000, -6 * MIB))
    distributed = {"backend": "nccl", "rank": 3, "world_size": 8, "pg_count": 1,
                   "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
                                  "pg_size": 8, "ranks": list(range(8))}], "nccl_version": "2.21.5"}
    doc = kineto_document(events, {"run_name": "exp7", "with_stack": 1, "profile_memory": 1},
                          {"distributedInfo": distributed})
    doc["displayTimeUnit"] = "ns"
    name = write(out_dir, "rank3.Jul_15_10_52_41.1074.pt.trace.json", doc)
    manifest.append({"file": name, "rank": 3, "oom_events": 1, "metadata": {"run_name": "exp7"}, "devices": [
        {"label": "cuda:3", "peak_allocated_bytes": before + 10 * MIB, "allocated_bytes": before + 2 * MIB},
    ]})

    # --- A DDP rank of PyTorch 1.13 (kineto of late 2022): integer microseconds, "Ev Idx" first,
    # and the events written thread by thread, not in time order: the autograd engine's thread
    # (backward, later) before the main thread (forward, earlier). 3 GiB was allocated before the
    # profiler started; the main thread frees 512 MiB of it. Ties: an alloc and the free of the
    # same block in one microsecond, written free first. The allocated curve must be the totals
    # after every event: peak = the most the totals say, end = the last total.
    GIB = 1 << 30
    rank = Allocator(1, 1, allocated=3 * GIB, reserved=12 * GIB)
    main_thread, backward_thread = [], []

    def ev(ts, addr, nbytes, tid):
        e = rank.event(ts, addr, nbytes)
        args = e["args"]
        e["args"] = {"Ev Idx": args.pop("Ev Idx"), **args}
        e["ts"] = int(ts)
        e["tid"] = tid
        return e

    # Forward on the main thread: activations, then a pre-trace block freed.
    for k in range(40):
        main_thread.append(ev(1000 + 10 * k, 0x7F0000000000 + k * 0x4000000, 48 * MIB, 1))
    main_thread.append(ev(1400, 0x7E0000000000, -512 * MIB, 1))
    # Backward on the engine's thread: gradients, and activations freed; an alloc and its free
    # in the same microsecond, the free written first.
    for k in range(40):
        backward_thread.append(ev(2000 + 10 * k, 0x7F0000000000 + k * 0x4000000, -48 * MIB, 2))
        backward_thread.append(ev(2000 + 10 * k + 5, 0x7C0000000000 + k * 0x2000000, 24 * MIB, 2))
    alloc_tie = ev(2500, 0x7B0000000000, 256 * MIB, 2)
    free_tie = ev(2500, 0x7B0000000000, -256 * MIB, 2)
    backward_thread.extend([free_tie, alloc_tie])
    events = [op(900, 2000, "ProfilerStep#3", cat="user_annotation")] + backward_thread + main_thread
    distributed = {"backend": "nccl", "rank": 1, "world_size": 2}
    doc = {"schemaVersion": 1, "deviceProperties": [], "distributedInfo": distributed,
           "profile_memory": 1, "traceEvents": events, "traceName": "rank-1.json"}
    name = write(out_dir, "torch1.13_ddp_rank1_thread_order.json.gz", doc, compress=True)
    manifest.append({"file": name, "rank": 1, "wrapped_in": ["gzip"], "devices": [
        {"label": "cuda:1", "peak_allocated_bytes": rank.peak, "allocated_bytes": rank.allocated},
    ]})

    # --- Memory the totals count and no event reports: a thread the profiler did not follow
    # allocates 100 MiB (totals jump), frees 60 MiB of it; a block the trace allocated and never
    # frees is freed where no event says so (the totals drop by exactly its size); last, the
    # totals drop by 3 MiB that no block alive accounts for (the curve stays above from then on).
    ghost = Allocator(1, 0, allocated=0, reserved=64 * MIB)
    events = [ghost.event(10, 0x7A0000000000, 8 * MIB)]
    ghost.allocated += 100 * MIB
    ghost.peak = max(ghost.peak, ghost.allocated)
    events.append(ghost.event(20, 0x7A0000800000, 16 * MIB))
    ghost.allocated -= 60 * MIB
    events.append(ghost.event(30, 0x7A0001800000, 4 * MIB))
    ghost.allocated -= 16 * MIB  # the 16 MiB block's free, unreported
    events.append(ghost.event(40, 0x7A0001C00000, 2 * MIB))
    ghost.allocated -= 40 * MIB  # the rest of the unreported memory goes
    events.append(ghost.event(50, 0x7A0002000000, 1 * MIB))
    ghost.allocated -= 3 * MIB   # and 3 MiB more that no block alive matches
    events.append(ghost.event(60, 0x7A0002100000, 1 * MIB))
    events.append(ghost.event(70, 0x7A0002200000, 1 * MIB))
    doc = kineto_document(events)
    name = write(out_dir, "unreported_thread.pt.trace.json", doc)
    # Up to the 3 MiB drop the curve is the totals; after it, 3 MiB above them.
    manifest.append({"file": name, "note": "do not add up to its running totals", "devices": [
        {"label": "cuda:0", "peak_allocated_bytes": ghost.peak, "allocated_bytes": ghost.allocated + 3 * MIB},
    ]})

    # --- Intel XPU (Device Type 12), as a bare list of events (Chrome's JSON array format). ----
    xpu = Allocator(12, 0)
    events = [xpu.event(1.0, 0xFF00000000, 3 * MIB, reserve=4 * MIB), xpu.event(2.0, 0xFF00000000, -3 * MIB)]
    name = write(out_dir, "xpu_array.json", events)
    manifest.append({"file": name, "devices": [
        {"label": "xpu:0", "peak_allocated_bytes": 3 * MIB, "allocated_bytes": 0},
    ]})

    # --- PaddlePaddle's [memory] events: refused as another framework's. ----------------------
    paddle_event = {"name": "[memory]", "pid": 77, "tid": "77(C++)", "ts": 100, "ph": "i", "cat": "Allocate",
                    "args": {"place": "Place(gpu:0)", "addr": "140000000000", "increase_bytes": 1024,
                             "current_allocated": 1024, "current_reserved": 2097152, "peak_allocated": 1024,
                             "peak_reserved": 2097152}}
    doc = {"schemaVersion": "1.0.0", "displayTimeUnit": "ms", "span_indx": "0", "traceEvents": [paddle_event]}
    name = write(out_dir, "paddle_profiler.json", doc)
    manifest.append({"file": name, "error": "PaddlePaddle"})

    # --- PyTorch, recorded without profile_memory: no memory events at all. --------------------
    doc = kineto_document([op(1, 10, "aten::linear"), op(2, 5, "aten::addmm")])
    name = write(out_dir, "no_profile_memory.pt.trace.json", doc)
    manifest.append({"file": name, "error": "profile_memory=True"})

    # --- A Chrome trace of something else (Chrome's own about:tracing): not PyTorch's. --------
    doc = {"traceEvents": [{"name": "ThreadControllerImpl::RunTask", "cat": "toplevel", "ph": "X", "ts": 1,
                            "dur": 3, "pid": 1, "tid": 2, "args": {}}]}
    name = write(out_dir, "chrome_browser.json", doc)
    manifest.append({"file": name, "error": "not from PyTorch's profiler"})

    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: chrome_vintages.py OUT_DIR")
    main(sys.argv[1])
