"""Runs samples/pytorch/train.py with PyTorch's allocator history on and writes the snapshot:
snapshot_run.py OUT.pickle -- TRAIN_ARGS... (GPU only)."""
import pickle
import runpy
import sys

import torch

out = sys.argv[1]
args = sys.argv[sys.argv.index("--") + 1:]
torch.cuda.memory._record_memory_history(max_entries=2_000_000)
sys.argv = ["samples/pytorch/train.py", *args]
try:
    runpy.run_path("samples/pytorch/train.py", run_name="__main__")
except SystemExit as e:
    if e.code not in (0, None):
        raise
with open(out, "wb") as f:
    pickle.dump(torch.cuda.memory._snapshot(), f)
