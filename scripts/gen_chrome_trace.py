#!/usr/bin/env python3
"""Generate a large PyTorch profiler Chrome trace for benchmarks (current kineto shape).

    python3 gen_chrome_trace.py EVENTS OUT.json

EVENTS `[memory]` instant events of one CUDA device (random allocs and frees of up to 1 MiB, at
most 5,000 alive, with the running `Total Allocated`), one `cpu_op` event with shapes per ten of
them, in the event layout of libkineto's JSON writer. Standard library only.
"""
import json
import random
import sys

n = int(sys.argv[1]); out = sys.argv[2]
rng = random.Random(1)
with open(out, "w") as f:
    f.write('{"schemaVersion": 1, "deviceProperties": [], "displayTimeUnit": "ms", "baseTimeNanoseconds": 1700000000000000000, "traceEvents": [\n')
    live = []; total = 0; t = 0.0
    for i in range(n):
        t += 0.5
        if live and (rng.random() < 0.5 or len(live) > 5000):
            addr, size = live.pop(rng.randrange(len(live))); total -= size; b = -size
        else:
            addr = 0x7f0000000000 + i * 4096; size = rng.randint(1, 1 << 20); live.append((addr, size)); total += size; b = size
        f.write(json.dumps({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": round(t, 3),
            "args": {"Total Reserved": 0, "Total Allocated": total, "Bytes": b, "Addr": addr, "Device Id": 0, "Device Type": 1, "Ev Idx": i}}))
        f.write(",\n")
        if i % 10 == 0:
            f.write(json.dumps({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": round(t, 3), "dur": 0.3,
                "args": {"External id": i, "Record function id": 0, "Input Dims": [[64, 256], [256, 1024]], "Input type": ["float", "float"], "Ev Idx": i}}))
            f.write(",\n")
    f.write('{"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": %s}\n]}\n' % (t + 1))
