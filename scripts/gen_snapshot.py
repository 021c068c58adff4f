#!/usr/bin/env python3
"""Generate a synthetic PyTorch memory snapshot pickle for benchmarks.

    python3 gen_snapshot.py --entries N --out FILE [--seed S] [--protocol 4]

The output has the shape of torch.cuda.memory._dump_snapshot() files:

  * top-level keys in PyTorch's order: segments, device_traces,
    allocator_settings, external_annotations;
  * trace entries {action, addr, size, stream, time_us, frames} produced by a
    small model of the CUDA caching allocator (best-fit reuse of cached blocks,
    block splitting with the real split thresholds, 2 MiB / 20 MiB / rounded
    segments, occasional empty_cache), so alloc / free_requested /
    free_completed / segment_alloc / segment_free appear in realistic
    proportions and the final 'segments' list is exactly the end state of the
    replay;
  * a warm-up phase that is simulated but not recorded, as with a ring buffer
    or a late _record_memory_history call: the trace frees blocks it never saw
    allocated and the final state holds blocks and segments from before the
    window;
  * stack frames shared through the pickle memo the way real files share them:
    ~20 frames per stack drawn from a few thousand stack patterns over a few
    thousand frame dicts (each frame dict and each string is written once and
    then referenced), one frame list per captured traceback and reused where
    PyTorch reuses it (free_requested/free_completed share one list,
    segment_alloc shares the list of the alloc that caused it, a final block
    shares the list of its alloc; with --context alloc frees reuse the alloc's
    list), and a single shared empty list. --fresh-stack-fraction below 1
    additionally reuses one list object per stack pattern.

The pickle is written by a streaming opcode writer that produces what CPython's
C pickler produces for the same object graph (checked by --selftest, which
compares the opcode streams for a small snapshot), so memory use stays at a
few hundred MB even for 9M entries. Standard library only.

The parts, each a module beside this script: gen_snapshot_allocator.py (the allocator model and
the recording), gen_snapshot_frames.py (frames and stack patterns), gen_snapshot_workload.py (the
training-loop traffic), gen_snapshot_pickle.py (the streaming writer) and gen_snapshot_selftest.py
(the --selftest comparison).
"""

import argparse
import os
import random
import sys
import time

from gen_snapshot_allocator import ACTION_NAMES, MIB
from gen_snapshot_frames import build_frames, build_stacks
from gen_snapshot_pickle import write_snapshot
from gen_snapshot_selftest import selftest
from gen_snapshot_workload import simulate


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--entries", type=int, required=True, help="trace entries to record")
    p.add_argument("--out", required=True, help="output pickle path")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--protocol", type=int, default=4, choices=(4, 5))
    p.add_argument("--frames", type=int, default=3000, help="distinct frame dicts")
    p.add_argument("--stacks", type=int, default=4000, help="distinct stack patterns")
    p.add_argument("--depth", type=int, default=20, help="mean frames per stack")
    p.add_argument("--fresh-stack-fraction", type=float, default=1.0,
                   help="share of events that get their own frame-list object (as in real files, "
                        "where every captured traceback becomes a new list); the rest reuse one "
                        "pooled list per stack pattern, which makes the file smaller")
    p.add_argument("--context", choices=("all", "alloc"), default="all",
                   help="like _record_memory_history(context=...): with 'all' frees record their "
                        "own stack, with 'alloc' they reuse the allocation's frame list")
    p.add_argument("--iteration-allocs", type=int, default=1500,
                   help="allocations in the forward half of one simulated iteration")
    p.add_argument("--empty-cache-prob", type=float, default=0.8,
                   help="chance of an empty_cache() after an iteration")
    p.add_argument("--warmup", type=int, default=None,
                   help="allocator operations simulated before recording starts")
    p.add_argument("--selftest", action="store_true",
                   help="also build the objects in memory and compare with CPython's pickler (small N only)")
    args = p.parse_args(argv)

    start = time.perf_counter()
    rng = random.Random(args.seed)
    frames = build_frames(rng, args.frames)
    stacks = build_stacks(rng, len(frames), args.stacks, args.depth)
    if args.selftest:
        selftest(args, frames, stacks)
        return 0
    sim, rec, annotations = simulate(args, frames, stacks)
    t_sim = time.perf_counter()
    write_snapshot(args.out, args.protocol, frames, stacks, sim, rec, annotations)
    t_end = time.perf_counter()

    counts = {}
    for a in rec.action:
        counts[a] = counts.get(a, 0) + 1
    mix = ", ".join(f"{ACTION_NAMES[a]} {counts[a]}" for a in sorted(counts))
    size = os.path.getsize(args.out)
    print(f"entries: {len(rec)} ({mix})", file=sys.stderr)
    print(f"segments: {len(sim.segments)}, reserved {sim.reserved / MIB:.0f} MiB; "
          f"simulate {t_sim - start:.1f}s, write {t_end - t_sim:.1f}s", file=sys.stderr)
    print(f"{args.out}: {size} bytes ({size / MIB:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
