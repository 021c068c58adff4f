"""Trainers used the way people use them, beyond the loop shapes of `trainers.py`: a data module
with validation and logging, a LightningModule's own forward fed by a map-style Dataset, gradient
accumulation and clipping, LBFGS, accelerate's accumulation with a scheduler, a transformers
Trainer on a real (tiny, config-built) GPT-2 with evaluation. For checking what `record` on the
CPU attributes, and what it leaves `unknown`, against byte counts computed here.

    python trainer_shapes.py MODE

MODE:
  lightning-datamodule  a LightningDataModule (TensorDatasets made in setup(), train and val
                        loaders), validation_step with self.log (on_epoch), training_step logging
                        its loss, the default logger and checkpointing in a temporary directory,
                        the sanity check, Adam; 2 epochs
  lightning-forward     forward defined on the LightningModule, training_step calling self(x); a
                        map-style Dataset making each sample's tensors in __getitem__ (no
                        TensorDataset); a validation loop; AdamW with a StepLR scheduler; 2 epochs
  lightning-accumulate  accumulate_grad_batches=2, gradient_clip_val=1.0 (norm), Adam, a
                        BatchNorm layer (buffers), the val loop off; 2 epochs
  lightning-manual      manual optimization (automatic_optimization=False, manual_backward,
                        clip_gradients, an lr scheduler stepped by hand), two optimizers (Adam for
                        the body, SGD with momentum for the head); 2 epochs
  lightning-epoch-end   outputs kept for the epoch's end as Lightning 2's docs show (training_step
                        appends loss.detach() to a list, validation_step appends its predictions;
                        on_*_epoch_end stacks, logs and clears them), one epoch with a val loop
                        (memory rises a little every step, so the run's last step is its peak)
  lightning-workers     a DataLoader with num_workers=2 and persistent_workers (batches built in
                        forked workers, handed over in shared memory), Adam; 2 epochs
  lbfgs                 a plain loop over mini-batches with torch.optim.LBFGS (max_iter=4,
                        history_size=8): optimizer.step(closure), the closure zeroing, forward,
                        backward; 2 epochs
  accelerate-accumulate accelerate with gradient_accumulation_steps=2 (`with
                        accelerator.accumulate(model)`), clip_grad_norm_ on the sync steps, AdamW
                        and a LambdaLR warm-up scheduler prepared with the rest, cross-entropy on
                        int64 labels; 2 epochs
  hf-gpt2               a transformers Trainer on GPT2LMHeadModel built from GPT2Config(n_layer=2,
                        n_embd=64, ...) (no download), causal-LM batches of dicts, AdamW with
                        weight decay, gradient clipping, a linear schedule, evaluation every 8
                        steps with compute_metrics (so the eval logits are gathered); 2 epochs

Each prints one JSON line at the end, with the bytes computed here:
  parameter_bytes        unique parameters (by storage), numel * element_size
  buffer_bytes           the model's buffers (unique storages)
  gradient_bytes         what the gradients of every trainable parameter take (= their
                         parameters' bytes), the expected gradient memory between backward and
                         zero_grad
  optimizer_state_expected  Adam/AdamW: 2 x the bytes of each parameter with state + 4 per
                         parameter (state['step'], a float32 scalar tensor on the CPU); SGD with
                         momentum: 1 x (momentum_buffer); LBFGS: none expected by formula
  optimizer_state_actual the tensors in optimizer.state after training (inside lists too:
                         LBFGS's old_dirs ...), unique storages
  dataset_bytes          the tensors a dataset holds (0 for one that makes them in __getitem__),
                         val_dataset_bytes likewise, batch_bytes one training batch (x and y)
and, per mode, what else it keeps (Lightning's callback_metrics, the gathered eval logits ...).
"""

import argparse
import json
import os
import tempfile

import torch
from torch import nn

MODES = ["lightning-datamodule", "lightning-forward", "lightning-accumulate", "lightning-manual",
         "lightning-epoch-end", "lightning-workers", "lbfgs", "accelerate-accumulate", "hf-gpt2"]


def nbytes(t):
    return t.numel() * t.element_size()


def unique_bytes(tensors):
    seen, total = set(), 0
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            continue
        key = (t.device, t.untyped_storage().data_ptr())
        if key in seen:
            continue
        seen.add(key)
        total += t.untyped_storage().nbytes()
    return total


def state_tensors(optimizer):
    out = []
    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                out.append(value)
            elif isinstance(value, (list, tuple)):
                out.extend(v for v in value if isinstance(v, torch.Tensor))
    return out


