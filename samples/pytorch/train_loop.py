"""train.py's training: the optimizer, the batch, and the loop that trains (or, with
--inference, only runs forward) for --steps and gathers the summary of reference numbers.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn
from train_counting import cuda_summary, optimizer_state_summary, tensor_bytes, unique_parameters
from train_models import (
    GPT,
    MLP,
    SavedTensorCounter,
    mlp_dims,
    mlp_saved_bytes_by_hand,
    quantize_int4,
    quantize_int8,
)
from train_parallel import PipelineStage, pipeline_schedule, start_distributed, wrap_distributed


def make_optimizer(args: argparse.Namespace, params: list[nn.Parameter]) -> torch.optim.Optimizer:
    if args.optimizer == "adam":
        cls, kwargs = torch.optim.Adam, {"lr": args.lr}
    elif args.optimizer == "adamw":
        cls, kwargs = torch.optim.AdamW, {"lr": args.lr}
    elif args.optimizer == "adafactor":
        cls, kwargs = torch.optim.Adafactor, {"lr": args.lr}
    elif args.optimizer == "adamw8bit":
        # bitsandbytes' 8-bit AdamW (its moments in 8 bits in blocks of 256, each with a 32-bit
        # scale; parameters under 4096 elements keep 32-bit moments). On the host too.
        import bitsandbytes

        return bitsandbytes.optim.AdamW8bit(params, lr=args.lr)
    else:
        cls, kwargs = torch.optim.SGD, {"lr": args.lr, "momentum": args.momentum}
    if args.foreach is not None:
        kwargs["foreach"] = args.foreach
    if args.fused:
        kwargs["fused"] = True
    if args.zero1:
        # ZeRO stage 1: each rank keeps the optimizer state of its share of the parameters.
        from torch.distributed.optim import ZeroRedundancyOptimizer

        return ZeroRedundancyOptimizer(params, optimizer_class=cls, **kwargs)
    return cls(params, **kwargs)


def with_lora(model: nn.Module, rank: int) -> nn.Module:
    """The model with rank-`rank` LoRA adapters (peft) on every linear layer of its blocks, and
    every other weight frozen: what a LoRA fine-tune trains."""
    from peft import LoraConfig, get_peft_model

    targets = ["q_proj", "k_proj", "v_proj", "out_proj", "fc_in", "fc_out"]
    return get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=targets))


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
    if args.int8_weights:
        model = quantize_int8(model)
    if args.int4_weights:
        model = quantize_int4(model)
    if args.lora is not None:
        model = with_lora(model, args.lora)
    named = unique_parameters(model)
    parameter_bytes = sum(tensor_bytes(p) for _, p in named)
    if world > 1 and not args.pp:
        model = wrap_distributed(args, model, device)
        # FSDP swaps in sharded parameters: what the optimizer and the counts see.
        named = unique_parameters(model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model)
        if args.tp and world % args.heads != 0 and args.heads % world != 0:
            raise SystemExit("--tp: the ranks must divide --heads")
    # Frozen weights (LoRA's base model) have no gradients and no optimizer state.
    named = [(name, p) for name, p in named if p.requires_grad]
    params = [p for _, p in named]
    # --offload-optimizer: the optimizer keeps fp32 copies of the parameters on the host and steps
    # there (its state is the host's); each step takes the gradients to the host first.
    masters = [p.detach().to("cpu", copy=True) for p in params] if args.offload_optimizer else None
    optimizer = None if args.inference else make_optimizer(args, masters if masters is not None else params)
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
    autocast = torch.autocast(
        device_type=device.type, dtype=torch.float16 if args.fp16 else torch.bfloat16, enabled=args.bf16 or args.fp16
    )
    # fp16's range needs the loss scaled (and the gradients unscaled before the step).
    scaler = torch.amp.GradScaler(device.type) if args.fp16 else None
    start_s = time.perf_counter()
    if args.inference:
        summary.update(gradient_bytes=0, gradient_tensors=0, optimizer_state_bytes=0,
                       optimizer_state_bytes_excluding_step=0)
    for step in range(args.steps if args.inference else 0):
        with torch.inference_mode(not args.no_inference_mode), autocast:
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
            scaled = loss / args.accumulate if args.accumulate > 1 else loss
            (scaler.scale(scaled) if scaler is not None else scaled).backward()
            del logits
        if step == 0:
            grads = [p.grad for p in params if p.grad is not None]
            summary["gradient_bytes"] = sum(tensor_bytes(g) for g in grads)
            summary["gradient_tensors"] = len(grads)
            # Holding them would keep this step's gradients alive through the next backward.
            del grads
        if masters is not None:
            for p, master in zip(params, masters):
                master.grad = None if p.grad is None else p.grad.to("cpu")
                p.grad = None
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        if masters is not None:
            with torch.no_grad():
                for p, master in zip(params, masters):
                    p.copy_(master)
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
