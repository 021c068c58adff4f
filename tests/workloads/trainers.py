"""One model, one dataset, one optimizer, in the loop shapes trainers give it: the workloads that
attribution is held to across loop shapes (`tests/tests/pytorch.rs`).

    python trainers.py MODE

MODE:
  plain      the loop written out: zero_grad, forward, backward, step
  closure    optimizer.step(closure), forward and backward inside the step (as LBFGS needs)
  lightning  a Lightning Trainer (which calls optimizer.step(closure) itself)
  accelerate Hugging Face accelerate: the model, optimizer and loader prepared by an Accelerator
             (the optimizer wrapped, the loader re-made), accelerator.backward
  compiled   the plain loop with the model torch.compile'd (Inductor, C++ on the CPU)
  hf-trainer a Hugging Face transformers Trainer (a PreTrainedModel returning its loss, batches
             of dicts, AdamW without weight decay, no gradient clipping: Adam's memory)

Each prints one JSON line: the bytes of the parameters and of the dataset.
"""

import argparse
import json
import os
import tempfile

import torch
from torch import nn

BATCH, FEATURES, HIDDEN, BATCHES = 64, 512, 2048, 8


def model() -> nn.Module:
    return nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, FEATURES))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["plain", "closure", "compiled", "lightning", "accelerate", "hf-trainer"])
    args = parser.parse_args()
    torch.manual_seed(0)
    dataset = torch.utils.data.TensorDataset(torch.randn(BATCH * BATCHES, FEATURES), torch.randn(BATCH * BATCHES, FEATURES))
    loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH)
    if args.mode == "lightning":
        import lightning as L

        class Module(L.LightningModule):
            def __init__(self):
                super().__init__()
                self.net = model()

            def training_step(self, batch, index):
                x, y = batch
                return nn.functional.mse_loss(self.net(x), y)

            def configure_optimizers(self):
                return torch.optim.Adam(self.parameters(), lr=1e-3)

        net = Module()
        trainer = L.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False)
        trainer.fit(net, loader)
    elif args.mode == "hf-trainer":
        from transformers import PretrainedConfig, PreTrainedModel, Trainer, TrainingArguments

        class Config(PretrainedConfig):
            model_type = "vramscope-mlp"

        class Model(PreTrainedModel):
            config_class = Config

            def __init__(self, config):
                super().__init__(config)
                self.net = model()

            def forward(self, x, y):
                return {"loss": nn.functional.mse_loss(self.net(x), y)}

        class Pairs(torch.utils.data.Dataset):
            def __len__(self):
                return len(dataset)

            def __getitem__(self, index):
                x, y = dataset[index]
                return {"x": x, "y": y}

        net = Model(Config())
        training = TrainingArguments(output_dir=os.path.join(tempfile.mkdtemp(), "out"), per_device_train_batch_size=BATCH,
                                     num_train_epochs=2, use_cpu=True, report_to=[], save_strategy="no",
                                     logging_strategy="no", disable_tqdm=True, optim="adamw_torch", weight_decay=0.0,
                                     max_grad_norm=0.0, learning_rate=1e-3, dataloader_num_workers=0)
        Trainer(model=net, args=training, train_dataset=Pairs()).train()
    elif args.mode == "accelerate":
        from accelerate import Accelerator

        accelerator = Accelerator(cpu=True)
        net = model()
        optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
        net, optimizer, prepared = accelerator.prepare(net, optimizer, loader)
        for _ in range(2):
            for x, y in prepared:
                optimizer.zero_grad()
                accelerator.backward(nn.functional.mse_loss(net(x), y))
                optimizer.step()
    else:
        net = model()
        optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
        step_model = torch.compile(net) if args.mode == "compiled" else net
        for _ in range(2):
            for x, y in loader:
                if args.mode == "closure":
                    def closure():
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(net(x), y)
                        loss.backward()
                        return loss

                    optimizer.step(closure)
                else:
                    optimizer.zero_grad()
                    nn.functional.mse_loss(step_model(x), y).backward()
                    optimizer.step()
    parameters = sum(p.numel() * p.element_size() for p in net.parameters())
    data = sum(t.numel() * t.element_size() for t in dataset.tensors)
    print(json.dumps({"parameter_bytes": parameters, "dataset_bytes": data}))


if __name__ == "__main__":
    main()