def expected_state(optimizer):
    """What optimizer.state should hold, by formula from the parameters."""
    total = 0
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p not in optimizer.state:
                continue
            if isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
                total += 2 * nbytes(p) + 4
                if group.get("amsgrad"):
                    total += nbytes(p)
            elif isinstance(optimizer, torch.optim.SGD) and group.get("momentum", 0):
                total += nbytes(p)
    return total


def unwrap_optimizer(optimizer):
    """The torch optimizer inside a wrapper (accelerate's AcceleratedOptimizer, Lightning's)."""
    for _ in range(4):
        inner = getattr(optimizer, "optimizer", None)
        if inner is None or inner is optimizer:
            break
        optimizer = inner
    return optimizer


def report(model, optimizers, extra):
    params = list({id(p): p for p in model.parameters()}.values())
    out = {
        "parameter_bytes": unique_bytes(params),
        "parameter_count": sum(p.numel() for p in params),
        "buffer_bytes": unique_bytes(list(model.buffers())),
        "gradient_bytes": sum(nbytes(p) for p in params if p.requires_grad),
        "gradients_alive_at_end": unique_bytes([p.grad for p in params if p.grad is not None]),
    }
    inner = [unwrap_optimizer(o) for o in optimizers]
    out["optimizers"] = [type(o).__name__ for o in inner]
    out["optimizer_state_expected"] = sum(expected_state(o) for o in inner)
    out["optimizer_state_actual"] = sum(unique_bytes(state_tensors(o)) for o in inner)
    out["optimizer_state_step_tensors"] = [
        sum(1 for s in o.state.values() if isinstance(s.get("step"), torch.Tensor)) for o in inner]
    out.update(extra)
    print(json.dumps(out))


def mlp(features, hidden, out, norm=False):
    layers = [nn.Linear(features, hidden)]
    if norm:
        layers.append(nn.BatchNorm1d(hidden))
    layers += [nn.ReLU(), nn.Linear(hidden, out)]
    return nn.Sequential(*layers)


def trainer_kwargs(root, **kwargs):
    base = dict(accelerator="cpu", devices=1, max_epochs=2, enable_progress_bar=False, enable_model_summary=False,
                default_root_dir=root)
    base.update(kwargs)
    return base


def callback_metric_bytes(trainer):
    return unique_bytes([v for v in trainer.callback_metrics.values() if isinstance(v, torch.Tensor)])


# -- Lightning ------------------------------------------------------------------------------------


def lightning_datamodule():
    import lightning as L

    FEATURES, HIDDEN, N_TRAIN, N_VAL, BATCH = 384, 1536, 1536, 384, 96

    class Data(L.LightningDataModule):
        def __init__(self):
            super().__init__()
            self.train = self.val = None

        def setup(self, stage):
            if self.train is None:
                g = torch.Generator().manual_seed(0)
                w = torch.randn(FEATURES, FEATURES, generator=g) / FEATURES ** 0.5
                x = torch.randn(N_TRAIN + N_VAL, FEATURES, generator=g)
                y = x @ w
                self.train = torch.utils.data.TensorDataset(x[:N_TRAIN].clone(), y[:N_TRAIN].clone())
                self.val = torch.utils.data.TensorDataset(x[N_TRAIN:].clone(), y[N_TRAIN:].clone())

        def train_dataloader(self):
            return torch.utils.data.DataLoader(self.train, batch_size=BATCH, shuffle=True)

        def val_dataloader(self):
            return torch.utils.data.DataLoader(self.val, batch_size=BATCH)

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.save_hyperparameters()
            self.net = mlp(FEATURES, HIDDEN, FEATURES)

        def training_step(self, batch, index):
            x, y = batch
            loss = nn.functional.mse_loss(self.net(x), y)
            self.log("train_loss", loss, on_step=True, on_epoch=True)
            return loss

        def validation_step(self, batch, index):
            x, y = batch
            out = self.net(x)
            self.log("val_loss", nn.functional.mse_loss(out, y), on_epoch=True)
            self.log("val_mae", (out - y).abs().mean(), on_epoch=True)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    root = tempfile.mkdtemp()
    data, module = Data(), Module()
    trainer = L.Trainer(**trainer_kwargs(root))
    trainer.fit(module, datamodule=data)
    report(module, trainer.optimizers, {
        "dataset_bytes": sum(nbytes(t) for t in data.train.tensors),
        "val_dataset_bytes": sum(nbytes(t) for t in data.val.tensors),
        "batch_bytes": 2 * BATCH * FEATURES * 4,
        "callback_metrics": sorted(trainer.callback_metrics),
        "callback_metric_bytes": callback_metric_bytes(trainer),
    })


