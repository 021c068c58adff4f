#!/usr/bin/env python3
"""The advisor's remedy table for docs/BENCHMARKS.md, in one run: for each remedy that one
process on this machine's CPU can run (and data parallelism, under torchrun with gloo), a
program recorded without the change, `vramscope advise` on it (`--gpus 2` for data
parallelism), and the same program recorded with the change made; the projection beside the
measured peak (allocated bytes, `vramscope info`).

    scripts/bench_remedies.py BIN TORCH_PYTHON

Prints a Markdown table. The programs are samples/pytorch/train.py (the default 2-layer GPT,
AdamW, batch 8 x 64, fp32, 3 steps; `small` is batch 1 x 16 at width 256, where the optimizer's
step is the peak) and tests/workloads/finetune.py (Llama- and GPT-2-style models loaded with
from_pretrained and fine-tuned; LoRA through peft).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRAIN = [str(REPO / "samples" / "pytorch" / "train.py"), "--device", "cpu", "--steps", "3"]
FINETUNE = [str(REPO / "tests" / "workloads" / "finetune.py")]
GROWTH = [str(REPO / "tests" / "workloads" / "growth.py")]
PADDING = [str(REPO / "tests" / "workloads" / "padding.py")]
SMALL = ["--batch-size", "1", "--seq-len", "16", "--d-model", "256"]
BIN, PYTHON = sys.argv[1], sys.argv[2]

# (remedy id, program, arguments without the change, arguments with it)
CASES = [
    ("activation_checkpointing", TRAIN, [], ["--checkpoint"]),
    ("micro_batch_half", TRAIN, [], ["--batch-size", "4", "--accumulate", "2"]),
    ("sequence_half", TRAIN, [], ["--seq-len", "32"]),
    ("sgd", TRAIN, [], ["--optimizer", "sgd"]),
    ("adafactor", TRAIN, [], ["--optimizer", "adafactor"]),
    ("adam_8bit", TRAIN, [], ["--optimizer", "adamw8bit"]),
    ("amp_bf16", TRAIN, [], ["--bf16"]),
    ("amp_fp16", TRAIN, [], ["--fp16"]),
    ("bf16_weights", TRAIN, ["--inference"], ["--inference", "--weights-dtype", "bfloat16"]),
    ("int8_weights", TRAIN, ["--inference"], ["--inference", "--int8-weights"]),
    ("int4_weights", TRAIN, ["--inference"], ["--inference", "--int4-weights"]),
    ("zero_grad_set_to_none", TRAIN, ["--no-zero-grad-none"], []),
    ("tied_embeddings", TRAIN, [], ["--tie-weights"]),
    ("fused_optimizer_step", TRAIN, SMALL + ["--foreach"], SMALL + ["--fused"]),
    ("foreach_off", TRAIN, SMALL + ["--foreach"], SMALL + ["--no-foreach"]),
    ("lora", TRAIN, [], ["--lora", "8"]),
    ("lora", TRAIN, SMALL, SMALL + ["--lora", "8"]),
    ("lora", FINETUNE, ["--arch", "llama"], ["--arch", "llama", "--lora", "8"]),
    ("lora", FINETUNE, ["--arch", "gpt2"], ["--arch", "gpt2", "--lora", "8"]),
    # Against the training's high point: on the host, loading in 4 bits peaks reading the whole
    # 32-bit checkpoint, which on a GPU stays on the host.
    ("qlora", FINETUNE, ["--arch", "llama"], ["--arch", "llama", "--qlora", "8"]),
    ("no_grad", TRAIN, ["--inference", "--no-inference-mode"], ["--inference"]),
    # Evaluation without no_grad, against the same loop under it (the output's cache kept).
    ("no_grad", FINETUNE, ["--arch", "llama", "--evaluate", "grad"], ["--arch", "llama", "--evaluate", "no-grad"]),
    ("no_grad", FINETUNE, ["--arch", "gpt2", "--evaluate", "grad"], ["--arch", "gpt2", "--evaluate", "no-grad"]),
    # Batches padded to 128 tokens by the collate function, against each padded to its longest.
    ("dynamic_padding", PADDING, ["--pad", "max"], ["--pad", "longest"]),
    # A validation loss kept with its graph every iteration, against the loop keeping loss.item().
    ("drop_kept", GROWTH, ["loss-list"], ["loss-item"]),
    # Data parallelism over 2: against rank 0 of the DDP run (torchrun, gloo, batch 4 per rank).
    ("data_parallel", TRAIN, [], ["--batch-size", "4"]),
    # Together: a fine-tune's usual answers, among the pairs and threes the advice lists.
    ("micro_batch_half+activation_checkpointing+lora", TRAIN, [],
     ["--batch-size", "4", "--accumulate", "2", "--checkpoint", "--lora", "8"]),
    ("activation_checkpointing+lora", TRAIN, [], ["--checkpoint", "--lora", "8"]),
    ("amp_bf16+lora", TRAIN, [], ["--bf16", "--lora", "8"]),
]


def run(*args: str) -> str:
    done = subprocess.run([BIN, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"vramscope {' '.join(args)}: {done.stderr}")
    return done.stdout


def record(directory: Path, name: str, program: list[str], args: list[str]) -> Path:
    trace = directory / f"{name}.vtrace"
    run("record", "-o", str(trace), "--", PYTHON, *program, *args)
    return trace


def record_ranks(directory: Path, name: str, program: list[str], args: list[str]) -> Path:
    trace = directory / f"{name}.vtrace"
    torchrun = str(Path(PYTHON).with_name("torchrun"))
    run("record", "-o", str(trace), "--", torchrun, "--nproc_per_node=2", "--master_port=29651", *program, *args)
    return directory / f"{name}.rank0.vtrace"


def peak(trace: Path) -> int:
    return int(json.loads(run("info", "--json", str(trace)))["devices"][0]["peak_allocated_bytes"])


def training_high_point(trace: Path) -> int:
    phases = json.loads(run("info", "--json", str(trace)))["devices"][0]["phases"]["highest"]
    return max(int(p["high_bytes"]) for p in phases)


def main() -> None:
    print("| remedy | recorded without | recorded with | projected | measured | error | stated ± | how |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        baselines: dict[tuple[str, ...], tuple[Path, dict]] = {}
        for i, (remedy, program, without, with_) in enumerate(CASES):
            # Data parallelism is projected over 2 GPUs; the rest on the one the run had.
            gpus = ["--gpus=2"] if remedy == "data_parallel" else []
            key = (program[0], *without, *gpus)
            if key not in baselines:
                trace = record(directory, f"base{i}", program, without)
                baselines[key] = (trace, json.loads(run("advise", "--json", *gpus, str(trace))))
            _, advice = baselines[key]
            rows = advice["remedies"] + advice["combinations"]
            row = next((r for r in rows if r["id"] == remedy), None)
            if row is None:
                sys.exit(f"{remedy} not proposed for {without}")
            if remedy == "data_parallel":
                measured = peak(record_ranks(directory, f"changed{i}", program, with_))
            elif remedy == "qlora":
                measured = training_high_point(record(directory, f"changed{i}", program, with_))
            else:
                measured = peak(record(directory, f"changed{i}", program, with_))
            projected = int(row["projected_peak_allocated_bytes"])
            error = 100.0 * (projected - measured) / measured
            name = Path(program[0]).name
            print(
                f"| {row['name']} | `{name} {' '.join(without)}` | `{' '.join(with_)}` | {projected:,} | "
                f"{measured:,}{' (training)' if remedy == 'qlora' else ''} | {error:+.2f}% | {100 * row['uncertainty']:.0f}% | {row['method']} |"
            )
            sys.stdout.flush()


if __name__ == "__main__":
    main()
