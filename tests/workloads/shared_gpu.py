"""Two PyTorch processes sharing one GPU of vramscope's fake CUDA driver, as a reinforcement-learning
post-training job shares it: a trainer and a rollout engine taking the device in turns (one
"sleeps", giving back its memory, the other "wakes" and takes it), each training or generating
with PyTorch on the host meanwhile.

The device memory each holds is taken around PyTorch, through the driver itself (ctypes into
`libcuda.so.1`, found on LD_LIBRARY_PATH: the fake one in the tests), as an inference engine's
own allocator takes it: the trainer its weights, gradients and optimizer state, the rollout
engine its weights and key-value cache.

    python shared_gpu.py turns DIR [--rounds N]   the launcher: starts both, waits for both
    python shared_gpu.py greedy BYTES             takes BYTES on the device at once (an OOM
                                                  where another process holds the rest)

The two hand the device over through files in DIR (`trainer.N`, `rollout.N`: whose turn it is).
"""

from __future__ import annotations

import argparse
import ctypes
import subprocess
import sys
import time
from pathlib import Path

import torch

MIB = 1 << 20


class Device:
    """Device memory through the CUDA driver API."""

    def __init__(self) -> None:
        self.cuda = ctypes.CDLL("libcuda.so.1")
        self.cuda.cuInit(0)
        self.held: list[int] = []

    def take(self, size: int) -> None:
        pointer = ctypes.c_ulonglong(0)
        status = self.cuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(size))
        if status != 0:
            raise MemoryError(f"cuMemAlloc_v2 of {size} bytes failed with CUresult {status}: out of memory")
        self.held.append(pointer.value)

    def give_back(self) -> None:
        for pointer in self.held:
            self.cuda.cuMemFree_v2(ctypes.c_ulonglong(pointer))
        self.held.clear()


def wait_for(path: Path) -> None:
    deadline = time.monotonic() + 60
    while not path.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"{path} never came")
        time.sleep(0.01)


def trainer(folder: Path, rounds: int) -> None:
    device = Device()
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256))
    optimizer = torch.optim.AdamW(model.parameters())
    for n in range(rounds):
        wait_for(folder / f"trainer.{n}")
        # Wake: weights, gradients and two moments of a 4M-parameter model in fp32.
        device.take(16 * MIB)
        device.take(16 * MIB)
        device.take(32 * MIB)
        for _ in range(3):
            loss = model(torch.randn(32, 256)).square().mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        time.sleep(0.4)
        # Sleep: everything back to the driver, the weights synced to the rollout engine.
        device.give_back()
        time.sleep(0.2)
        (folder / f"rollout.{n}").touch()


def rollout(folder: Path, rounds: int) -> None:
    device = Device()
    model = torch.nn.Linear(256, 256)
    for n in range(rounds):
        wait_for(folder / f"rollout.{n}")
        # Wake: the weights (fp16) and a key-value cache.
        device.take(8 * MIB)
        device.take(40 * MIB)
        with torch.inference_mode():
            for _ in range(3):
                model(torch.randn(64, 256))
        time.sleep(0.4)
        device.give_back()
        time.sleep(0.2)
        (folder / f"trainer.{n + 1}").touch()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["turns", "trainer", "rollout", "greedy"])
    parser.add_argument("arg", help="the handover folder (turns), or the bytes to take (greedy)")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if args.mode == "greedy":
        device = Device()
        torch.ones(1024).sum()
        device.take(8 * MIB)
        device.take(int(args.arg))
        return
    folder = Path(args.arg)
    if args.mode == "trainer":
        trainer(folder, args.rounds)
        return
    if args.mode == "rollout":
        rollout(folder, args.rounds)
        return
    folder.mkdir(parents=True, exist_ok=True)
    children = [
        subprocess.Popen([sys.executable, __file__, role, str(folder), "--rounds", str(args.rounds)])
        for role in ("trainer", "rollout")
    ]
    # Both have started (torch imported) before the first turn.
    time.sleep(0.5)
    (folder / "trainer.0").touch()
    codes = [child.wait() for child in children]
    if any(codes):
        raise SystemExit(f"a process failed: {codes}")


if __name__ == "__main__":
    main()
