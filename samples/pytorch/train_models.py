"""train.py's models: a GPT-style transformer (plain matmul/softmax attention, so its memory is
the same on every device) and a Linear-ReLU MLP whose saved activations are also counted by hand,
with the saved_tensors_hooks counter that checks the hand count.
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with plain matmul/softmax.

    Plain ops rather than F.scaled_dot_product_attention: SDPA picks a backend (flash, memory-
    efficient, math) by device, dtype and shape, and each saves different tensors for backward;
    the plain version saves the same tensors everywhere, so its memory is predictable.
    """

    def __init__(self, d_model: int, heads: int, seq_len: int) -> None:
        super().__init__()
        self.heads = heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        # True above the diagonal: the positions a token may not attend to. A buffer, not a
        # parameter, so it has no gradient and no optimizer state.
        mask = torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool), diagonal=1)
        self.register_buffer("causal_mask", mask, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, d_model = x.shape
        head_dim = d_model // self.heads

        def split_heads(t: torch.Tensor) -> torch.Tensor:
            # -1: under tensor parallelism (--tp) a rank holds only its share of the heads.
            return t.view(batch, seq, -1, head_dim).transpose(1, 2)

        q = split_heads(self.q_proj(x))
        k = split_heads(self.k_proj(x))
        v = split_heads(self.v_proj(x))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(head_dim))
        scores = scores.masked_fill(self.causal_mask[:seq, :seq], float("-inf"))
        weights = F.softmax(scores, dim=-1)
        y = (weights @ v).transpose(1, 2).reshape(batch, seq, -1)
        return self.out_proj(y)


