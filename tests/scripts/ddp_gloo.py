"""Data-parallel training on the CPU with gloo, for vramscope's recording tests: run it with
`torchrun --nproc_per_node=2`. Each rank prints one JSON line with its rank and exact sizes."""
import json
import os

import torch
import torch.distributed as dist
from torch import nn


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    for step in range(3):
        # Rank 1's batches are four times larger, so the ranks' traces differ.
        x = torch.randn(32 * (1 + 3 * rank), 64)
        loss = ddp(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    params = sum(p.untyped_storage().nbytes() for p in model.parameters())
    print(json.dumps({"rank": rank, "parameter_bytes": params, "pid": os.getpid()}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
