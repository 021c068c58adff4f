"""Real PyTorch profiler output on the CPU, in every file form the profiler writes, for vramscope's
import tests. Run with the PyTorch venv:

    python profiler_corpus.py OUT_DIR            one process
    torchrun --nproc_per_node=2 profiler_corpus.py OUT_DIR     one trace per rank (gloo), with
                                                               the profiler's distributedInfo

Writes, from one profiled run of a small MLP trained with Adam (2 steps):

* chrome.json                  prof.export_chrome_trace(...)
* chrome.json.gz               prof.export_chrome_trace("....json.gz") (the profiler gzips it)
* tb/*.pt.trace.json.gz        tensorboard_trace_handler(dir, use_gzip=True), what trace tools keep
* timeline.json                prof.export_memory_timeline(..., device="cpu")
* timeline.json.gz             the same, gzipped by the profiler
* timeline.raw.json.gz         the raw export
* facts.json                   what the program itself knows: its parameter bytes, its rank

Under torchrun only the Chrome trace of each rank is written, as rank{N}.pt.trace.json.gz.
"""

import json
import os
import sys

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler


def train(steps, prof):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256))
    if torch.distributed.is_initialized():
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(steps):
        x = torch.randn(64, 256)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        prof.step()
    return sum(p.untyped_storage().nbytes() for p in model.parameters())


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    distributed = "RANK" in os.environ
    if distributed:
        torch.distributed.init_process_group("gloo")
        rank = torch.distributed.get_rank()
        tb = os.path.join(out_dir, f"tb{rank}")
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True,
                     schedule=schedule(wait=0, warmup=1, active=2),
                     on_trace_ready=tensorboard_trace_handler(tb, worker_name=f"rank{rank}", use_gzip=True)) as prof:
            params = train(3, prof)
        (name,) = os.listdir(tb)
        os.replace(os.path.join(tb, name), os.path.join(out_dir, f"rank{rank}.pt.trace.json.gz"))
        os.rmdir(tb)
        with open(os.path.join(out_dir, f"facts{rank}.json"), "w") as f:
            json.dump({"rank": rank, "world_size": torch.distributed.get_world_size(), "parameter_bytes": params}, f)
        torch.distributed.destroy_process_group()
        return
    tb = os.path.join(out_dir, "tb")
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True,
                 schedule=schedule(wait=0, warmup=1, active=2),
                 on_trace_ready=tensorboard_trace_handler(tb, use_gzip=True)) as prof:
        prof.add_metadata("run_name", "vramscope-corpus")
        params = train(3, prof)
    # Unscheduled sessions for the exports of a whole run (a trace can be saved once per session).
    for name in ["chrome.json", "chrome.json.gz"]:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True,
                     with_stack=True) as prof:
            train(2, prof)
        prof.export_chrome_trace(os.path.join(out_dir, name))
    for name in ["timeline.json", "timeline.json.gz", "timeline.raw.json.gz"]:
        prof.export_memory_timeline(os.path.join(out_dir, name), device="cpu")
    with open(os.path.join(out_dir, "facts.json"), "w") as f:
        json.dump({"parameter_bytes": params, "torch": torch.__version__}, f)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: profiler_corpus.py OUT_DIR")
    main(sys.argv[1])
