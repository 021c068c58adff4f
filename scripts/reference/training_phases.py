"""The reference's phases of a training step: the rules analysis/src/phases.rs states in its
documentation, written again here from the words, not the code. Forward, backward and the
optimizer step are told by ranges named like them or else by each allocation's frames, and each
has the high point of allocated memory in it. Snapshots and chrome traces share the windows and
the high points.
"""


def _phase_of_range(name):
    if name.startswith("Optimizer.step#"):
        return "optimizer_step"
    if name.startswith("autograd::engine::evaluate_function"):
        return "backward"
    plain = "".join(c if c.isalnum() else "_" for c in name.strip().lower()).strip("_")
    if plain in ("forward", "forward_pass", "fwd", "model_forward"):
        return "forward"
    if plain in ("backward", "backward_pass", "bwd", "loss_backward"):
        return "backward"
    if plain in ("optimizer_step", "optimizer", "optim_step", "opt_step"):
        return "optimizer_step"
    return None


def _frames_phase(frames):
    """'optimizer_step' / 'backward' by the innermost frame that tells one, else 'forward' when
    a Python forward is on the stack; 'empty' without frames, None otherwise."""
    if not frames:
        return "empty"
    forward = False
    for f in frames:
        path = f.get("filename", "").replace("\\", "/")
        name = f.get("name", "")
        if "torch/optim/" in path:
            return "optimizer_step"
        if ("torch::autograd::Engine" in name or "_engine_run_backward" in name
                or ("torch/autograd/" in path and name == "backward")
                or (path.endswith("torch/utils/checkpoint.py")
                    and name in ("unpack_hook", "recompute_fn", "backward", "unpack"))):
            return "backward"
        if name == "forward" and path.endswith(".py"):
            forward = True
    return "forward" if forward else None


def _ranges(annotations):
    """Phase ranges (start_us, end_us, phase) from START/END pairs of external annotations."""
    open_at, out = {}, []
    for a in sorted(annotations, key=lambda a: a.get("time_us", 0)):
        phase = _phase_of_range(a.get("name", ""))
        if phase is None:
            continue
        if a.get("stage") == "START":
            open_at.setdefault(a["name"], []).append(a["time_us"])
        elif a.get("stage") == "END" and open_at.get(a["name"]):
            out.append((open_at[a["name"]].pop(), a["time_us"], phase))
    return sorted(out)


def _merge_ranges(ranges):
    """Overlapping ranges of one phase are one; so are backward ranges (a profiler's backward
    operators) one after another when the gap is at most 100 us or a quarter of the backward so
    far."""
    out = []
    for start, end, phase in sorted(ranges):
        if out and out[-1][2] == phase and (start <= out[-1][1] or (
                phase == "backward" and start - out[-1][1] <= max(100, (out[-1][1] - out[-1][0]) / 4))):
            out[-1] = (out[-1][0], max(out[-1][1], end), phase)
        else:
            out.append((start, end, phase))
    return out


def phase_windows(allocs, entries, ranges, iterations, python_only):
    """The phases over a device's entries: `allocs` lists (entry index, time, frames label) of
    each allocation, `ranges` the phase-named ranges (start, end, phase), `iterations` the
    profiler's step ranges. Returns windows {iteration, phase, first, last} over entry
    indices, micro-batches of one iteration taken together."""
    ranges = _merge_ranges(ranges)
    iterations = sorted(iterations)

    def in_range(t):
        # The range that started last at or before t, if it still runs at t.
        started = [r for r in ranges if r[0] <= t]
        return started[-1][2] if started and t <= started[-1][1] else None

    def step_ended(t):
        ends = [end for start, end, phase in ranges if phase == "optimizer_step" and start <= t]
        return bool(ends) and t > max(ends)

    def iteration_at(t):
        return sum(1 for start, _ in iterations if start <= t)

    starts = []  # (entry index, phase)
    current, last_span = None, 0
    for i, t, frames_label in allocs:
        label = in_range(t) or frames_label
        span = iteration_at(t)
        new_span = bool(iterations) and span != last_span
        last_span = span
        if label in ("forward", "backward", "optimizer_step"):
            new = label
        elif label == "empty" and python_only and current in ("forward", "backward"):
            new = "backward"
        elif new_span:
            new = "forward"
        elif current == "optimizer_step" and label is None:
            new = "forward"
        elif current == "optimizer_step" and label == "empty" and step_ended(t):
            new = "forward"
        else:
            new = current
        if new is not None and (new != current or new_span):
            starts.append((i, new, t))
            current = new
    if starts and starts[0][1] == "backward" and starts[0][0] > 0:
        starts.insert(0, (0, "forward", None))
    has_step = any(p == "optimizer_step" for _, p, _ in starts)
    windows = []
    iteration, previous = 0, None
    for k, (first, phase, t) in enumerate(starts):
        last = starts[k + 1][0] - 1 if k + 1 < len(starts) else entries - 1
        if iterations:
            iteration = max(1, iteration_at(t if t is not None else iterations[0][0]))
        elif (previous is None or (previous == "optimizer_step" and phase in ("forward", "backward"))
                or (previous == "backward" and phase == "forward" and not has_step)):
            iteration += 1
        previous = phase
        same = [w for w in windows if w["iteration"] == iteration and w["phase"] == phase]
        if same:
            same[0]["first"] = min(same[0]["first"], first)
            same[0]["last"] = max(same[0]["last"], last)
        else:
            windows.append({"iteration": iteration, "phase": phase, "first": first, "last": last})
    return windows


def phase_highs(windows, after, before, time_of):
    """The high point of each window and of each iteration: the most allocated after any of
    its entries or when it opens (after the entry before it). `_at` is the entry index."""
    def high(first, last):
        best, best_at = (after[first - 1] if first > 0 else before), first - 1
        for i in range(first, last + 1):
            if after[i] > best:
                best, best_at = after[i], i
        return best, time_of(max(best_at, 0)), best_at

    out = []
    for w in windows:
        bytes_, time, at = high(w["first"], w["last"])
        out.append({"iteration": w["iteration"], "phase": w["phase"], "high_bytes": bytes_,
                    "high_time_us": time, "_at": at})
    for it in sorted({w["iteration"] for w in windows}):
        mine = [w for w in windows if w["iteration"] == it]
        bytes_, time, at = high(min(w["first"] for w in mine), max(w["last"] for w in mine))
        out.append({"iteration": it, "phase": None, "high_bytes": bytes_, "high_time_us": time, "_at": at})
    return out


def phases(trace, annotations, after, before):
    """A snapshot's phases and their high points. Snapshots carry no recorded phase spans:
    phase-named external annotations label what they cover, each allocation's frames the rest."""
    if not trace:
        return []
    python_only = None
    for e in trace:
        if e["action"] != "alloc":
            continue
        for f in e.get("frames") or []:
            if f.get("filename", "").endswith(".py"):
                python_only = True if python_only is None else python_only
            else:
                python_only = False
    allocs = [(i, e.get("time_us", i), _frames_phase(e.get("frames")))
              for i, e in enumerate(trace) if e["action"] == "alloc"]
    windows = phase_windows(allocs, len(trace), _ranges(annotations), [], bool(python_only))
    return phase_highs(windows, after, before, lambda i: trace[i].get("time_us", i))
