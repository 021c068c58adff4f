#!/usr/bin/env python3
"""What recording costs the CPU GPT sample's training loop, three ways side by side in one run:
nothing, under `vramscope record`, and inside `vramscope.record()` (the Python API, in process).
Each round runs the three in turn; the loop's own time is train.py's `train_seconds`.

    scripts/bench_record_overhead.py [--rounds 3] [--steps 10] [--python PY] [--vramscope BIN]

PY defaults to the project's torch venv (scripts/install-torch.sh), BIN to the release build in
$CARGO_TARGET_DIR (/var/tmp/vramscope-target); the Python package is taken from python/ here.
Standard library only.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = os.path.join(ROOT, "samples", "pytorch", "train.py")
INSIDE = """
import runpy, sys, vramscope
out, argv = sys.argv[1], sys.argv[2:]
sys.argv = argv
with vramscope.record(out, force=True):
    runpy.run_path(argv[0], run_name="__main__")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--python", default="/var/tmp/vramscope-venv/bin/python")
    target = os.environ.get("CARGO_TARGET_DIR", "/var/tmp/vramscope-target")
    parser.add_argument("--vramscope", default=os.path.join(target, "release", "vramscope"))
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "python"), "VRAMSCOPE_BIN": args.vramscope}
    loops = {"nothing": [], "vramscope record": [], "vramscope.record()": []}
    wall = {name: [] for name in loops}
    with tempfile.TemporaryDirectory() as work:
        for _ in range(args.rounds):
            for name in loops:
                summary = os.path.join(work, "summary.json")
                train = [TRAIN, "--device", "cpu", "--steps", str(args.steps), "--summary", summary]
                trace = os.path.join(work, "t.vtrace")
                command = {
                    "nothing": [args.python, *train],
                    "vramscope record": [args.vramscope, "record", "--force", "-o", trace, "--", args.python, *train],
                    "vramscope.record()": [args.python, "-c", INSIDE, trace, *train],
                }[name]
                start = time.perf_counter()
                subprocess.run(command, env=env, check=True, capture_output=True)
                wall[name].append(time.perf_counter() - start)
                with open(summary) as file:
                    loops[name].append(json.load(file)["train_seconds"])
    base = statistics.median(loops["nothing"])
    print(f"CPU GPT sample (train.py defaults), {args.steps} steps, {args.rounds} rounds side by side")
    print("| recorded by | training loop, median (min-max) | vs nothing | whole process, median |")
    print("|---|---|---|---|")
    for name in loops:
        loop = statistics.median(loops[name])
        print(f"| {name} | {loop:.3f} s ({min(loops[name]):.3f}-{max(loops[name]):.3f}) | {loop / base:.2f}x "
              f"| {statistics.median(wall[name]):.2f} s |")


if __name__ == "__main__":
    sys.exit(main())
