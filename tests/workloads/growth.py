"""A small training loop on the CPU that leaks memory in one of the common ways, or not at all:
the workloads vramscope's growth finding is tested on (`tests/tests/growth.rs`).

    python growth.py MODE [--steps N]

MODE:
  loss-list   validation losses appended to a list without .item(), computed with grad on:
              each keeps its whole graph (the activations it saved)
  loss-item   the same, appending loss.item(): nothing kept
  outputs     the model's outputs kept for logging (each a batch x classes tensor)
  cache       features cached in a dict keyed by step, never evicted
  none        no leak: the same loop, everything per step freed (the optimizer's state is
              made at the first step and kept: warm-up, not growth)
"""

import argparse

import torch
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["loss-list", "loss-item", "outputs", "cache", "none"])
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 512))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    val_losses, logged, cache = [], [], {}
    for step in range(args.steps):
        x = torch.randn(128, 256)
        y = torch.randint(0, 512, (128,))
        out = model(x)
        loss = loss_fn(out, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if args.mode in ("loss-list", "loss-item"):
            xv = torch.randn(128, 256)
            val_loss = loss_fn(model(xv), y)
            val_losses.append(val_loss if args.mode == "loss-list" else val_loss.item())
        elif args.mode == "outputs":
            logged.append(out)
        elif args.mode == "cache":
            cache[step] = model[0](x).detach()
    print(f"done: {args.steps} steps, kept {len(val_losses) + len(logged) + len(cache)}")


if __name__ == "__main__":
    main()
