"""The reference's categories of a snapshot's blocks (parameter, gradient, optimizer state,
activation, unknown): the stack-frame rules, the blocks alive at the peak or after given entries,
and the model state named by the sizes of the blocks held from before the trace.
"""

from snapshot_replay import (
    block_requested,
    ends_activity,
    ends_allocation,
    frees_in_two_steps,
    held_blocks,
    iter_blocks,
    round_block,
)


# Stack-frame rules for blocks without tags, as DESIGN.md and vramscope's attribution state
# them: frames innermost first, each frame against the rules in order; the first match wins.
def _rule_category(filename, function):
    path = filename.replace("\\", "/")
    if "AccumulateGrad" in function:
        return "gradient"
    if "torch/optim/" in path:
        return "optimizer_state"
    if "torch::autograd::Engine" in function:
        return "gradient"
    if "torch/autograd/" in path and "backward" in function:
        return "gradient"
    if "torch/nn/modules/module.py" in path and "_apply" in function:
        return "parameter"
    if function == "forward" and path.endswith(".py"):
        return "activation"
    return None


def category_of(frames):
    for f in frames or []:
        c = _rule_category(f.get("filename", ""), f.get("name", ""))
        if c is not None:
            return c
    return "unknown"


def categories_at_peak(trace, segments):
    """Bytes by category of the blocks alive when allocated memory first reaches its peak."""
    return categories_at(trace, segments, None)[None]


def categories_at(trace, segments, targets):
    """Bytes by category of the blocks alive right after each entry index in `targets` (-1:
    before the first), or with `targets` None at the first instant allocated memory peaks
    (under the key None).

    The live set follows the same rules as replay(): blocks the program freed in the window
    without their alloc were alive from the start (no stack), final 'active_allocated' blocks
    without an open alloc were too (with the block's own frames), and each alloc is live until
    the program frees it (free_requested, or the one free of a trace without them).
    """
    two_step = frees_in_two_steps(trace)
    final_held = held_blocks(segments)
    open_alloc = {}   # allocs that still hold their block at the end (for exact sizes)
    seen = set()
    pre = {}
    for i, e in enumerate(trace):
        action = e["action"]
        if action == "alloc":
            open_alloc[e["addr"]] = i
            seen.add(e["addr"])
        elif ends_allocation(action, two_step):
            if e["addr"] not in seen and e["addr"] not in pre:
                pre[e["addr"]] = (round_block(e["size"]), [])
            seen.add(e["addr"])
            if ends_activity(action):
                open_alloc.pop(e["addr"], None)
        elif ends_activity(action):
            seen.add(e["addr"])
            open_alloc.pop(e["addr"], None)
    open_at_end = set(open_alloc.values())
    live = dict(pre)
    for seg in segments:
        for addr, block in iter_blocks(seg):
            if block["state"] == "active_allocated" and addr not in open_alloc and addr not in live:
                # Older snapshots keep the current allocation's frames first in `history`.
                frames = block.get("frames")
                if frames is None and block.get("history"):
                    frames = block["history"][0].get("frames")
                live[addr] = (block["size"], frames or [])
    total = sum(size for size, _ in live.values())
    best, best_live = total, dict(live)
    kept = {}
    if targets is not None and -1 in targets:
        kept[-1] = dict(live)
    for i, e in enumerate(trace):
        action = e["action"]
        if action == "alloc":
            held = final_held.get(e["addr"]) if i in open_at_end else None
            size = held["size"] if held is not None else round_block(e["size"])
            live[e["addr"]] = (size, e.get("frames") or [])
            total += size
        elif ends_allocation(action, two_step):
            entry = live.pop(e["addr"], None)
            if entry is not None:
                total -= entry[0]
        if targets is not None and i in targets:
            kept[i] = dict(live)
        if targets is None and total > best:
            best, best_live = total, dict(live)
    if targets is None:
        kept = {None: best_live}
    named = model_state_by_size(trace, segments, open_alloc)
    result = {}
    for key, alive in kept.items():
        out = {}
        for addr, (size, frames) in alive.items():
            c = category_of(frames)
            if c == "unknown" and addr in named:
                c = named[addr]
            out[c] = out.get(c, 0) + size
        result[key] = {k: v for k, v in sorted(out.items()) if v > 0}
    return result


def model_state_by_size(trace, segments, open_at_end):
    """Blocks held from before the trace to its end named by their sizes: address -> category.

    DESIGN.md's rule, from how PyTorch keeps a model: one gradient per parameter, and an
    optimizer's state as so many tensors of each parameter's size. When the gradients (by the
    stack rules) are most in requested bytes, take how many of each requested size are alive; a
    size the blocks from before the trace hold r times as often (the same r for nine tenths of
    the gradients' bytes, at least 4 blocks) is a parameter and r - 1 state tensors a gradient:
    blocks the stack rules name keep their names, and of the rest the lowest addresses are the
    parameters. Without gradients: a size held by half as many blocks as optimizer state tensors
    (Adam's two moments) names those blocks parameters.
    """
    two_step = frees_in_two_steps(trace)
    held = {}
    for seg in segments:
        for addr, block in iter_blocks(seg):
            if block["state"] == "active_allocated" and addr not in open_at_end:
                frames = block.get("frames")
                if frames is None and block.get("history"):
                    frames = block["history"][0].get("frames")
                held.setdefault(block_requested(block), []).append((addr, category_of(frames)))

    def most_alive(category):
        alive, counts, total, most, at_most = {}, {}, 0, 0, {}
        for e in trace:
            if e["action"] == "alloc" and category_of(e.get("frames")) == category:
                alive[e["addr"]] = e["size"]
                counts[e["size"]] = counts.get(e["size"], 0) + 1
                total += e["size"]
                if total > most:
                    most, at_most = total, {k: v for k, v in counts.items() if v}
            elif ends_allocation(e["action"], two_step) and e["addr"] in alive:
                size = alive.pop(e["addr"])
                counts[size] -= 1
                total -= size
        return most, at_most

    most, at_most = most_alive("gradient")
    by_ratio = {}
    for size, n in at_most.items():
        h = len(held.get(size, []))
        if n and h and h % n == 0:
            by_ratio[h // n] = by_ratio.get(h // n, 0) + size * n
    if by_ratio and most:
        ratio, explained = max(by_ratio.items(), key=lambda kv: (kv[1], -kv[0]))
        if explained * 10 >= most * 9:
            named = {}
            for size, n in at_most.items():
                blocks = held.get(size, [])
                if len(blocks) != n * ratio:
                    continue
                want_p = n - sum(1 for _, c in blocks if c == "parameter")
                want_s = n * (ratio - 1) - sum(1 for _, c in blocks if c == "optimizer_state")
                unknown = sorted(a for a, c in blocks if c == "unknown")
                if want_p < 0 or want_s < 0 or len(unknown) != want_p + want_s:
                    continue
                named.update((a, "parameter") for a in unknown[:want_p])
                named.update((a, "optimizer_state") for a in unknown[want_p:])
            if len(named) >= 4:
                return named
    most, at_most = most_alive("optimizer_state")
    matched = {}
    for size, n in at_most.items():
        unknown = [a for a, c in held.get(size, []) if c == "unknown"]
        if unknown and len(unknown) * 2 == n:
            matched.update((a, size) for a in unknown)
    if len(matched) >= 4 and most // 2 > 0 and sum(matched.values()) * 10 >= (most // 2) * 9:
        return {a: "parameter" for a in matched}
    return {}
