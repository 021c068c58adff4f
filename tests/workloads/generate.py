"""Inference loops on the CPU, leaking and not: a small decoder called once per step under
torch.no_grad(), the workloads the growth finding is tested on for runs without a backward pass
(`tests/tests/growth.rs`).

    python generate.py MODE [--steps N]

MODE:
  logits       generation without a cache (the whole sequence each step), each step's last
               logits kept in a list: a leak of batch x vocabulary floats a step
  cache        generation with a key/value cache: each step's keys and values (from the
               attention's k_proj and v_proj) kept for the steps after it, what generation does
  cache-leak   the cache, and the logits kept too: the cache is by design, the logits are not
  clean        generation without a cache, nothing kept but the tokens: each step works on a
               longer sequence, and frees it
  eval         an evaluation loop over batches, the accuracy kept as a Python float
  eval-leak    the evaluation loop keeping each batch's outputs
"""

import argparse

import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.q_proj = nn.Linear(d, d)
        self.k_proj = nn.Linear(d, d)
        self.v_proj = nn.Linear(d, d)
        self.o_proj = nn.Linear(d, d)

    def forward(self, h, cache=None):
        q, k, v = self.q_proj(h), self.k_proj(h), self.v_proj(h)
        if cache is not None:
            cache[0].append(k)
            cache[1].append(v)
            k, v = torch.cat(cache[0], dim=1), torch.cat(cache[1], dim=1)
        scores = torch.softmax(q @ k.transpose(1, 2) / k.shape[-1] ** 0.5, dim=-1)
        return self.o_proj(scores @ v)


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.attn = Attention(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.n1 = nn.LayerNorm(d)
        self.n2 = nn.LayerNorm(d)

    def forward(self, x, cache=None):
        x = x + self.attn(self.n1(x), cache)
        return x + self.mlp(self.n2(x))


class Decoder(nn.Module):
    def __init__(self, vocab=4096, d=256, layers=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(layers))
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens, caches=None):
        x = self.emb(tokens)
        for i, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[i])
        return self.head(x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["logits", "cache", "cache-leak", "clean", "eval", "eval-leak"])
    parser.add_argument("--steps", type=int, default=24)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = Decoder().eval()
    kept = []
    with torch.no_grad():
        if args.mode.startswith("eval"):
            for _ in range(args.steps):
                out = model(torch.randint(0, 4096, (8, 64)))
                kept.append(out if args.mode == "eval-leak" else out.argmax(-1).float().mean().item())
        else:
            tokens = torch.randint(0, 4096, (128, 1))
            caches = [([], []) for _ in model.blocks] if args.mode.startswith("cache") else None
            step_input = tokens
            for _ in range(args.steps):
                logits = model(step_input if caches is not None else tokens, caches)
                following = logits[:, -1].argmax(-1, keepdim=True)
                tokens = torch.cat([tokens, following], dim=1)
                step_input = following
                if args.mode in ("logits", "cache-leak"):
                    kept.append(logits[:, -1].clone())
    print(f"done: {args.mode}, {args.steps} steps, kept {len(kept)}")


if __name__ == "__main__":
    main()
