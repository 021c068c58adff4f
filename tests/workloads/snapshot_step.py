"""A training step recorded the way people record one for PyTorch's memory viewer: a GPT (the
sample's) trained with AdamW for two steps, then `torch.cuda.memory._record_memory_history()`
around the third, and `_dump_snapshot(OUT)`: the model, its optimizer's state and nothing else
allocated before the window. Run it on a GPU or under `vramscope estimate`.

    python snapshot_step.py OUT.pickle [--checkpoint] [--optimizer adamw|sgd]
"""

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "samples" / "pytorch"))
from train_models import GPT


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("--checkpoint", action="store_true", help="checkpoint every block's activations")
    parser.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    args = parser.parse_args()
    # 384 wide: no weight is 1 MiB, the size of cuBLASLt's workspace (PyTorch keeps one per
    # thread that multiplies: one from before the window, one backward's thread makes in it),
    # which would leave a weight's size with a block over that no size can place.
    config = argparse.Namespace(
        vocab=512, d_model=384, heads=4, layers=4, seq_len=128,
        checkpoint=args.checkpoint, checkpoint_blocks=None, tie_weights=False,
    )
    torch.manual_seed(0)
    model = GPT(config).cuda()
    if args.optimizer == "sgd":
        optimizer: torch.optim.Optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = torch.randint(config.vocab, (8, config.seq_len), device="cuda")

    def step() -> None:
        logits = model(tokens)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, config.vocab), tokens.view(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(2):
        step()
    torch.cuda.memory._record_memory_history(max_entries=100_000)
    step()
    torch.cuda.memory._dump_snapshot(args.out)


if __name__ == "__main__":
    main()
