"""vramscope's PyTorch shim, loaded by `vramscope record` (see sitecustomize.py beside it), and by
`vramscope.record()` inside a program (`record_in_process`).

When the program imports torch, this records into the recording directory
(`VRAMSCOPE_RECORD_DIR`), as JSON lines in `torch.<pid>.jsonl` (`vramscope_log.py` lists them):

- tensor-level allocations and frees: on CUDA from the caching allocator's own history
  (`torch.cuda.memory._record_memory_history`, drained often, at exit and on OOM;
  `vramscope_cuda.py`), on the CPU from the profiler's memory events (`torch.profiler` with
  `profile_memory=True`; `vramscope_cpu.py`, which restarts it only where that is safe for the
  program);
- tags: parameters by storage with their qualified names, their gradients, optimizer state
  tensors (`exp_avg`, ...), the model's inputs (`vramscope_tags.py`);
- phases: forward, backward, optimizer step, iterations, evaluations, and each module's forward
  (`vramscope_phases.py`, called through the hooks of `vramscope_hooks.py`).

`vramscope_recorder.py` runs them for one process. `VRAMSCOPE_TORCH` picks the source: `auto`
(CUDA when available, else the CPU), `cuda`, `cpu` or `off`. Nothing here may break the program:
every hook catches its own errors, reports the first one on stderr and goes on.

This module runs at every interpreter start under `vramscope record`: it imports neither torch
nor the recorder (which does) until the program imports torch.
"""

from __future__ import annotations

import os
import sys

# Not `typing.TYPE_CHECKING`: this runs at every interpreter start, which need not import typing.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from .vramscope_recorder import Recorder

if TYPE_CHECKING or "." in __name__:  # vramscope._shim, imported by vramscope.record()
    from .vramscope_patches import TorchWatcher
else:  # written into a recording's folder by `vramscope record`, outside the package
    from vramscope_patches import TorchWatcher

_DIR = os.environ.get("VRAMSCOPE_RECORD_DIR")
_MODE = os.environ.get("VRAMSCOPE_TORCH", "auto")
# `vramscope estimate`: the GPU to run on, emulated (vramscope_emulate.py).
_EMULATE = os.environ.get("VRAMSCOPE_EMULATE")

# This process's recorder under `vramscope record`.
_recorder: Recorder | None = None


def _new_recorder(directory: str, in_process: bool) -> Recorder:
    """A recorder; its modules import torch, so only once the program has."""
    if TYPE_CHECKING or "." in __name__:
        from .vramscope_recorder import Recorder
    else:
        from vramscope_recorder import Recorder
    return Recorder(directory, in_process)


def record_in_process(directory: str, mode: str = "auto") -> Recorder:
    """Starts recording this process's PyTorch memory into `directory` (vramscope.record());
    returns the recorder, whose close() stops it and takes its hooks out again."""
    recorder = _new_recorder(directory, in_process=True)
    try:
        recorder.start(mode)
    except BaseException:
        recorder.close()
        raise
    return recorder


def _on_torch_imported() -> None:
    global _recorder
    if _EMULATE:
        # Before anything asks torch.cuda: the program runs on the emulated GPU or not at all
        # (a real GPU it cannot reach would fail it later, with a less clear message).
        if TYPE_CHECKING or "." in __name__:
            from . import vramscope_emulate
        else:
            import vramscope_emulate
        try:
            vramscope_emulate.install(_EMULATE)
        except Exception as error:
            print(f"vramscope estimate: the emulated GPU could not be set up: {error!r}", file=sys.stderr)
            raise
    if _recorder is not None or _MODE == "off" or not _DIR:
        return
    try:
        _recorder = _new_recorder(_DIR, in_process=False)
        _recorder.start(_MODE)
    except Exception as error:
        print(
            f"vramscope: the PyTorch shim could not start ({error!r}); only driver-level memory is recorded",
            file=sys.stderr,
        )


def arm() -> None:
    """Waits for the program to import torch (at once if it already has)."""
    if not _DIR or _MODE == "off":
        return
    if "torch" in sys.modules:
        _on_torch_imported()
    else:
        sys.meta_path.insert(0, TorchWatcher(_on_torch_imported, "_vramscope_wrapped", lambda: _recorder is not None))
