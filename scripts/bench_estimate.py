#!/usr/bin/env python3
"""`vramscope estimate`'s numbers for docs/BENCHMARKS.md, in one run:

1. accuracy: the four H200 runs of samples/pytorch/train.py (samples/traces/h200-torch-*.summary.json,
   the script's own torch.cuda counters on the GPU) estimated here with the same arguments and
   allocator settings: peak allocated and reserved beside what the H200 measured;
2. cost: the estimate of the first of them (167M parameters, AdamW, batch 8 x 512), best of
   three, beside one real run of the same script on this machine's CPU;
3. scale: a 7-billion-parameter decoder's AdamW step (32 layers, d_model 4096, bf16 autocast,
   batch 8 x 2048) estimated for an H100: wall time, the program's peak host memory (its
   ru_maxrss), and its model state beside the exact bytes of its tensors.

    scripts/bench_estimate.py BIN TORCH_PYTHON
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRAIN = REPO / "samples" / "pytorch" / "train.py"
BIN, PYTHON = sys.argv[1], sys.argv[2]


def h200_args(summary: dict) -> list[str]:
    a = summary["args"]
    args = []
    for flag, key in [("--model", "model"), ("--layers", "layers"), ("--d-model", "d_model"), ("--heads", "heads"),
                      ("--vocab", "vocab"), ("--seq-len", "seq_len"), ("--batch-size", "batch_size"),
                      ("--steps", "steps"), ("--optimizer", "optimizer")]:
        args += [flag, str(a[key])]
    if a["bf16"]:
        args.append("--bf16")
    return args


def estimate(args: list[str], env: dict[str, str], gpu: str = "h200", extra: tuple[str, ...] = ()) -> tuple[dict, float]:
    start = time.perf_counter()
    done = subprocess.run([BIN, "estimate", "--json", "--gpu", gpu, *extra, "--", *args], capture_output=True,
                          text=True, env=env, check=False)
    took = time.perf_counter() - start
    if done.returncode not in (0, 1):
        sys.exit(f"estimate failed ({done.returncode}): {done.stderr[-3000:]}")
    return json.loads(done.stdout), took


def main() -> None:
    base_env = {k: v for k, v in os.environ.items() if k != "PYTORCH_CUDA_ALLOC_CONF"}
    print("## accuracy against the H200\n")
    print("| setting | H200 peak allocated | estimate | error | H200 peak reserved | estimate | error |")
    print("|---|---|---|---|---|---|---|")
    for setting in ("plain", "expandable", "async", "bf16"):
        measured = json.loads((REPO / "samples" / "traces" / f"h200-torch-{setting}.summary.json").read_text())
        env = dict(base_env)
        if measured["cuda"]["alloc_conf"]:
            env["PYTORCH_CUDA_ALLOC_CONF"] = measured["cuda"]["alloc_conf"]
        doc, _ = estimate([PYTHON, str(TRAIN), *h200_args(measured)], env)
        d = doc["devices"][0]
        cuda = measured["cuda"]
        row = [setting]
        for key, real in (("peak_allocated_bytes", cuda["max_memory_allocated"]),
                          ("peak_reserved_bytes", cuda["max_memory_reserved"])):
            row += [f"{real:,}", f"{d[key]:,}", f"{100 * (d[key] - real) / real:+.3f}%"]
        print("| " + " | ".join(row) + " |")

    print("\n## cost: train.py (167M parameters, batch 8 x 512, 3 steps)\n")
    plain = json.loads((REPO / "samples" / "traces" / "h200-torch-plain.summary.json").read_text())
    args = [PYTHON, str(TRAIN), *h200_args(plain)]
    times = [estimate(args, base_env)[1] for _ in range(3)]
    start = time.perf_counter()
    subprocess.run([*args, "--device", "cpu"], capture_output=True, check=True, env=base_env)
    cpu = time.perf_counter() - start
    print(f"estimate: {', '.join(f'{t:.2f}' for t in times)} s (best {min(times):.2f} s); "
          f"the same run on this machine's CPU: {cpu:.1f} s ({cpu / min(times):.1f}x the estimate)")

    print("\n## scale: a 7B decoder's AdamW step, bf16 autocast, batch 8 x 2048, on an H100\n")
    with tempfile.TemporaryDirectory() as work:
        summary = Path(work) / "7b.json"
        rss = Path(work) / "rss"
        timed = ["/usr/bin/time", "-f", "%M", "-o", str(rss), PYTHON, str(TRAIN), "--layers", "32", "--d-model", "4096",
                 "--heads", "32", "--vocab", "32000", "--seq-len", "2048", "--batch-size", "8", "--bf16", "--steps", "1",
                 "--summary", str(summary)]
        trace = Path(work) / "7b.vtrace"
        doc, took = estimate(timed, base_env, gpu="h100", extra=("-o", str(trace)))
        own = json.loads(summary.read_text())
        info = json.loads(subprocess.run([BIN, "info", "--json", "--at", "optimizer_step", str(trace)],
                                         capture_output=True, text=True, check=True).stdout)
        at = next(d for d in info["at"]["devices"] if d["device"] == 0)["categories"]
        print(f"the estimate's trace at the optimizer step: parameter {at.get('parameter', 0):,} B (the script: "
              f"{own['parameter_bytes'] + own['buffer_bytes']:,} with buffers), gradient {at.get('gradient', 0):,} B")
        d = doc["devices"][0]
        print(f"{own['parameter_count']:,} parameters; estimate {took:.1f} s; the program's peak host memory "
              f"{int(rss.read_text().split()[-1]) / 1024:.0f} MiB")
        print(f"parameters {own['parameter_bytes']:,} B, gradients {own['gradient_bytes']:,} B, optimizer state "
              f"{own['optimizer_state_bytes_on_device']:,} B (the tensors' own bytes, counted by the script)")
        print(f"projected on the H100: peak allocated {d['peak_allocated_bytes']:,} B, reserved "
              f"{d['peak_reserved_bytes']:,} B, fits: {d['fits']}; at the peak: {d['categories_at_peak']}")


if __name__ == "__main__":
    main()