class FeedForward(nn.Module):
    """The transformer MLP: d_model -> 4 d_model -> GELU -> d_model."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.fc_in = nn.Linear(d_model, 4 * d_model)
        self.fc_out = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc_out(F.gelu(self.fc_in(x)))


class Block(nn.Module):
    """A pre-LayerNorm transformer block."""

    def __init__(self, d_model: int, heads: int, seq_len: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, heads, seq_len)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = FeedForward(d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Token + learned position embeddings, pre-LN blocks, final LayerNorm, LM head."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        self.use_checkpoint = args.checkpoint
        # Selective checkpointing: the first K blocks (all with --checkpoint alone).
        self.checkpoint_blocks = args.layers if args.checkpoint_blocks is None else args.checkpoint_blocks
        self.tok_emb = nn.Embedding(args.vocab, args.d_model)
        self.pos_emb = nn.Embedding(args.seq_len, args.d_model)
        self.blocks = nn.ModuleList(
            Block(args.d_model, args.heads, args.seq_len) for _ in range(args.layers)
        )
        self.ln_f = nn.LayerNorm(args.d_model)
        self.lm_head = nn.Linear(args.d_model, args.vocab, bias=False)
        self.apply(self._init_weights)
        if args.tie_weights:
            # One tensor under two names; named_parameters() reports it once, as tok_emb.weight.
            self.lm_head.weight = self.tok_emb.weight

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        # GPT-2's initialisation; PyTorch's N(0, 1) embeddings make tied logits (and the loss) huge.
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok_emb(tokens) + self.pos_emb(positions)
        for i, block in enumerate(self.blocks):
            if self.use_checkpoint and i < self.checkpoint_blocks and torch.is_grad_enabled():
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return self.lm_head(self.ln_f(x))


class MLP(nn.Module):
    """Linear -> ReLU -> Linear -> ReLU -> Linear: small enough to count its activations by hand."""

    def __init__(self, d_in: int, hidden: int, d_out: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.relu1 = nn.ReLU()
        self.fc2 = nn.Linear(hidden, hidden)
        self.relu2 = nn.ReLU()
        self.fc3 = nn.Linear(hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(self.relu2(self.fc2(self.relu1(self.fc1(x)))))


def mlp_dims(args: argparse.Namespace) -> tuple[int, int, int]:
    """(d_in, hidden, d_out) of the MLP model."""
    return args.d_model, 4 * args.d_model, args.vocab


def mlp_saved_bytes_by_hand(args: argparse.Namespace) -> dict[str, int]:
    """Bytes the MLP's forward keeps for backward, from the shapes alone.

    With batch B, dims d_in -> H -> H -> V and element size e (4 for fp32, 2 under bf16 autocast),
    a 2-D nn.Linear with bias is one addmm(bias, input, weight.t()), which saves `input` (for the
    weight gradient) only when the weight needs a gradient, and `weight.t()` (for the input
    gradient) only when the input needs one; ReLU saves its output. So:

      fc1   saves x              B*d_in*e   (x needs no gradient, so fc1 saves no weight)
      relu1 saves a1             B*H*e
      fc2   saves a1 and W2.t()  a1 is relu1's output: the same storage, counted once
      relu2 saves a2             B*H*e
      fc3   saves a2 and W3.t()  a2 again, counted once

      activations = e * (B*d_in + 2*B*H)

    The pre-ReLU outputs h1, h2 are not saved (ReLU's backward needs only its output), and the
    logits belong to the loss, not the model. W2.t() and W3.t() are views of the parameters in
    fp32, so they hold no memory of their own and are not activations. Under bf16 autocast they are
    views of autocast's bf16 copies of W2 and W3, which the graph keeps alive until backward, so
    those copies count too: e * (H*H + V*H). W1's copy is not saved, since fc1's input x needs no
    gradient. Counting unique storages with saved_tensors_hooks gives exactly these numbers
    because the shared tensors (a1, a2) are the same storage and the parameter views are excluded.
    """
    batch = args.batch_size
    d_in, hidden, d_out = mlp_dims(args)
    half = args.bf16 or getattr(args, "fp16", False)
    elem = 2 if half else 4
    activations = elem * (batch * d_in + 2 * batch * hidden)
    weight_copies = elem * (hidden * hidden + d_out * hidden) if half else 0
    return {
        "input_bytes": elem * batch * d_in,
        "relu_output_bytes": elem * 2 * batch * hidden,
        "activation_bytes": activations,
        "autocast_weight_copy_bytes": weight_copies,
        "total_bytes": activations + weight_copies,
    }


class SavedTensorCounter:
    """Counts the unique storages an autograd graph saves for backward, split by parameters.

    Used as `with torch.autograd.graph.saved_tensors_hooks(counter.pack, counter.unpack)`. The pack
    hook returns a detached alias of the tensor: the same storage, so memory is unchanged, but
    without the reference cycle that saving a tensor's own output with its grad_fn would make.
    """

    def __init__(self, parameters: list[nn.Parameter]) -> None:
        self.parameter_storages = {p.untyped_storage().data_ptr() for p in parameters}
        self.storages: dict[int, int] = {}

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        self.storages[storage.data_ptr()] = storage.nbytes()
        return tensor.detach()

    @staticmethod
    def unpack(tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def non_parameter_bytes(self) -> int:
        return sum(n for ptr, n in self.storages.items() if ptr not in self.parameter_storages)

    def parameter_bytes(self) -> int:
        return sum(n for ptr, n in self.storages.items() if ptr in self.parameter_storages)


class Int8Linear(nn.Module):
    """A linear layer whose weight is int8 with one scale per output (weight-only quantisation,
    as torchao's int8_weight_only does it): the matrix product reads the 8-bit weight
    (`torch._weight_int8pack_mm`), the input and output keep their dtype."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        weight = linear.weight.detach()
        scales = weight.abs().amax(dim=1).clamp(min=1e-8) / 127.0
        self.register_buffer("weight_int8", torch.round(weight / scales[:, None]).clamp(-127, 127).to(torch.int8))
        self.register_buffer("scales", scales.to(weight.dtype))
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone())
        self.out_features = linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        y = torch.ops.aten._weight_int8pack_mm(flat, self.weight_int8, self.scales)
        if self.bias is not None:
            y.add_(self.bias)  # in place, as a kernel adds it in its epilogue
        return y.reshape(*x.shape[:-1], self.out_features)


INT4_GROUP = 128


class Int4Linear(nn.Module):
    """A linear layer whose weight is 4-bit, in groups of 128 inputs each with a scale and a zero
    point (weight-only quantisation, as torchao's int4_weight_only does it): two weights per
    byte, packed for the host's int4 matrix product (`torch._weight_int4pack_mm_for_cpu`); the
    scales and zero points in the weight's dtype, the input and output keep theirs."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        weight = linear.weight.detach()
        out_features, in_features = weight.shape
        groups = weight.reshape(out_features, in_features // INT4_GROUP, INT4_GROUP)
        low, high = groups.amin(dim=2), groups.amax(dim=2)
        scales = ((high - low) / 15.0).clamp(min=1e-8)
        # The kernel computes (q - 8) * scale + zero: zero is the group's middle.
        zeros = low + 8.0 * scales
        q = torch.round((groups - low[..., None]) / scales[..., None]).clamp(0, 15).to(torch.int32)
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.reshape(out_features, in_features), 2)
        self.register_buffer("weight_int4", packed)
        # (input groups, outputs, 2): each group's scale and zero point, per output.
        self.register_buffer("scales_and_zeros", torch.stack([scales.t(), zeros.t()], dim=2).contiguous().to(weight.dtype))
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone())
        self.out_features = out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(flat, self.weight_int4, INT4_GROUP, self.scales_and_zeros)
        if self.bias is not None:
            y.add_(self.bias)  # in place, as a kernel adds it in its epilogue
        return y.reshape(*x.shape[:-1], self.out_features)


def quantize_int4(model: nn.Module) -> nn.Module:
    """Every nn.Linear of `model` whose inputs split into groups of 128 replaced by an
    Int4Linear (the others stay as they are, as torchao leaves them); the weights freed."""
    for name, child in list(model.named_children()):
        if isinstance(child, nn.Linear) and child.in_features % INT4_GROUP == 0:
            setattr(model, name, Int4Linear(child))
        else:
            quantize_int4(child)
    return model


def quantize_int8(model: nn.Module) -> nn.Module:
    """Every nn.Linear of `model` replaced by an Int8Linear; the fp32 weights freed."""
    for name, child in list(model.named_children()):
        if isinstance(child, nn.Linear):
            setattr(model, name, Int8Linear(child))
        else:
            quantize_int8(child)
    return model

