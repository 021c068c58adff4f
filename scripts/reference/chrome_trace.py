"""The reference's numbers for a chrome trace from the PyTorch profiler: the peaks of each
device's [memory] events (in time order) and the phases told by the profiler's ranges and steps.
"""

from training_phases import _phase_of_range, phase_highs, phase_windows


def analyze_chrome_trace(events):
    # Phase-named ranges and the profiler's steps (CPU ranges time the allocations the CPU
    # thread makes on every device).
    ranges, iterations = [], []
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        name, cat = e.get("name", ""), e.get("cat")
        start, end = e.get("ts", 0), e.get("ts", 0) + max(e.get("dur", 0) or 0, 0)
        if cat in ("user_annotation", "gpu_user_annotation") and name.startswith("ProfilerStep#"):
            iterations.append((start, end))
        elif cat in ("user_annotation", "gpu_user_annotation", "cpu_op"):
            phase = _phase_of_range(name)
            if phase is not None:
                ranges.append((start, end, phase))
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
        after = [args.get("Total Allocated", 0) for _, _, args in items]
        before = first.get("Total Allocated", 0) - first.get("Bytes", 0)
        allocs = [(k, ts, "empty") for k, (ts, _pos, args) in enumerate(items) if args.get("Bytes", 0) > 0]
        windows = phase_windows(allocs, len(items), ranges, iterations, False)
        found = phase_highs(windows, after, before, lambda k: items[k][0])
        for p in found:
            del p["_at"]
        devices.append({
            "phases": found,
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
