#!/usr/bin/env python3
"""A small GPT-style (or MLP) training run whose memory numbers are known exactly.

vramscope records this script and checks what it measured against the reference numbers the script
writes with --summary: parameter, gradient and optimizer-state bytes counted from the tensors
themselves, and on CUDA the caching allocator's own counters. None of those numbers come from a
profiler, so they can prove one.

Pure PyTorch, nothing else. Run `python train.py --help` for the options.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


# ---------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------


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
    elem = 2 if args.bf16 else 4
    activations = elem * (batch * d_in + 2 * batch * hidden)
    weight_copies = elem * (hidden * hidden + d_out * hidden) if args.bf16 else 0
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


# ---------------------------------------------------------------------------------------------
# Counting
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------


def make_optimizer(args: argparse.Namespace, params: list[nn.Parameter]) -> torch.optim.Optimizer:
    if args.optimizer == "adam":
        cls, kwargs = torch.optim.Adam, {"lr": args.lr}
    elif args.optimizer == "adamw":
        cls, kwargs = torch.optim.AdamW, {"lr": args.lr}
    elif args.optimizer == "adafactor":
        cls, kwargs = torch.optim.Adafactor, {"lr": args.lr}
    else:
        cls, kwargs = torch.optim.SGD, {"lr": args.lr, "momentum": args.momentum}
    if args.zero1:
        # ZeRO stage 1: each rank keeps the optimizer state of its share of the parameters.
        from torch.distributed.optim import ZeroRedundancyOptimizer

        return ZeroRedundancyOptimizer(params, optimizer_class=cls, **kwargs)
    return cls(params, **kwargs)


def start_distributed(args: argparse.Namespace, device: torch.device) -> tuple[torch.device, int, int]:
    """Under torchrun (WORLD_SIZE above 1): joins the process group (gloo on the CPU, nccl on
    CUDA) and returns this rank's device, its rank and the world size; else (device, 0, 1)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        if args.zero1 or args.fsdp or args.tp or args.pp:
            raise SystemExit("--zero1, --fsdp, --tp and --pp need several ranks: run under torchrun --nproc_per_node=N")
        return device, 0, 1
    import torch.distributed as dist

    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return device, dist.get_rank(), dist.get_world_size()


def wrap_distributed(args: argparse.Namespace, model: nn.Module, device: torch.device) -> nn.Module:
    """Data parallel: DDP, or with --fsdp each block and then the whole model fully_shard'ed
    (FSDP2: parameters, gradients and optimizer state sharded over the ranks)."""
    if args.tp:
        # Megatron-style: q, k, v and the MLP's first projection split by output (column-wise),
        # the attention's and the MLP's output projections by input (row-wise), so each block
        # all-reduces twice; embeddings, norms and the LM head stay whole on every rank.
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        mesh = init_device_mesh(device.type, (int(os.environ["WORLD_SIZE"]),))
        plan = {
            "attn.q_proj": ColwiseParallel(), "attn.k_proj": ColwiseParallel(), "attn.v_proj": ColwiseParallel(),
            "attn.out_proj": RowwiseParallel(), "mlp.fc_in": ColwiseParallel(), "mlp.fc_out": RowwiseParallel(),
        }
        for block in model.blocks:
            parallelize_module(block, mesh, plan)
        return model
    if args.fsdp:
        from torch.distributed.fsdp import fully_shard

        for block in getattr(model, "blocks", []):
            fully_shard(block)
        fully_shard(model)
        return model
    return nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)


