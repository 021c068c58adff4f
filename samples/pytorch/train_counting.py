"""train.py's counting: the bytes of tensors, of the unique parameters and of the optimizer's
state, counted from the tensors themselves, and on CUDA the caching allocator's own counters.
"""

from __future__ import annotations

import os

import torch
from torch import nn


def tensor_bytes(t: torch.Tensor) -> int:
    # A DTensor (FSDP's sharded parameters and gradients): this rank's shard.
    local = t.to_local() if hasattr(t, "to_local") else t
    return local.numel() * local.element_size()


def unique_parameters(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """Named parameters with tied ones once (named_parameters() already drops duplicates)."""
    seen: set[int] = set()
    result = []
    for name, p in model.named_parameters():
        if id(p) not in seen:
            seen.add(id(p))
            result.append((name, p))
    return result


def optimizer_state_summary(optimizer: torch.optim.Optimizer, device: torch.device) -> dict:
    """Bytes of every tensor in optimizer.state, with and without the `step` counters."""
    total = 0
    step_bytes = 0
    on_device = 0
    keys: dict[str, int] = {}
    step_devices: set[str] = set()
    for state in optimizer.state.values():
        for key, value in state.items():
            if not isinstance(value, torch.Tensor):
                continue
            n = tensor_bytes(value)
            total += n
            keys[key] = keys.get(key, 0) + n
            if value.device.type == device.type:
                on_device += n
            if key == "step":
                step_bytes += n
                step_devices.add(str(value.device))
    return {
        "optimizer_state_bytes": total,
        "optimizer_state_bytes_excluding_step": total - step_bytes,
        # Adam's `step` counters live on the CPU unless the optimizer is fused or capturable, so
        # on CUDA this is what a GPU profiler can see.
        "optimizer_state_bytes_on_device": on_device,
        "optimizer_state_bytes_by_key": keys,
        "optimizer_step_tensor_devices": sorted(step_devices),
        "optimizer_state_tensors": sum(
            isinstance(v, torch.Tensor) for s in optimizer.state.values() for v in s.values()
        ),
    }


def cuda_summary() -> dict:
    stats = torch.cuda.memory_stats()
    return {
        "memory_reserved": torch.cuda.memory_reserved(),
        "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "memory_allocated": torch.cuda.memory_allocated(),
        "max_memory_allocated": torch.cuda.max_memory_allocated(),
        "reserved_bytes_all_peak": stats.get("reserved_bytes.all.peak"),
        "allocator_backend": torch.cuda.get_allocator_backend(),
        "device_name": torch.cuda.get_device_name(),
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
    }
