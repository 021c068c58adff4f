"""A training step as the flight recorder's overhead benchmark runs it: a model trained on the host
with PyTorch (the step's compute), and the driver calls a step of the same size makes on a GPU
whose allocator hands every tensor to the driver (`backend:cudaMallocAsync`, the most calls a step
makes), through the CUDA driver API (`libcuda.so.1`, the fake one in the benchmark): a block
allocated as each tensor is made in forward and freed as backward lets it go.

    python flight_step.py --steps 20 --calls 1800     prints each step's seconds, one per line
"""

from __future__ import annotations

import argparse
import ctypes
import time
import warnings

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--calls", type=int, default=1800, help="driver calls per step (allocations and frees)")
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    # PyTorch finds the fake driver on LD_LIBRARY_PATH and says it is too old: its compute is on the host.
    warnings.filterwarnings("ignore", message="CUDA initialization")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    cuda = ctypes.CDLL("libcuda.so.1")
    cuda.cuInit(0)
    alloc, free = cuda.cuMemAlloc_v2, cuda.cuMemFree_v2
    model = torch.nn.Sequential(
        torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512),
        torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512),
    )
    optimizer = torch.optim.AdamW(model.parameters())
    batch = torch.randn(256, 512)
    pointer = ctypes.c_ulonglong(0)
    for step in range(args.warmup + args.steps):
        started = time.perf_counter()
        held = []
        for i in range(args.calls // 2):
            alloc(ctypes.byref(pointer), ctypes.c_size_t(4096 * (1 + i % 64)))
            held.append(pointer.value)
        loss = model(batch).square().mean()
        loss.backward()
        for p in reversed(held):
            free(ctypes.c_ulonglong(p))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        seconds = time.perf_counter() - started
        if step >= args.warmup:
            print(f"{seconds:.6f}", flush=True)


if __name__ == "__main__":
    main()
