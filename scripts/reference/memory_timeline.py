"""The reference's numbers for the PyTorch profiler's memory timeline: the coalesced export
([times_us, rows]) as it is, the raw export replayed into the same rows, and the peak and the
categories at it.
"""

# Column order of each row after the leading 0 (raw files use index - 1). It is
# the insertion order of _CATEGORY_TO_COLORS in torch/profiler/_memory_profiler.py,
# with None (unknown) last -- not the declaration order of the Category enum.
CATEGORIES = [
    "parameter",
    "optimizer_state",
    "input",
    "temporary",
    "activation",
    "gradient",
    "autograd_detail",
    "unknown",
]


def ns_to_us(t_ns):
    """PyTorch converts with int(t / 1000): true division to a float, then
    truncation. At today's epoch nanoseconds the float cannot hold the exact
    quotient, so this differs from t // 1000 for a good share of timestamps;
    keep Python's exact semantics so coalesced rows match the .json export."""
    return int(t_ns / 1000)


def coalesce_raw(raw):
    """Replay the raw export into the rows export_memory_timeline writes.

    Mirrors MemoryProfileTimeline._coalesce_timeline: events with the same
    (microsecond) time share a row, a row is a copy of the previous one plus
    the changes, and the -1 time of pre-existing tensors is replaced at the end
    by the smallest positive time seen (with PyTorch's own t_min bookkeeping).
    Raw rows already carry signed byte counts (DESTROY and the old version of
    an INCREMENT_VERSION are negative), so every action is a plain add.
    """
    times, rows = [], []
    t_min = -1
    for t, _action, nbytes, category in raw:
        if t != -1:
            t = ns_to_us(t)
        if t_min == -1 or (0 < t < t_min):
            t_min = t
        if not times:
            times.append(t)
            rows.append([0] * (len(CATEGORIES) + 1))
        elif t != times[-1]:
            times.append(t)
            rows.append(list(rows[-1]))
        rows[-1][category + 1] += nbytes
    times = [t_min if t < 0 else t for t in times]
    return times, rows


def analyze_timeline(times, rows, layout):
    def by_name(row):
        return {name: row[i + 1] for i, name in enumerate(CATEGORIES)}

    peak = None
    peak_index = None
    for i, row in enumerate(rows):
        total = sum(row)
        if peak is None or total > peak:
            peak, peak_index = total, i
    return {
        "format": "memory-timeline",
        "layout": layout,
        "samples": len(rows),
        "peak_total_bytes": peak if peak is not None else 0,
        "peak_time_us": times[peak_index] if peak_index is not None else None,
        "categories_at_peak": by_name(rows[peak_index]) if peak_index is not None else None,
        "final_categories": by_name(rows[-1]) if rows else None,
    }