class Synthetic(torch.utils.data.Dataset):
    """A map-style dataset that makes each sample when asked (as one that reads files would)."""

    def __init__(self, size, features, classes=None, seed=0):
        self.size, self.features, self.classes, self.seed = size, features, classes, seed

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        g = torch.Generator().manual_seed(self.seed * 100003 + index)
        x = torch.randn(self.features, generator=g)
        if self.classes is None:
            return x, torch.tanh(x.flip(0))
        return x, torch.randint(self.classes, (), generator=g)


def lightning_forward():
    import lightning as L

    FEATURES, HIDDEN, BATCH = 512, 2048, 64

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.GELU())
            self.decoder = nn.Linear(HIDDEN, FEATURES)

        def forward(self, x):
            return self.decoder(self.encoder(x))

        def training_step(self, batch, index):
            x, y = batch
            loss = nn.functional.mse_loss(self(x), y)
            self.log("loss", loss, prog_bar=True)
            return {"loss": loss, "mean_out": loss.detach()}

        def validation_step(self, batch, index):
            x, y = batch
            self.log("val_loss", nn.functional.mse_loss(self(x), y))

        def configure_optimizers(self):
            optimizer = torch.optim.AdamW(self.parameters(), lr=1e-3, weight_decay=0.01)
            return {"optimizer": optimizer,
                    "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)}

    root = tempfile.mkdtemp()
    module = Module()
    train = torch.utils.data.DataLoader(Synthetic(BATCH * 8, FEATURES), batch_size=BATCH, shuffle=True)
    val = torch.utils.data.DataLoader(Synthetic(BATCH * 2, FEATURES, seed=1), batch_size=BATCH)
    trainer = L.Trainer(**trainer_kwargs(root, logger=False, enable_checkpointing=False))
    trainer.fit(module, train, val)
    report(module, trainer.optimizers, {
        "dataset_bytes": 0, "val_dataset_bytes": 0,
        "batch_bytes": 2 * BATCH * FEATURES * 4,
        "callback_metrics": sorted(trainer.callback_metrics),
        "callback_metric_bytes": callback_metric_bytes(trainer),
    })


def lightning_accumulate():
    import lightning as L

    FEATURES, HIDDEN, BATCH, N = 512, 2048, 32, 512

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = mlp(FEATURES, HIDDEN, FEATURES, norm=True)

        def training_step(self, batch, index):
            x, y = batch
            return nn.functional.smooth_l1_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    torch.manual_seed(0)
    dataset = torch.utils.data.TensorDataset(torch.randn(N, FEATURES), torch.randn(N, FEATURES))
    module = Module()
    trainer = L.Trainer(**trainer_kwargs(tempfile.mkdtemp(), logger=False, enable_checkpointing=False,
                                         accumulate_grad_batches=2, gradient_clip_val=1.0,
                                         gradient_clip_algorithm="norm", limit_val_batches=0))
    trainer.fit(module, torch.utils.data.DataLoader(dataset, batch_size=BATCH, shuffle=True))
    report(module, trainer.optimizers, {
        "dataset_bytes": sum(nbytes(t) for t in dataset.tensors),
        "batch_bytes": 2 * BATCH * FEATURES * 4,
        "callback_metrics": sorted(trainer.callback_metrics),
        "callback_metric_bytes": callback_metric_bytes(trainer),
    })


def lightning_manual():
    import lightning as L

    FEATURES, HIDDEN, CLASSES, BATCH, N = 512, 2048, 256, 64, 512

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False
            self.body = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU())
            self.head = nn.Linear(HIDDEN, CLASSES)

        def training_step(self, batch, index):
            body_opt, head_opt = self.optimizers()
            x, y = batch
            loss = nn.functional.cross_entropy(self.head(self.body(x)), y)
            body_opt.zero_grad()
            head_opt.zero_grad()
            self.manual_backward(loss)
            self.clip_gradients(body_opt, gradient_clip_val=1.0, gradient_clip_algorithm="norm")
            body_opt.step()
            head_opt.step()
            self.log("loss", loss)
            if self.trainer.is_last_batch:
                self.lr_schedulers().step()

        def configure_optimizers(self):
            body = torch.optim.Adam(self.body.parameters(), lr=1e-3)
            head = torch.optim.SGD(self.head.parameters(), lr=1e-2, momentum=0.9)
            return [body, head], [torch.optim.lr_scheduler.ExponentialLR(body, 0.9)]

    torch.manual_seed(0)
    dataset = torch.utils.data.TensorDataset(torch.randn(N, FEATURES), torch.randint(CLASSES, (N,)))
    module = Module()
    trainer = L.Trainer(**trainer_kwargs(tempfile.mkdtemp(), logger=False, enable_checkpointing=False))
    trainer.fit(module, torch.utils.data.DataLoader(dataset, batch_size=BATCH, shuffle=True))
    report(module, trainer.optimizers, {
        "dataset_bytes": sum(nbytes(t) for t in dataset.tensors),
        "batch_bytes": BATCH * FEATURES * 4 + BATCH * 8,
        "callback_metrics": sorted(trainer.callback_metrics),
        "callback_metric_bytes": callback_metric_bytes(trainer),
    })


