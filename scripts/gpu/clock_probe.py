"""Which clock PyTorch's allocator history uses: prints a trace entry's time_us beside
time.time_ns() and time.monotonic_ns() taken around the allocation (GPU only)."""
import json
import time

import torch

torch.cuda.memory._record_memory_history(max_entries=1000)
before = (time.time_ns(), time.monotonic_ns())
x = torch.empty(1 << 20, device="cuda")
after = (time.time_ns(), time.monotonic_ns())
snapshot = torch.cuda.memory._snapshot()
entries = [e for trace in snapshot["device_traces"] for e in trace]
print(json.dumps({
    "before_time_ns": before[0], "before_monotonic_ns": before[1],
    "after_time_ns": after[0], "after_monotonic_ns": after[1],
    "entries": [{k: e.get(k) for k in ("action", "addr", "size", "time_us")} for e in entries],
    "keys": sorted(entries[-1].keys()) if entries else [],
}))
del x
