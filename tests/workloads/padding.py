"""Fine-tuning on sequences of different lengths, as people batch them: a DataLoader whose collate
function pads every batch to a fixed length (`--pad max`, what a tokenizer's
`padding="max_length"` makes) or only to the batch's longest sequence (`--pad longest`, dynamic
padding, what `DataCollatorWithPadding` does). A small Llama-style model (transformers, made
here), AdamW, the padding masked out of attention and of the loss. Both settings see the same
sequences in the same order.

    python padding.py [--pad max|longest] [--steps N] [--batch B] [--max-length T]
                      [--lengths MIN,MAX]

Prints one JSON line: each batch's padded length and longest sequence.
"""

from __future__ import annotations

import argparse
import json

import torch


class Sequences(torch.utils.data.Dataset):
    """Token sequences of lengths drawn between `low` and `high` (a text dataset, tokenized)."""

    def __init__(self, count: int, low: int, high: int, vocab: int) -> None:
        generator = torch.Generator().manual_seed(0)
        lengths = torch.randint(low, high + 1, (count,), generator=generator)
        self.items = [torch.randint(1, vocab, (int(n),), generator=generator) for n in lengths]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.items[index]


def collate(batch: list[torch.Tensor], length: int | None) -> dict[str, torch.Tensor]:
    """Pads to `length`, or to the longest in the batch when None: ids padded with 0, the
    attention mask 0 there, the labels -100 (ignored by the loss)."""
    width = length if length is not None else max(len(t) for t in batch)
    ids = torch.zeros(len(batch), width, dtype=torch.long)
    mask = torch.zeros(len(batch), width, dtype=torch.long)
    for row, tokens in enumerate(batch):
        ids[row, : len(tokens)] = tokens
        mask[row, : len(tokens)] = 1
    labels = ids.masked_fill(mask == 0, -100)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pad", choices=["max", "longest"], default="max")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--lengths", default="16,80", help="the sequences' shortest and longest, MIN,MAX")
    args = parser.parse_args()
    import transformers

    low, high = (int(n) for n in args.lengths.split(","))
    if not 1 <= low <= high <= args.max_length:
        parser.error("--lengths MIN,MAX: 1 <= MIN <= MAX <= --max-length")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=4, vocab_size=2048, max_position_embeddings=args.max_length, use_cache=False,
    )
    model = transformers.LlamaForCausalLM(config)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    length = args.max_length if args.pad == "max" else None
    loader = torch.utils.data.DataLoader(
        Sequences(args.steps * args.batch, low, high, config.vocab_size),
        batch_size=args.batch,
        collate_fn=lambda batch: collate(batch, length),
    )
    seen = []
    for batch in loader:
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        seen.append([batch["input_ids"].shape[1], int(batch["attention_mask"].sum(1).max())])
    print(json.dumps({"batches": seen}))


if __name__ == "__main__":
    main()