def lightning_epoch_end():
    import lightning as L

    FEATURES, HIDDEN, BATCH, N, N_VAL = 512, 2048, 64, 512, 256

    class Module(L.LightningModule):
        """Outputs kept for the epoch's end, as Lightning 2's docs show in place of the removed
        training_epoch_end / validation_epoch_end."""

        def __init__(self):
            super().__init__()
            self.net = mlp(FEATURES, HIDDEN, FEATURES)
            self.training_step_outputs, self.validation_step_outputs = [], []

        def training_step(self, batch, index):
            x, y = batch
            loss = nn.functional.mse_loss(self.net(x), y)
            self.training_step_outputs.append(loss.detach())
            return loss

        def on_train_epoch_end(self):
            self.log("train_loss_epoch", torch.stack(self.training_step_outputs).mean())
            self.training_step_outputs.clear()

        def validation_step(self, batch, index):
            x, y = batch
            pred = self.net(x)
            self.validation_step_outputs.append(pred)
            self.log("val_loss", nn.functional.mse_loss(pred, y))

        def on_validation_epoch_end(self):
            preds = torch.cat(self.validation_step_outputs)
            self.log("val_pred_std", preds.std())
            self.validation_step_outputs.clear()

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    torch.manual_seed(0)
    train = torch.utils.data.TensorDataset(torch.randn(N, FEATURES), torch.randn(N, FEATURES))
    val = torch.utils.data.TensorDataset(torch.randn(N_VAL, FEATURES), torch.randn(N_VAL, FEATURES))
    module = Module()
    trainer = L.Trainer(**trainer_kwargs(tempfile.mkdtemp(), max_epochs=1, logger=False, enable_checkpointing=False))
    trainer.fit(module, torch.utils.data.DataLoader(train, batch_size=BATCH, shuffle=True),
                torch.utils.data.DataLoader(val, batch_size=BATCH))
    report(module, trainer.optimizers, {
        "dataset_bytes": sum(nbytes(t) for t in train.tensors),
        "val_dataset_bytes": sum(nbytes(t) for t in val.tensors),
        "batch_bytes": 2 * BATCH * FEATURES * 4,
        "val_outputs_bytes": N_VAL * FEATURES * 4,
        "callback_metrics": sorted(trainer.callback_metrics),
        "callback_metric_bytes": callback_metric_bytes(trainer),
    })


def lightning_workers():
    import lightning as L

    FEATURES, HIDDEN, BATCH, N = 512, 2048, 64, 512

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = mlp(FEATURES, HIDDEN, FEATURES)

        def training_step(self, batch, index):
            x, y = batch
            return nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    torch.manual_seed(0)
    dataset = torch.utils.data.TensorDataset(torch.randn(N, FEATURES), torch.randn(N, FEATURES))
    loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, shuffle=True, num_workers=2,
                                         persistent_workers=True)
    module = Module()
    trainer = L.Trainer(**trainer_kwargs(tempfile.mkdtemp(), logger=False, enable_checkpointing=False))
    trainer.fit(module, loader)
    report(module, trainer.optimizers, {
        "dataset_bytes": sum(nbytes(t) for t in dataset.tensors),
        "batch_bytes": 2 * BATCH * FEATURES * 4,
    })


# -- plain LBFGS ----------------------------------------------------------------------------------