class PipelineStage(nn.Module):
    """One rank's share of the GPT under --pp: its run of blocks, with the embeddings on the first
    stage and the final norm and the LM head on the last."""

    def __init__(self, gpt: GPT, rank: int, world: int) -> None:
        super().__init__()
        layers = len(gpt.blocks)
        if layers < world:
            raise SystemExit("--pp: at least one block per rank (--layers >= ranks)")
        begin, end = rank * layers // world, (rank + 1) * layers // world
        self.first, self.last = rank == 0, rank == world - 1
        self.tok_emb = gpt.tok_emb if self.first else None
        self.pos_emb = gpt.pos_emb if self.first else None
        self.blocks = nn.ModuleList(gpt.blocks[begin:end])
        self.ln_f = gpt.ln_f if self.last else None
        self.lm_head = gpt.lm_head if self.last else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tok_emb is not None and self.pos_emb is not None:
            positions = torch.arange(x.shape[1], device=x.device)
            x = self.tok_emb(x) + self.pos_emb(positions)
        for block in self.blocks:
            x = block(x)
        if self.ln_f is not None and self.lm_head is not None:
            x = self.lm_head(self.ln_f(x))
        return x


def pipeline_schedule(args: argparse.Namespace, stage: nn.Module, rank: int, world: int, device: torch.device):
    """The 1F1B schedule over 2 micro-batches per rank, the loss on the last stage."""
    from torch.distributed.pipelining import PipelineStage as Stage, Schedule1F1B

    def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))

    micro_batches = 2 * world
    if args.batch_size % micro_batches != 0:
        raise SystemExit(f"--pp: --batch-size must be a multiple of {micro_batches} (2 micro-batches per rank)")
    return Schedule1F1B(Stage(stage, rank, world, device), n_microbatches=micro_batches, loss_fn=loss_fn)


