"""A small GPT-like model trained for a few steps on the CPU with AdamW, its memory recorded by
PyTorch's profiler (`profile_memory=True`) as a Chrome trace: the pair of runs at two context
lengths is what `vramscope diff` compares phase by phase (tests/tests/phases.rs).

    python phases.py --seq-len 16 --out a.json
    vramscope record -o a.vtrace -- python phases.py --seq-len 16 --no-profile

Without the profiler (`--no-profile`) it is the same loop for `vramscope record`, whose PyTorch
shim records the phases and names every tensor.

The embedding and output layers are large and the activations small, so the optimizer step is
where memory peaks at both lengths while the forward and backward passes grow with the context.
No phase is named by the script: the profiler's own `ProfilerStep#N` and `Optimizer.step#...`
ranges and its backward operators are what the phases are told by.
"""

import argparse

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, d_model, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = nn.MultiheadAttention(d_model, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class Model(nn.Module):
    def __init__(self, vocab, d_model, heads, layers, seq_len):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.zeros(seq_len, d_model))
        self.blocks = nn.ModuleList(Block(d_model, heads) for _ in range(layers))
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens):
        x = self.tok(tokens) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seq-len", type=int, required=True)
    parser.add_argument("--out", help="the Chrome trace to write")
    parser.add_argument("--no-profile", action="store_true", help="run without the profiler")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(0)
    vocab, d_model = 16000, 128
    model = Model(vocab, d_model, 4, 2, args.seq_len)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, vocab, (args.batch_size, args.seq_len + 1))

    def step():
        logits = model(tokens[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
        loss.backward()
        # Nothing of the step's activations is kept into the optimizer step.
        del logits, loss
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    if args.no_profile:
        for _ in range(args.steps):
            step()
        return
    if not args.out:
        parser.error("--out is needed with the profiler")
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities, profile_memory=True) as prof:
        for _ in range(args.steps):
            step()
            prof.step()
    prof.export_chrome_trace(args.out)


if __name__ == "__main__":
    main()
