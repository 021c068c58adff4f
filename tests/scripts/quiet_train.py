"""A small CPU training loop that prints on stdout and stderr, for the test that `vramscope
record` leaves a workload's output exactly as it is (the shim's profiler must not add lines)."""
import sys

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(3):
    loss = model(torch.randn(16, 64)).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    print(f"step {step} loss {loss.item():.6f}", flush=True)
    print(f"progress {step + 1}/3", file=sys.stderr, flush=True)
print("done")
