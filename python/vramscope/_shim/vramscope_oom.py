"""Catching a CUDA out-of-memory error without a relaunch: `vramscope.capture_oom(DIR)`,
`vramscope run -- CMD`, `python -m vramscope train.py` and `VRAMSCOPE_CAPTURE_OOM=DIR` all arm
this. Once torch has initialised CUDA, the caching allocator keeps a ring of its most recent
events (with Python stacks); when an allocation fails, PyTorch calls the observer below before it
raises: the allocator's state and that ring are written to DIR as a memory snapshot
(`oom-<host>-<pid>-<n>.pickle`, which vramscope, and PyTorch's memory_viz, read) and the first
lines of `vramscope info --oom` are printed on stderr. Then the exception goes on as it would.

Nothing here may break the program: every step catches its own errors and says them once.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading

# Not `typing.TYPE_CHECKING`: this runs at every interpreter start under `vramscope run`, which
# need not import typing.
TYPE_CHECKING = False
if TYPE_CHECKING or "." in __name__:  # vramscope._shim, imported by vramscope.capture_oom()
    from .vramscope_patches import TorchWatcher, WithoutLazyInductor
else:  # written into a folder on PYTHONPATH by `vramscope run`, outside the package
    from vramscope_patches import TorchWatcher, WithoutLazyInductor

# Allocator events kept (a ring: the newest replace the oldest), so memory stays bounded over a
# long run; VRAMSCOPE_OOM_HISTORY sets it.
_HISTORY = int(os.environ.get("VRAMSCOPE_OOM_HISTORY", "100000"))
# Snapshots written per process at most (a loop that catches OOMs, a batch-size finder).
_MOST = int(os.environ.get("VRAMSCOPE_OOM_MOST", "3"))
# Lines of the post-mortem printed.
_LINES = 14


class _State:
    """The capture of this process."""

    def __init__(self) -> None:
        #: The directory armed (absolute), once armed.
        self.armed: str | None = None
        #: Snapshots written so far.
        self.written = 0
        #: Held while the snapshot is taken (see vramscope_patches.WithoutLazyInductor).
        self.taking = WithoutLazyInductor()


_lock = threading.Lock()
_state = _State()


def _say(text: str) -> None:
    with contextlib.suppress(Exception):
        print(f"vramscope: {text}", file=sys.stderr, flush=True)


def _binary() -> str | None:
    found = os.environ.get("VRAMSCOPE_BIN")
    if found:
        return found
    try:
        from vramscope._binary import binary  # the Python package, where it is installed

        return binary()
    except Exception:
        import shutil

        return shutil.which("vramscope")


def arm(directory: str) -> str:
    """From now on (once this process imports torch and initialises CUDA), a CUDA out-of-memory
    error leaves a snapshot in `directory`. Returns the directory armed (the first one: arming
    again changes nothing)."""
    with _lock:
        # Once per process, whichever copy of this module arms it (the package's, or the one
        # `vramscope run` puts on PYTHONPATH).
        armed = getattr(sys, "_vramscope_oom_armed", None)
        if armed is not None:
            return str(armed)
        _state.armed = armed = os.path.abspath(directory)
        # On `sys`, which both copies share (an attribute of ours, unknown to its type: setattr).
        setattr(sys, "_vramscope_oom_armed", armed)  # noqa: B010
    if "torch" in sys.modules:
        _on_torch()
    else:
        sys.meta_path.insert(0, TorchWatcher(_on_torch, "_vramscope_oom"))
    return armed


def _on_torch() -> None:
    try:
        import torch

        # Nothing is asked of CUDA here (asking initialises it, which a program that forks first
        # must not have): what follows runs when the program initialises CUDA itself, if ever.
        if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
            return
        lazy = getattr(torch.cuda, "_lazy_call", None)
        if lazy is not None:
            lazy(_start)
        else:
            _start()
    except Exception as error:
        _say(f"out-of-memory capture is off: {error!r}")


def _start() -> None:
    try:
        import torch

        if not getattr(torch.cuda.memory, "_vramscope_history", False):
            torch.cuda.memory._record_memory_history(max_entries=_HISTORY, context="all", stacks="python")
        # The snapshot at the OOM does not import torch._inductor (vramscope_patches says why).
        _state.taking.install(torch)
        # Private, and missing from torch's type stubs.
        torch._C._cuda_attach_out_of_memory_observer(_observer)  # type: ignore[attr-defined]
    except Exception as error:
        _say(f"out-of-memory capture is off: {error!r}")


def _observer(device: int, requested: int, device_allocated: int, device_free: int) -> None:
    try:
        import torch

        with _lock:
            if _state.written >= _MOST:
                return
            _state.written += 1
            n = _state.written
        directory = _state.armed
        if directory is None:
            return
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, f"oom-{socket.gethostname()}-{os.getpid()}-{n}.pickle")
        with _state.taking:
            torch.cuda.memory._dump_snapshot(path)
        _say(f"CUDA out of memory on cuda:{device} (asked for {requested:,} bytes): what led to it is in {path}")
        binary = _binary()
        if binary:
            done = subprocess.run(
                [binary, "info", "--oom", path], capture_output=True, text=True, timeout=120, check=False
            )
            lines = [line for line in done.stdout.splitlines() if line.strip()][:_LINES]
            for line in lines:
                print(f"vramscope:   {line}", file=sys.stderr)
            print(f"vramscope: `vramscope {path} --view oom` opens it", file=sys.stderr, flush=True)
    except Exception as error:
        _say(f"the out-of-memory snapshot was not written: {error!r}")
