"""A training loop with two optimizers (SGD with momentum on the embedding, AdamW on the rest) and
a DataLoader with worker processes, for vramscope's recording tests. Prints one JSON line with
the exact bytes of what each optimizer keeps and of the parameters."""
import json
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Tokens(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, index):
        g = torch.Generator().manual_seed(index)
        return torch.randint(0, 256, (33,), generator=g)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(256, 64)
        self.body = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))
        self.head = nn.Linear(64, 256)

    def forward(self, tokens):
        return self.head(self.body(self.embed(tokens)))


def nbytes(t):
    return t.untyped_storage().nbytes()


def main():
    context = sys.argv[1] if len(sys.argv) > 1 else "fork"
    torch.manual_seed(0)
    model = Model()
    sgd = torch.optim.SGD(model.embed.parameters(), lr=0.1, momentum=0.9)
    rest = [p for n, p in model.named_parameters() if not n.startswith("embed.")]
    adamw = torch.optim.AdamW(rest, lr=1e-3)
    loader = DataLoader(Tokens(), batch_size=16, num_workers=2, multiprocessing_context=context)
    for batch in loader:
        logits = model(batch[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, 256), batch[:, 1:].reshape(-1))
        loss.backward()
        sgd.step()
        adamw.step()
        sgd.zero_grad()
        adamw.zero_grad()
    state = lambda opt: sum(nbytes(v) for s in opt.state.values() for v in s.values() if torch.is_tensor(v))
    print(json.dumps({
        "parameter_bytes": sum(nbytes(p) for p in model.parameters()),
        "embed_bytes": sum(nbytes(p) for p in model.embed.parameters()),
        "sgd_state_bytes": state(sgd),
        "adamw_state_bytes": state(adamw),
        "batch_bytes": 16 * 32 * 8,
    }))


if __name__ == "__main__":
    main()
