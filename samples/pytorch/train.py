#!/usr/bin/env python3
"""A small GPT-style (or MLP) training run whose memory numbers are known exactly.

vramscope records this script and checks what it measured against the reference numbers the script
writes with --summary: parameter, gradient and optimizer-state bytes counted from the tensors
themselves, and on CUDA the caching allocator's own counters. None of those numbers come from a
profiler, so they can prove one.

Pure PyTorch (peft for `--lora` only). Run `python train.py --help` for the options.

The script parses the command line and writes the summary; the rest lives in the modules beside
it: train_models.py (the GPT and the MLP, and the MLP's saved activations by hand),
train_counting.py (bytes of parameters, gradients and optimizer state), train_parallel.py (the
ways of splitting over ranks under torchrun) and train_loop.py (the training loop).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from train_loop import train

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
    train_group.add_argument("--optimizer", choices=["adam", "adamw", "adamw8bit", "adafactor", "sgd"],
                             default="adamw",
                             help="adam and adamw keep two buffers per parameter (plus a step "
                                  "counter), adamw8bit the same in 8 bits (bitsandbytes), adafactor "
                                  "factored second moments (torch 2.5+), sgd none (one with --momentum)")
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
    train_group.add_argument("--fp16", action="store_true",
                             help="run forward and loss under torch.autocast(float16), the loss "
                                  "scaled by a GradScaler (training on one process)")
    train_group.add_argument("--inference", action="store_true",
                             help="forward only, under torch.inference_mode: no backward, no optimizer "
                                  "(--steps forward passes)")
    train_group.add_argument("--no-inference-mode", action="store_true",
                             help="--inference without torch.inference_mode: autograd records the "
                                  "graph (and keeps what it saves) though nothing goes backward")
    train_group.add_argument("--int8-weights", action="store_true",
                             help="--inference with every linear layer's weight quantised to int8 "
                                  "(one scale per output; torch's int8 weight-only matrix product)")
    train_group.add_argument("--int4-weights", action="store_true",
                             help="--inference on the host with every linear layer whose inputs split "
                                  "into groups of 128 quantised to 4 bits (a scale and zero point per "
                                  "group; torch's int4 weight-only matrix product for the CPU)")
    train_group.add_argument("--weights-dtype", choices=["float32", "bfloat16"], default="float32",
                             help="the dtype the model's parameters are stored in (bfloat16: with "
                                  "--inference only)")
    train_group.add_argument("--zero-grad-none", action=argparse.BooleanOptionalAction,
                             default=True,
                             help="zero_grad(set_to_none=...): free gradients between steps "
                                  "instead of zeroing them")
    train_group.add_argument("--foreach", action=argparse.BooleanOptionalAction, default=None,
                             help="the optimizer's multi-tensor step (foreach=True) or its loop over "
                                  "parameters (foreach=False); PyTorch's default when not given")
    train_group.add_argument("--fused", action="store_true",
                             help="the optimizer's fused step (fused=True; Adam and AdamW)")
    train_group.add_argument("--offload-optimizer", action="store_true",
                             help="keep the optimizer's state on the host and step there, the "
                                  "gradients taken to it first (CPU offload, as ZeRO-Offload does)")
    train_group.add_argument("--lora", type=int, default=None, metavar="R",
                             help="fine-tune rank-R LoRA adapters on the blocks' linear layers "
                                  "(peft), every other weight frozen (gpt only)")
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
    if args.fused and (args.optimizer not in ("adam", "adamw") or args.foreach):
        parser.error("--fused applies to --optimizer adam or adamw, without --foreach")
    if args.lora is not None and (args.model != "gpt" or args.lora < 1 or args.inference or args.zero1 or args.fsdp
                                  or args.tp or args.pp):
        parser.error("--lora R: R at least 1, --model gpt, training on one process")
    if args.offload_optimizer and (args.inference or args.zero1 or args.fsdp or args.tp or args.pp or args.lora):
        parser.error("--offload-optimizer: training on one process, without --lora")
    if args.fp16 and (args.bf16 or args.inference or args.pp or args.zero1 or args.fsdp or args.offload_optimizer):
        parser.error("--fp16: training on one process, without --bf16")
    if args.int8_weights and not args.inference:
        parser.error("--int8-weights applies to --inference only")
    if args.int4_weights and (not args.inference or args.device != "cpu" or args.int8_weights):
        parser.error("--int4-weights applies to --inference on --device cpu only, without --int8-weights "
                     "(the GPU's int4 kernel packs differently: torchao's int4_weight_only does it there)")
    if args.no_inference_mode and not args.inference:
        parser.error("--no-inference-mode applies to --inference only")
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
