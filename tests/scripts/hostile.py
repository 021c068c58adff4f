#!/usr/bin/env python3
"""Writes small files that used to take vramscope down or hang it, and a manifest of what it
must do with each: read it (with a warning) or refuse it with a message, within a time and a
memory limit. Python's pickler shares repeated objects through its memo by itself, which is how
a 2 MB file can name one 40,000-entry list 32,000 times.

    python3 hostile.py OUT_DIR      -> OUT_DIR/*, OUT_DIR/manifest.json

Each manifest entry: file, exit (0 or 2), expect (a substring of stderr), seconds and rss_mib
(the limits), the environment to run it in where it needs one (env), and what a quadratic or
copying importer would have cost. Standard library only.
"""

import gzip
import json
import os
import pickle
import struct
import sys

MIB = 1 << 20


def entry(i, addr=None, t=None):
    return {"action": "alloc", "addr": 0x7F0000000000 + 512 * i if addr is None else addr, "size": 512,
            "stream": 0, "time_us": i if t is None else t, "frames": []}


def segment(device, address, size, blocks):
    return {"device": device, "address": address, "total_size": size, "stream": 0, "segment_type": "large",
            "segment_pool_id": (0, 0), "is_expandable": False, "frames": [], "blocks": blocks}


def block(address, size, state="active_allocated"):
    return {"address": address, "size": size, "requested_size": size, "state": state, "frames": []}


def dump(out_dir, name, obj):
    with open(os.path.join(out_dir, name), "wb") as f:
        pickle.dump(obj, f, protocol=4)
    return name


