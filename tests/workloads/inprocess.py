"""A model built, then trained for three steps with Adam on the CPU: run plainly (under
`vramscope record`) or with the training inside `vramscope.record(OUT)` (--inside OUT), so that
the two recordings of the same work can be compared."""

import argparse

import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--inside", metavar="OUT", help="record the training in process, to OUT")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(128, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = [(torch.randn(64, 128), torch.randint(0, 10, (64,))) for _ in range(3)]

    def train() -> None:
        for x, y in data:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    if args.inside:
        import vramscope

        with vramscope.record(args.inside):
            train()
    else:
        train()


if __name__ == "__main__":
    main()