def lbfgs():
    FEATURES, HIDDEN, BATCH, N = 256, 1024, 128, 512
    torch.manual_seed(0)
    dataset = torch.utils.data.TensorDataset(torch.randn(N, FEATURES), torch.randn(N, FEATURES))
    loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, shuffle=True)
    net = mlp(FEATURES, HIDDEN, FEATURES)
    optimizer = torch.optim.LBFGS(net.parameters(), lr=0.5, max_iter=4, history_size=8)
    for _ in range(2):
        for x, y in loader:
            def closure():
                optimizer.zero_grad()
                loss = nn.functional.mse_loss(net(x), y)
                loss.backward()
                return loss

            optimizer.step(closure)
    params = sum(nbytes(p) for p in net.parameters())
    state = next(iter(optimizer.state.values()))
    report(net, [optimizer], {
        "dataset_bytes": sum(nbytes(t) for t in dataset.tensors),
        "batch_bytes": 2 * BATCH * FEATURES * 4,
        # LBFGS keeps its state under the first parameter: flat vectors of all parameters.
        "lbfgs_history": len(state.get("old_dirs", [])),
        "lbfgs_flat_vector_bytes": params,
        "lbfgs_state_keys": sorted(state),
    })


# -- accelerate -----------------------------------------------------------------------------------


def accelerate_accumulate():
    from accelerate import Accelerator

    FEATURES, HIDDEN, CLASSES, BATCH, N = 512, 2048, 512, 32, 512
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    torch.manual_seed(0)
    dataset = torch.utils.data.TensorDataset(torch.randn(N, FEATURES), torch.randint(CLASSES, (N,)))
    loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, shuffle=True)
    net = mlp(FEATURES, HIDDEN, CLASSES)
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 4))
    net, optimizer, loader, scheduler = accelerator.prepare(net, optimizer, loader, scheduler)
    losses = []
    for _ in range(2):
        net.train()
        for x, y in loader:
            with accelerator.accumulate(net):
                loss = nn.functional.cross_entropy(net(x), y)
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(net.parameters(), 1.0)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            losses.append(accelerator.gather(loss.detach()).item())
    report(accelerator.unwrap_model(net), [optimizer], {
        "dataset_bytes": sum(nbytes(t) for t in dataset.tensors),
        "batch_bytes": BATCH * FEATURES * 4 + BATCH * 8,
        "steps": len(losses),
    })


# -- transformers Trainer -------------------------------------------------------------------------


def hf_gpt2():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    VOCAB, SEQ, N_TRAIN, N_EVAL, BATCH = 2048, 64, 128, 64, 16
    config = GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=64, n_layer=2, n_head=4)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)

    class Tokens(torch.utils.data.Dataset):
        def __init__(self, n, seed):
            self.ids = torch.randint(VOCAB, (n, SEQ), generator=torch.Generator().manual_seed(seed))

        def __len__(self):
            return len(self.ids)

        def __getitem__(self, index):
            return {"input_ids": self.ids[index], "labels": self.ids[index]}

    def metrics(prediction):
        logits, labels = prediction
        logits = logits[0] if isinstance(logits, tuple) else logits
        return {"accuracy": float((logits[:, :-1].argmax(-1) == labels[:, 1:]).mean())}

    train, evaluation = Tokens(N_TRAIN, 0), Tokens(N_EVAL, 1)
    args = TrainingArguments(output_dir=os.path.join(tempfile.mkdtemp(), "out"), per_device_train_batch_size=BATCH,
                             per_device_eval_batch_size=BATCH, num_train_epochs=2, use_cpu=True, report_to=[],
                             save_strategy="no", eval_strategy="steps", eval_steps=8, logging_steps=4,
                             disable_tqdm=True, optim="adamw_torch", weight_decay=0.01, max_grad_norm=1.0,
                             learning_rate=1e-3, lr_scheduler_type="linear", warmup_steps=2,
                             dataloader_num_workers=0)
    trainer = Trainer(model=model, args=args, train_dataset=train, eval_dataset=evaluation, compute_metrics=metrics)
    trainer.train()
    report(model, [trainer.optimizer], {
        "dataset_bytes": nbytes(train.ids), "val_dataset_bytes": nbytes(evaluation.ids),
        "batch_bytes": 2 * BATCH * SEQ * 8,
        "eval_logits_bytes": N_EVAL * SEQ * VOCAB * 4,
        "tied_embeddings": model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr(),
        "decay_groups": [len(g["params"]) for g in trainer.optimizer.param_groups],
    })


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=MODES)
    args = parser.parse_args()
    torch.manual_seed(0)
    {
        "lightning-datamodule": lightning_datamodule,
        "lightning-forward": lightning_forward,
        "lightning-accumulate": lightning_accumulate,
        "lightning-manual": lightning_manual,
        "lightning-epoch-end": lightning_epoch_end,
        "lightning-workers": lightning_workers,
        "lbfgs": lbfgs,
        "accelerate-accumulate": accelerate_accumulate,
        "hf-gpt2": hf_gpt2,
    }[args.mode]()


if __name__ == "__main__":
    main()
