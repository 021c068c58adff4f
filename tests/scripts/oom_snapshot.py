"""A snapshot made by hand, as PyTorch writes one, whose last allocation fails: 12 MiB allocated
in a 20 MiB segment, then 64 MiB asked with 1 MiB free on the device. The tests that read it know
its numbers from here, not from vramscope."""

import pickle


def write_oom_snapshot(path):
    """A snapshot as PyTorch writes it: a block, then an allocation that fails."""
    mb = 1 << 20
    frames = [{"name": "forward", "filename": "model.py", "line": 7}, {"name": "<module>", "filename": "train.py", "line": 3}]

    def event(action, addr, size, t, **kw):
        return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t, "frames": frames, **kw}

    base = 0x7F0000000000
    trace = [
        event("segment_alloc", base, 20 * mb, 100),
        event("alloc", base, 8 * mb, 110),
        event("alloc", base + 8 * mb, 4 * mb, 120),
        event("oom", 0, 64 * mb, 130, device_free=mb),
    ]
    blocks = [
        {"address": base, "size": 8 * mb, "requested_size": 8 * mb, "state": "active_allocated", "frames": frames},
        {"address": base + 8 * mb, "size": 4 * mb, "requested_size": 4 * mb, "state": "active_allocated", "frames": frames},
        {"address": base + 12 * mb, "size": 8 * mb, "requested_size": 0, "state": "inactive", "frames": []},
    ]
    segment = {"device": 0, "address": base, "total_size": 20 * mb, "allocated_size": 12 * mb, "active_size": 12 * mb,
               "requested_size": 12 * mb, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
               "is_expandable": False, "frames": frames, "blocks": blocks}
    with open(path, "wb") as f:
        pickle.dump({"segments": [segment], "device_traces": [trace]}, f, protocol=4)
    return path