def gigabyte_of_records(path, record):
    """A raw memory timeline of 1 GiB of one record repeated, in gzip."""
    with gzip.open(path, "wb", compresslevel=9) as f:
        f.write(b"[")
        chunk = (record + b", ") * (MIB // (len(record) + 2))
        for _ in range(1024):
            f.write(chunk)
        f.write(record + b"]")


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    manifest = []

    # One 40,000-entry list named by 32,000 devices' traces: copied, 1.28 billion entries.
    shared = [entry(i) for i in range(40_000)]
    name = dump(out_dir, "shared_device_traces.pickle", {"segments": [], "device_traces": [shared] * 32_000})
    manifest.append({"file": name, "exit": 0, "expect": "listed again", "seconds": 20, "rss_mib": 400})

    # One segment of 50,000 blocks named 20,000 times in `segments`: a billion blocks copied.
    base = 0x7E0000000000
    big = segment(0, base, 50_000 * 512, [block(base + 512 * i, 512) for i in range(50_000)])
    name = dump(out_dir, "repeated_segment.pickle", {"segments": [big] * 20_000, "device_traces": [[]]})
    manifest.append({"file": name, "exit": 0, "expect": "name a segment listed already", "seconds": 20,
                     "rss_mib": 400})

    # 20,000 segments sharing one block list of 50,000 blocks.
    blocks = [block(base + 512 * i, 512) for i in range(50_000)]
    segments = [segment(0, base + (1 << 32) * (k + 1), 50_000 * 512, blocks) for k in range(20_000)]
    name = dump(out_dir, "shared_block_list.pickle", {"segments": segments, "device_traces": [[]]})
    manifest.append({"file": name, "exit": 0, "expect": "name the block list of another segment", "seconds": 20,
                     "rss_mib": 600})

    # Blocks that share one history list of 100,000 entries (PyTorch 2.0 layout): each block
    # used to copy the list to read its first entry.
    history = [{"addr": base, "real_size": 512, "frames": []} for _ in range(100_000)]
    blocks = [{"size": 512, "state": "active_allocated", "history": history} for _ in range(30_000)]
    name = dump(out_dir, "shared_history.pickle", [segment(0, base, 30_000 * 512, blocks)])
    manifest.append({"file": name, "exit": 0, "expect": "", "seconds": 20, "rss_mib": 400})

    # 32,767 device slots over 300,000 segments, a trace on the first 127 of them: the builder
    # used to scan every segment for every slot (about 10 billion steps). Slot 200 holding an
    # entry is refused by name: PyTorch's device index is 8 bits.
    segments = [segment(k % 127, base + (k << 24), 2 * MIB, [block(base + (k << 24), 2 * MIB)])
                for k in range(300_000)]
    traces = [[entry(d, addr=base + (d << 24))] if d < 127 else [] for d in range(32_767)]
    name = dump(out_dir, "many_device_slots.pickle", {"segments": segments, "device_traces": traces})
    manifest.append({"file": name, "exit": 0, "expect": "", "seconds": 60, "rss_mib": 1500})
    traces = [[] for _ in range(32_767)]
    traces[200] = [entry(0)]
    name = dump(out_dir, "device_index_too_large.pickle", {"segments": [], "device_traces": traces})
    manifest.append({"file": name, "exit": 2, "expect": "PyTorch numbers devices 0 to 127", "seconds": 10,
                     "rss_mib": 200})

    # Memo stores at widely spaced indices: 4,000 LONG_BINPUTs a million apart (20 KB).
    body = bytearray(b"\x80\x04")
    for k in range(4_000):
        body += b"N" + b"r" + struct.pack("<I", (k + 1) * 1_000_000) + b"0"
    body += b"}."
    with open(os.path.join(out_dir, "memo_gaps.pickle"), "wb") as f:
        f.write(body)
    manifest.append({"file": "memo_gaps.pickle", "exit": 2, "expect": "beyond anything a pickle", "seconds": 10,
                     "rss_mib": 200})

    # A raw memory timeline of 1 GiB of valid records in a few MB of gzip: within what one layer
    # of gzip can hold, so it is read (parsed as it inflates), in bounded time and memory (alike
    # records in a row are kept as one).
    gigabyte_of_records(os.path.join(out_dir, "huge.raw.json.gz"), b"[1700000000000000000, 2, 4096, 3]")
    manifest.append({"file": "huge.raw.json.gz", "exit": 0, "expect": "it is shown as device 0", "seconds": 60,
                     "rss_mib": 200})

    # The same gigabyte in records of 11 bytes (97 million of them, 2 MB of gzip): read within
    # the 4 GiB address space the test gives, never an abort of the allocator.
    gigabyte_of_records(os.path.join(out_dir, "short.raw.json.gz"), b"[1,2,3,4]")
    manifest.append({"file": "short.raw.json.gz", "exit": 0, "expect": "it is shown as device 0", "seconds": 60,
                     "rss_mib": 200})
    # A memory timeline export ([times, rows]) of 300,000 rows, read within 128 MiB: each row is
    # read in place, not charged as a list of its own.
    rows = 300_000
    with open(os.path.join(out_dir, "rows.json"), "w") as f:
        f.write("[[" + ",".join(str(1_000_000 + t) for t in range(rows)) + "],[")
        f.write(",".join(f"[0,{t},0,0,0,{t % 977},0,0,0]" for t in range(rows)) + "]]")
    manifest.append({"file": "rows.json", "exit": 0, "env": {"VRAMSCOPE_MEMORY_LIMIT": "128M"},
                     "expect": "it is shown as device 0", "seconds": 30, "rss_mib": 400})
    # Records at distinct times (each one a sample) past the memory a read may take: refused,
    # naming what needed it.
    with gzip.open(os.path.join(out_dir, "distinct.raw.json.gz"), "wb", compresslevel=6) as f:
        f.write(b"[" + b"".join(b"[%d,2,4096,%d]," % (t, t % 8) for t in range(2_000_000)) + b"[0,2,1,0]]")
    manifest.append({"file": "distinct.raw.json.gz", "exit": 2, "env": {"VRAMSCOPE_MEMORY_LIMIT": "32M"},
                     "expect": "the raw memory timeline's records would take", "seconds": 30, "rss_mib": 200})

    # Wrong types at the top level: an error naming the field.
    for name, snap, expect in [
        ("segments_int", {"segments": 5, "device_traces": []}, "'segments' should be a list, found the integer 5"),
        ("segments_str", {"segments": "x", "device_traces": []}, "'segments' should be a list, found the string"),
        ("segments_dict", {"segments": {}, "device_traces": []}, "'segments' should be a list, found a dict"),
        ("traces_int", {"segments": [], "device_traces": 3}, "'device_traces' should be a list, found the integer 3"),
        ("traces_of_ints", {"segments": [], "device_traces": [1, 2]}, "'device_traces[0]' should be a list"),
        ("traces_dict", {"segments": [], "device_traces": {"cuda:0": [entry(0)]}},
         "'device_traces' should be a list, found a dict"),
    ]:
        manifest.append({"file": dump(out_dir, name + ".pickle", snap), "exit": 2, "expect": expect, "seconds": 10,
                         "rss_mib": 200})
    for name, doc, expect in [
        ("events_not_list", {"traceEvents": {"a": 1}}, "'traceEvents' is not a list"),
        ("base_time_text", {"traceEvents": [], "baseTimeNanoseconds": "soon"}, "baseTimeNanoseconds"),
    ]:
        with open(os.path.join(out_dir, name + ".json"), "w") as f:
            json.dump(doc, f)
        manifest.append({"file": name + ".json", "exit": 2, "expect": expect, "seconds": 10, "rss_mib": 200})

    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: hostile.py OUT_DIR")
    main(sys.argv[1])
