"""Dies of CUDA out-of-memory, for vramscope's GPU check: keeps 16 GiB tensors until the device is
full. The recording must keep everything up to the failure and the failed request's size."""
import torch

STEP = 16 << 30
held = []
print(f"device memory {torch.cuda.get_device_properties(0).total_memory}", flush=True)
while True:
    held.append(torch.empty(STEP, dtype=torch.uint8, device="cuda"))
    print(f"holding {len(held) * STEP}", flush=True)