def make_batch(args: argparse.Namespace, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Random inputs and targets, made once on the device before training."""
    generator = torch.Generator(device=device).manual_seed(args.seed)
    if args.model == "mlp":
        d_in, _, d_out = mlp_dims(args)
        inputs = torch.randn(args.batch_size, d_in, generator=generator, device=device)
        targets = torch.randint(d_out, (args.batch_size,), generator=generator, device=device)
        return inputs, targets
    # One (B, T+1) tensor; inputs and next-token targets are views of it.
    tokens = torch.randint(
        args.vocab, (args.batch_size, args.seq_len + 1), generator=generator, device=device
    )
    return tokens[:, :-1], tokens[:, 1:]


def train(args: argparse.Namespace) -> dict:
    device, rank, world = start_distributed(args, torch.device(args.device))
    torch.manual_seed(args.seed)
    if device.type == "cuda":
        torch.cuda.manual_seed(args.seed)

    if args.model == "gpt":
        model: nn.Module = GPT(args)
    else:
        model = MLP(*mlp_dims(args))
    schedule = None
    if args.pp and world > 1:
        # Every rank builds the same model (one seed) and keeps its stage; the rest is freed.
        model = PipelineStage(model, rank, world)
        schedule = pipeline_schedule(args, model, rank, world, device)
    model.to(device, dtype=getattr(torch, args.weights_dtype))
    model.train(not args.inference)
    named = unique_parameters(model)
    parameter_bytes = sum(tensor_bytes(p) for _, p in named)
    if world > 1 and not args.pp:
        model = wrap_distributed(args, model, device)
        # FSDP swaps in sharded parameters: what the optimizer and the counts see.
        named = unique_parameters(model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model)
        if args.tp and world % args.heads != 0 and args.heads % world != 0:
            raise SystemExit("--tp: the ranks must divide --heads")
    params = [p for _, p in named]
    optimizer = None if args.inference else make_optimizer(args, params)
    inputs, targets = make_batch(args, device)
    forward = torch.compile(model) if args.compile else model

    summary: dict = {
        "model": args.model,
        "device": str(device),
        "torch_version": torch.__version__,
        "python_version": sys.version.split()[0],
        "args": vars(args),
        "rank": rank,
        "world_size": world,
        "parameter_bytes": parameter_bytes,
        "parameter_count": sum(p.numel() for p in params),
        "parameter_tensors": len(params),
        "parameters": [
            {
                "name": name,
                "shape": list(p.shape),
                "dtype": str(p.dtype).removeprefix("torch."),
                "bytes": tensor_bytes(p),
            }
            for name, p in named
        ],
        "buffer_bytes": sum(tensor_bytes(b) for b in model.buffers()),
        "input_bytes": tensor_bytes(inputs) if args.model == "mlp" else None,
        "token_bytes": None if args.model == "mlp" else inputs.untyped_storage().nbytes(),
        "losses": [],
        "steps": [],
    }
    if args.tie_weights:
        summary["tied"] = {"lm_head.weight": "tok_emb.weight"}

    counter = SavedTensorCounter(params) if args.model == "mlp" and not args.inference else None
    autocast = torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=args.bf16)
    start_s = time.perf_counter()
    if args.inference:
        summary.update(gradient_bytes=0, gradient_tensors=0, optimizer_state_bytes=0,
                       optimizer_state_bytes_excluding_step=0)
    for step in range(args.steps if args.inference else 0):
        with torch.inference_mode(), autocast:
            logits = forward(inputs)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))
        summary["losses"].append(loss.item())
        del logits, loss
        summary["steps"].append({"step": step})
    for step in range(0 if args.inference else args.steps):
        # --accumulate K: K micro-batches of --batch-size each, their gradients summed before
        # the optimizer's step (the first micro-batch's gradients live through the others).
        if schedule is not None:
            # The schedule splits the batch, runs forward and backward, and sums the gradients.
            losses: list = []
            if rank == 0:
                schedule.step(inputs)
            elif rank == world - 1:
                schedule.step(target=targets, losses=losses)
            else:
                schedule.step()
            loss = torch.stack(losses).mean() if losses else None
        for micro in range(args.accumulate if schedule is None else 0):
            with autocast:
                if counter is not None and step == 0 and micro == 0:
                    with torch.autograd.graph.saved_tensors_hooks(counter.pack, counter.unpack):
                        logits = forward(inputs)
                else:
                    logits = forward(inputs)
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))
            (loss / args.accumulate if args.accumulate > 1 else loss).backward()
            del logits
        if step == 0:
            grads = [p.grad for p in params if p.grad is not None]
            summary["gradient_bytes"] = sum(tensor_bytes(g) for g in grads)
            summary["gradient_tensors"] = len(grads)
            # Holding them would keep this step's gradients alive through the next backward.
            del grads
        optimizer.step()
        if step == 0:
            # ZeroRedundancyOptimizer keeps this rank's share in the optimizer it wraps.
            summary.update(optimizer_state_summary(getattr(optimizer, "optim", optimizer), device))
        optimizer.zero_grad(set_to_none=args.zero_grad_none)
        # Under --pp only the last stage sees the loss.
        summary["losses"].append(None if loss is None else loss.item())
        del loss
        step_info: dict = {"step": step}
        if device.type == "cuda":
            step_info["memory_allocated"] = torch.cuda.memory_allocated()
            step_info["max_memory_allocated"] = torch.cuda.max_memory_allocated()
            step_info["memory_reserved"] = torch.cuda.memory_reserved()
        summary["steps"].append(step_info)
    summary["train_seconds"] = round(time.perf_counter() - start_s, 3)

    if counter is not None:
        hand = mlp_saved_bytes_by_hand(args)
        measured = counter.non_parameter_bytes()
        summary["mlp_activation_bytes_hand"] = hand["total_bytes"]
        summary["mlp_activation_bytes_saved_tensors"] = measured
        summary["mlp_activation_bytes_hand_parts"] = hand
        summary["mlp_saved_parameter_bytes"] = counter.parameter_bytes()
        summary["mlp_activation_bytes_match"] = hand["total_bytes"] == measured
    if device.type == "cuda":
        torch.cuda.synchronize()
        summary["cuda"] = cuda_summary()
    if world > 1:
        import torch.distributed as dist

        dist.destroy_process_group()
    return summary


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(
            "Train a small GPT-style transformer (or a 3-layer MLP) on random data for a few steps "
            "and optionally write exact reference memory numbers (parameters, gradients, "
            "optimizer state, CUDA allocator counters) as JSON, to check a memory profiler "
            "against."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    default_device = "cuda" if torch.cuda.is_available() else "cpu"
    model = parser.add_argument_group("model")
    model.add_argument("--model", choices=["gpt", "mlp"], default="gpt",
                       help="gpt: the transformer; mlp: Linear-ReLU-Linear-ReLU-Linear on "
                            "d_model -> 4*d_model -> 4*d_model -> vocab, whose saved activations "
                            "are also computed by hand")
    model.add_argument("--layers", type=int, default=2, help="transformer blocks")
    model.add_argument("--d-model", type=int, default=128, help="embedding width")
    model.add_argument("--heads", type=int, default=4, help="attention heads (must divide --d-model)")
    model.add_argument("--vocab", type=int, default=512, help="vocabulary size (MLP: classes)")
    model.add_argument("--seq-len", type=int, default=64, help="tokens per sequence (gpt only)")
    model.add_argument("--tie-weights", action="store_true",
                       help="share the token embedding and LM head weight (gpt only)")
    train_group = parser.add_argument_group("training")
    train_group.add_argument("--optimizer", choices=["adam", "adamw", "adafactor", "sgd"], default="adamw",
                             help="adam and adamw keep two buffers per parameter (plus a step "
                                  "counter), adafactor factored second moments (torch 2.5+), sgd "
                                  "none (one with --momentum)")
    train_group.add_argument("--lr", type=float, default=1e-3, help="learning rate")
    train_group.add_argument("--momentum", type=float, default=0.0,
                             help="SGD momentum; non-zero gives SGD one buffer per parameter")
    train_group.add_argument("--batch-size", type=int, default=8, help="sequences (MLP: rows) per step")
    train_group.add_argument("--accumulate", type=int, default=1, metavar="K",
                             help="micro-batches of --batch-size per optimizer step, gradients "
                                  "accumulated over them")
    train_group.add_argument("--steps", type=int, default=3,
                             help="training steps (forward, backward, optimizer step, zero_grad)")
    train_group.add_argument("--checkpoint", action="store_true",
                             help="activation checkpointing of each transformer block "
                                  "(torch.utils.checkpoint, use_reentrant=False; gpt only)")
    train_group.add_argument("--checkpoint-blocks", type=int, default=None, metavar="K",
                             help="selective checkpointing: only the first K blocks "
                                  "(implies --checkpoint)")
    train_group.add_argument("--bf16", action="store_true",
                             help="run forward and loss under torch.autocast(bfloat16)")
    train_group.add_argument("--inference", action="store_true",
                             help="forward only, under torch.inference_mode: no backward, no optimizer "
                                  "(--steps forward passes)")
    train_group.add_argument("--weights-dtype", choices=["float32", "bfloat16"], default="float32",
                             help="the dtype the model's parameters are stored in (bfloat16: with "
                                  "--inference only)")
    train_group.add_argument("--zero-grad-none", action=argparse.BooleanOptionalAction,
                             default=True,
                             help="zero_grad(set_to_none=...): free gradients between steps "
                                  "instead of zeroing them")
    train_group.add_argument("--compile", action="store_true", help="torch.compile the model")
    dist_group = parser.add_argument_group(
        "data parallel", "under torchrun --nproc_per_node=N every rank trains on its own batch: DDP by default")
    dist_group.add_argument("--zero1", action="store_true",
                            help="ZeRO stage 1: torch.distributed.optim.ZeroRedundancyOptimizer shards "
                                 "the optimizer state over the ranks")
    dist_group.add_argument("--tp", action="store_true",
                            help="tensor parallel instead of DDP (gpt only): each block's projections split "
                                 "over the ranks, which all see the same batch")
    dist_group.add_argument("--pp", action="store_true",
                            help="pipeline parallel instead of DDP (gpt only): the blocks split into one "
                                 "stage per rank (the embeddings with the first, the head and the loss with "
                                 "the last), 1F1B over 2 micro-batches per rank (torch.distributed.pipelining)")
    dist_group.add_argument("--fsdp", action="store_true",
                            help="FSDP2 (fully_shard of each block and the model) instead of DDP: "
                                 "parameters, gradients and optimizer state sharded")
    train_group.add_argument("--device", choices=["cpu", "cuda"], default=default_device,
                             help="where to train: cuda when a CUDA device is available, else cpu")
    train_group.add_argument("--seed", type=int, default=0, help="seed for weights and data")
    out = parser.add_argument_group("output")
    out.add_argument("--summary", type=Path, metavar="PATH",
                     help="write the JSON summary of reference numbers here")
    out.add_argument("--print", dest="print_summary", action="store_true",
                     help="print a one-line human summary")
    args = parser.parse_args(argv)

    for name in ("layers", "d_model", "heads", "vocab", "seq_len", "batch_size", "steps", "accumulate"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.d_model % args.heads != 0:
        parser.error("--heads must divide --d-model")
    if args.checkpoint_blocks is not None:
        if not 0 <= args.checkpoint_blocks <= args.layers:
            parser.error("--checkpoint-blocks must be between 0 and --layers")
        args.checkpoint = True
    if args.model == "mlp" and (args.checkpoint or args.tie_weights):
        parser.error("--checkpoint and --tie-weights apply to --model gpt only")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device available")
    if args.momentum and args.optimizer != "sgd":
        parser.error("--momentum applies to --optimizer sgd only")
    if sum((args.zero1, args.fsdp, args.tp, args.pp)) > 1:
        parser.error("--zero1, --fsdp, --tp and --pp: one way of splitting at a time")
    if (args.tp or args.pp) and args.model != "gpt":
        parser.error("--tp and --pp apply to --model gpt only")
    if args.weights_dtype != "float32" and not args.inference:
        parser.error("--weights-dtype bfloat16 applies to --inference only (training keeps 32-bit master weights)")
    if args.inference and (args.accumulate > 1 or args.checkpoint or args.zero1 or args.fsdp or args.tp or args.pp):
        parser.error("--inference: forward only, not with --accumulate, --checkpoint or a way of splitting")
    if args.pp and (args.accumulate > 1 or args.compile or args.bf16 or args.checkpoint):
        parser.error("--pp: the schedule makes the micro-batches; not with --accumulate, --compile, --bf16 "
                     "or --checkpoint")
    return args


def one_line(summary: dict) -> str:
    def mib(n: int | None) -> str:
        return "-" if n is None else f"{n / 2**20:.3f} MiB"

    losses = [loss for loss in summary["losses"] if loss is not None] or [float("nan")]
    parts = [
        f"{summary['model']} {summary['args']['optimizer']} on {summary['device']}",
        f"params {summary['parameter_count']} ({mib(summary['parameter_bytes'])})",
        f"grads {mib(summary['gradient_bytes'])}",
        f"optimizer state {mib(summary['optimizer_state_bytes'])} "
        f"({mib(summary['optimizer_state_bytes_excluding_step'])} without step)",
        f"loss {losses[0]:.4f} -> {losses[-1]:.4f}",
    ]
    if "mlp_activation_bytes_hand" in summary:
        parts.append(
            f"saved activations {summary['mlp_activation_bytes_saved_tensors']} B "
            f"(by hand {summary['mlp_activation_bytes_hand']} B)"
        )
    if "cuda" in summary:
        cuda = summary["cuda"]
        parts.append(
            f"cuda peak allocated {mib(cuda['max_memory_allocated'])}, "
            f"peak reserved {mib(cuda['max_memory_reserved'])}"
        )
    return "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    summary = train(args)
    # Path is not JSON; everything else in args is.
    summary["args"] = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    if args.summary is not None:
        path = args.summary
        if summary["world_size"] > 1:
            # One per rank: s.json -> s.rank0.json, s.rank1.json, ...
            path = path.with_name(f"{path.stem}.rank{summary['rank']}{path.suffix}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(summary, indent=2) + "\n")
    if args.print_summary:
        print(one_line(summary))
    if summary.get("mlp_activation_bytes_match") is False and not args.compile:
        # Eager mode must agree with the formula; a mismatch means PyTorch saves something else now.
        print(
            "train.py: saved-tensor bytes "
            f"{summary['mlp_activation_bytes_saved_tensors']} != hand formula "
            f"{summary['mlp_activation_bytes_hand']}",
            file=sys.stderr,
        )
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
