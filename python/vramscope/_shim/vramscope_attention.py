"""The attention backend `scaled_dot_product_attention` picks on the emulated GPU.

On a GPU, PyTorch chooses among its fused kernels in C++ (`select_sdp_backend` in ATen's
`sdp_utils.cpp`), asking the device for its compute capability: the emulated GPU has no device
to ask there, so the choice is made here by the same rules and the chosen backend's own
operator is called (its outputs, and what it keeps for backward, are that kernel's):

- flash attention (`_scaled_dot_product_flash_attention`): float16 or bfloat16, compute
  capability 8.0 or newer, no attention mask, the same head size for query, key and value, at
  most 256 (a backward of a head size over 192 on 8.6 and 8.9 is left to the others);
- memory-efficient attention (`_scaled_dot_product_efficient_attention`): float32, float16 or
  bfloat16 (bfloat16 from 8.0), compute capability 5.0 or newer, a head size that is a multiple
  of 8 (4 for float32), a mask allowed, no grouped-query heads;
- the math backend (`_scaled_dot_product_attention_math`) otherwise: the attention matrix
  materialised, as on a GPU.

Each backend is tried in that order, and only where the program left it enabled
(`torch.backends.cuda.flash_sdp_enabled()`, `sdpa_kernel(...)`). cuDNN's attention is not
chosen (it is last in PyTorch's default order).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

_FLASH_MAX_HEAD = 256


def choose(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None,
    capability: tuple[int, int],
    enable_gqa: bool,
) -> str:
    """`flash`, `efficient` or `math`, as ATen would choose on a GPU of `capability`."""
    backends = torch.backends.cuda
    dtype = query.dtype
    head = query.size(-1)
    same_heads = key.size(-1) == head and value.size(-1) == head
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
    four_d = query.dim() == 4 and key.dim() == 4 and value.dim() == 4
    if (
        backends.flash_sdp_enabled()  # type: ignore[no-untyped-call]
        and four_d
        and dtype in (torch.float16, torch.bfloat16)
        and capability >= (8, 0)
        and attn_mask is None
        and same_heads
        and head <= _FLASH_MAX_HEAD
        and not (grad and head > 192 and capability in ((8, 6), (8, 9)))
    ):
        return "flash"
    alignment = 4 if dtype == torch.float32 else 8
    if (
        backends.mem_efficient_sdp_enabled()  # type: ignore[no-untyped-call]
        and four_d
        and dtype in (torch.float32, torch.float16, torch.bfloat16)
        and capability >= (5, 0)
        and (dtype != torch.bfloat16 or capability >= (8, 0))
        and head % alignment == 0
        and value.size(-1) % alignment == 0
        and not enable_gqa
    ):
        return "efficient"
    return "math"


def install(capability: tuple[int, int], chosen: Callable[[str, torch.Tensor], None]) -> None:
    """Puts the emulated GPU's choice in front of `torch.nn.functional.scaled_dot_product_attention`;
    `chosen(backend, query)` is told of each choice."""
    functional = torch.nn.functional
    real = functional.scaled_dot_product_attention
    aten = torch.ops.aten

    def scaled_dot_product_attention(
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: float | None = None,
        enable_gqa: bool = False,
    ) -> torch.Tensor:
        if query.device.type != "cuda":
            return real(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
        backend = choose(query, key, value, attn_mask, capability, enable_gqa)
        chosen(backend, query)
        out: Any
        if backend == "flash":
            out = aten._scaled_dot_product_flash_attention(query, key, value, dropout_p, is_causal, scale=scale)
        elif backend == "efficient":
            grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
            out = aten._scaled_dot_product_efficient_attention(
                query, key, value, attn_mask, grad, dropout_p, is_causal, scale=scale
            )
        else:
            out = aten._scaled_dot_product_attention_math(
                query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa
            )
        result: torch.Tensor = out[0]
        return result

    scaled_dot_product_attention.__doc__ = real.__doc__
    functional.scaled_dot_product_attention = scaled_dot_product_attention
