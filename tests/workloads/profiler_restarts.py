"""A CPU training loop that opens ranges the way real programs do, and checks that PyTorch's
profiler is never started while a range that began under an earlier one is still open.

Starting it then makes PyTorch write into the stopped profiler's freed memory when that range
ends: the heap is corrupt and the program dies later, now and then. This script sees every start
and stop of the profiler (PyTorch's `_enable_profiler` / `_disable_profiler`, whoever calls
them), every range (the two operators every `record_function` begins and ends in) and the
autograd engine's run, and exits 3 naming each start made inside one that began under a
profiler.

What it runs: a range around each iteration and each forward (none with `--no-ranges`), the
optimizer step (PyTorch's own `Optimizer.step#SGD.step` range around it and its hooks),
backward; with `--step-in-backward` optimizer steps taken inside backward (a hook per parameter,
as PyTorch's "optimizer step in backward" recipe does); with `--grad-checkpoint` gradients from
`torch.autograd.grad` through a checkpointed block (its forward runs again inside the engine) and
no optimizer; with `--own-profiler` its own profiler over one iteration; with `--raw-range` a
range opened with the operator under `record_function`, which no Python hook sees end; with
`--naive-restart` a profiler restarted inside each optimizer step (what must be caught).

Prints one JSON line: profiler starts and stops seen, iterations, and the bytes of the tensors it
still holds at the end (from the tensors themselves).
"""

import argparse
import contextlib
import json
import os
import sys

import torch
import torch.autograd.profiler as autograd_profiler

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--own-profiler", action="store_true")
parser.add_argument("--step-in-backward", action="store_true")
parser.add_argument("--raw-range", action="store_true")
parser.add_argument("--no-ranges", action="store_true", help="no record_function of its own")
parser.add_argument("--grad-checkpoint", action="store_true",
                    help="gradients by torch.autograd.grad through a checkpointed block, no optimizer")
parser.add_argument("--naive-restart", action="store_true",
                    help="restart a profiler inside the optimizer step itself (what must be caught)")
args = parser.parse_args()

running = False
starts = 0
stops = 0
# Ranges open now, by handle: [name, whether a profiler was running when it began].
open_ranges = {}
violations = []
real_enable, real_disable = autograd_profiler._enable_profiler, autograd_profiler._disable_profiler


def enable(*a, **k):
    global running, starts
    for name, under_profiler in open_ranges.values():
        if under_profiler:
            violations.append(f"profiler started inside {name!r}, which began under an earlier profiler")
    if violations and args.naive_restart:
        # Caught before the real start: going on would corrupt the heap (what is being shown),
        # and the process could die of it before it reports.
        for v in sorted(set(violations)):
            print(f"violation: {v}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(3)
    starts += 1
    result = real_enable(*a, **k)
    running = True
    return result


def disable(*a, **k):
    global running, stops
    stops += 1
    running = False
    return real_disable(*a, **k)


autograd_profiler._enable_profiler = enable
autograd_profiler._disable_profiler = disable

# Every range `record_function` opens (and this script's raw one) begins and ends in these two
# operators: they are wrapped where the class looks them up, so a range is open exactly from the
# moment the real operator began it to the moment the real one ended it.
real_enter_new = torch.ops.profiler._record_function_enter_new
real_exit = torch.ops.profiler._record_function_exit


def enter_new(name, args=None):
    record = real_enter_new(name, args)
    open_ranges[id(record)] = [name, running]
    return record


class Exit:
    def __call__(self, record):
        real_exit(record)
        open_ranges.pop(id(record), None)

    def _RecordFunction(self, record):
        real_exit._RecordFunction(record)
        open_ranges.pop(id(record), None)


torch.ops.profiler._record_function_enter_new = enter_new
torch.ops.profiler._record_function_exit = Exit()

# The autograd engine (backward and torch.autograd.grad) runs its nodes' ranges inside this call.
real_engine = torch.autograd._engine_run_backward


def engine(*a, **k):
    key = object()
    open_ranges[id(key)] = ["the autograd engine", running]
    try:
        return real_engine(*a, **k)
    finally:
        del open_ranges[id(key)]


torch.autograd._engine_run_backward = engine


def ranged(name):
    return contextlib.nullcontext() if args.no_ranges else autograd_profiler.record_function(name)


torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))
params = list(model.parameters())
if args.step_in_backward:
    per_param = {p: torch.optim.SGD([p], lr=0.01) for p in params}

    def step_now(param):
        per_param[param].step()
        per_param[param].zero_grad()

    for p in params:
        p.register_post_accumulate_grad_hook(step_now)
else:
    optimizer = torch.optim.SGD(params, lr=0.01, momentum=0.9)

naive = {}
if args.naive_restart:
    from torch.profiler import ProfilerActivity, profile

    def restart(opt, a, k):
        naive["p"].stop()
        naive["p"] = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        naive["p"].start()

    import importlib

    importlib.import_module("torch.optim.optimizer").register_optimizer_step_post_hook(restart)
    naive["p"] = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    naive["p"].start()

kept = []
raw = None
for step in range(args.steps):
    if args.raw_range and step == 1:
        raw = torch.ops.profiler._record_function_enter_new("raw range", None)
    own = None
    if args.own_profiler and step == 2:
        own = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True)
        own.start()
    with ranged(f"iteration {step}"):
        kept.append(torch.ones(1 << 20, dtype=torch.uint8))
        x = torch.randn(64, 256)
        with ranged("forward"):
            if args.grad_checkpoint:
                from torch.utils.checkpoint import checkpoint

                hidden = checkpoint(model[:2], x, use_reentrant=False)
                loss = model[2](hidden).square().mean()
            else:
                loss = model(x).square().mean()
        if args.grad_checkpoint:
            grads = torch.autograd.grad(loss, params)
            with torch.no_grad():
                for p, g in zip(params, grads):
                    p.sub_(0.01 * g)
        else:
            loss.backward()
            if not args.step_in_backward:
                optimizer.step()
                optimizer.zero_grad()
    if own is not None:
        own.stop()
    if raw is not None and step == args.steps - 2:
        torch.ops.profiler._record_function_exit._RecordFunction(raw)
        raw = None

if naive:
    naive["p"].stop()


def live_bytes():
    """The bytes of every tensor storage this script still holds, from the tensors themselves."""
    tensors = kept + params + [x, loss] + [p.grad for p in params if p.grad is not None]
    optimizers = list(per_param.values()) if args.step_in_backward else ([] if args.grad_checkpoint else [optimizer])
    for opt in optimizers:
        for state in opt.state.values():
            tensors += [v for v in state.values() if torch.is_tensor(v)]
    if args.grad_checkpoint:
        tensors += list(grads) + [hidden]
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return sum(storages.values())


print(json.dumps({"starts": starts, "stops": stops, "steps": args.steps, "live_bytes": live_bytes()}))
if violations:
    for v in sorted(set(violations)):
        print(f"violation: {v}", file=sys.stderr)
    sys.exit(3)
