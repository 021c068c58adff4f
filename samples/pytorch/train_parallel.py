"""train.py's ways of splitting over ranks under torchrun: joining the process group, DDP, FSDP2
or tensor parallelism around the model, and the stages and 1F1B schedule of pipeline parallelism.
"""

from __future__ import annotations

import argparse
import inspect
import os

import torch
import torch.nn.functional as F
from torch import nn
from train_models import GPT


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
    # Every rank builds the model from the same seed, so DDP's check at construction (a broadcast
    # of one flattened copy of every parameter) would confirm what is known. Skipped where this
    # PyTorch can (`init_sync`, 2.4 on): on the CPU that copy is freed by gloo's thread now and
    # then, which the CPU recording (PyTorch's profiler, on the threads it runs on) cannot see,
    # and the copy would stay alive in the trace to the end.
    kwargs: dict[str, object] = {}
    if "init_sync" in inspect.signature(nn.parallel.DistributedDataParallel.__init__).parameters:
        kwargs["init_sync"] = False
    return nn.parallel.DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None, **kwargs
    )


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
