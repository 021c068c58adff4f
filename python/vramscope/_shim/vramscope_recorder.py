"""The PyTorch shim's recorder of one process: it picks where allocations come from (the CUDA
allocator's history, `vramscope_cuda`; the CPU profiler, `vramscope_cpu`), installs the hooks
that mark phases and tag tensors (`vramscope_hooks`, `vramscope_phases`, `vramscope_tags`), reads
the allocations into the log (`vramscope_log`) at the ends of phases, on a timer, on an OOM and
at exit, and, inside the program, takes everything out again when it stops.

Imported once the program has imported torch (by `vramscope_torch`).
"""

from __future__ import annotations

import atexit
import os
import socket
import sys
import threading
import time
from typing import TYPE_CHECKING, Callable

import torch

if TYPE_CHECKING:
    from .vramscope_emulate import Emulation

if TYPE_CHECKING or "." in __name__:  # vramscope._shim, imported by vramscope.record()
    from .vramscope_cpu import CpuAllocations
    from .vramscope_cuda import CudaHistory, has_cuda_device
    from .vramscope_hooks import install as install_hooks
    from .vramscope_log import Log
    from .vramscope_phases import Phases
    from .vramscope_tags import Tagger
else:  # written into a recording's folder by `vramscope record`, outside the package
    from vramscope_cpu import CpuAllocations
    from vramscope_cuda import CudaHistory, has_cuda_device
    from vramscope_hooks import install as install_hooks
    from vramscope_log import Log
    from vramscope_phases import Phases
    from vramscope_tags import Tagger

# Drain the allocator's history (or restart the CPU profiler) at most this often, at the end of an
# optimizer step; and always at exit.
_DRAIN_EVERY_S = float(os.environ.get("VRAMSCOPE_TORCH_DRAIN_S", "1.0"))
# And on a timer (CUDA), for programs without optimizer steps.
_DRAIN_TIMER_S = float(os.environ.get("VRAMSCOPE_TORCH_DRAIN_TIMER_S", "2.0"))


def _multiprocessing_child() -> bool:
    """Whether this process was started by multiprocessing (spawn or forkserver)."""
    process = sys.modules.get("multiprocessing.process")
    if process is None:
        return False
    # While a spawned child unpickles its task (when it imports torch) it is "inheriting" and
    # already has its name; its parent is known only afterwards.
    current = process.current_process()
    return (
        getattr(process, "_parent_process", None) is not None
        or getattr(current, "_inheriting", False)
        or current.name != "MainProcess"
    )


def _emulation() -> Emulation | None:
    """The emulated GPU this process runs on (`vramscope estimate`), if it was set up."""
    module = sys.modules.get("vramscope._shim.vramscope_emulate") or sys.modules.get("vramscope_emulate")
    current = getattr(module, "current", None)
    return current() if current is not None else None


def _number(name: str) -> int | None:
    """An environment variable's whole number, if it holds one."""
    value = os.environ.get(name)
    return int(value) if value is not None and value.isdigit() else None


class Recorder:
    """Recording of one process, from `start` to `close`.

    In process (`vramscope.record()`): started and stopped by the program, inside it; what it
    installed is taken out again when it stops. Otherwise (`vramscope record`) it records until
    the process exits."""

    def __init__(self, directory: str, in_process: bool = False) -> None:
        self.in_process = in_process
        self.log = Log(directory)
        self.drain_lock = threading.Lock()
        # What takes out each thing installed, in the order installed.
        self.undo: list[Callable[[], None]] = []
        self.tagger = Tagger(self.log)
        self.phases = Phases(self.log, self.tagger, self)
        self.cuda = CudaHistory(self.log)
        # The CPU source, when allocations come from the profiler.
        self.cpu: CpuAllocations | None = None
        # Where allocations come from: `cuda`, `cpu`, or `driver` (the hook's records only).
        self.source: str | None = None
        self.last_drain = time.monotonic()

    @property
    def closed(self) -> bool:
        return self.log.closed

    # -- start -----------------------------------------------------------------------------------

    def start(self, mode: str) -> None:
        """Starts recording from `mode`: `auto` (CUDA when available, else the CPU), `cuda` or
        `cpu`."""
        if mode == "auto":
            mode = "cuda" if has_cuda_device() else "cpu"
        if mode == "cpu" and _multiprocessing_child():
            # A DataLoader worker or another multiprocessing child: its CPU allocations are not
            # the training's, and the profiler is not safe to stop in a process torn down that
            # way. (On CUDA, children such as mp.spawn'd ranks are recorded.)
            self.log.close(remove=True)
            return
        self.source = mode
        # Where the process runs in a (multi-node) run, as torchrun tells it: its global rank,
        # its node (GROUP_RANK) and its rank on the node.
        self.log.write(
            {
                "t": "meta",
                "pid": self.log.pid,
                "torch": torch.__version__,
                "source": mode,
                "argv": sys.argv,
                "time": self.log.now(),
                "rank": _number("RANK"),
                "world_size": _number("WORLD_SIZE"),
                "node": _number("GROUP_RANK"),
                "local_rank": _number("LOCAL_RANK"),
                "host": socket.gethostname(),
                "in_process": self.in_process,
            }
        )
        emulation = _emulation()
        if emulation is not None:
            # `vramscope estimate`: where the program read values the emulated GPU cannot give.
            emulation.log = lambda line: self.log.safe(self.log.write, line)
        if mode == "cuda":
            undo = self.cuda.note_allocator_conf()
            if undo is not None:
                self.undo.append(undo)
            # Not now: starting the history initialises CUDA, which a program may not want yet
            # (it may fork first, or set CUDA_VISIBLE_DEVICES). PyTorch runs this when it
            # initialises CUDA itself (at once if it already has).
            lazy = getattr(torch.cuda, "_lazy_call", None)
            if lazy is not None:
                lazy(lambda: self.log.safe(self.start_history))
            else:
                self.start_history()
        elif mode == "cpu":
            self.cpu = CpuAllocations(self.log, self.drain, lambda: self.phases.backward_depth > 0)
            self.undo.extend(self.cpu.start())
        atexit.register(self.close)
        os.register_at_fork(after_in_child=self.forked)
        self.undo.extend(install_hooks(self.log, self.phases, self.tagger))

    def start_history(self) -> None:
        """Starts the CUDA allocator's history (once CUDA is initialised), and its readers."""
        if self.closed or os.getpid() != self.log.pid:
            return
        if not self.cuda.start():
            self.source = "driver"
            return
        self.undo.append(self.cuda.taking_snapshot.install(torch))
        if self.in_process:
            self.log.safe(self.cuda.note_alive_at_start)
        observer = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
        if observer is not None:
            observer(self.on_oom)
        # Also drained on a timer, for programs without an optimizer step to drain at.
        threading.Thread(target=self.drain_every, name="vramscope-drain", daemon=True).start()

    # -- reading allocations ---------------------------------------------------------------------

    def drain(self, restart: bool = True) -> None:
        """Writes the allocations not written yet (on the CPU, `restart` starts the profiler
        again)."""
        with self.drain_lock:
            if not self.closed:
                self.drain_locked(restart)

    def drain_locked(self, restart: bool) -> None:
        try:
            if self.source == "cuda":
                self.cuda.drain()
            elif self.source == "cpu" and self.cpu is not None:
                self.cpu.drain(restart)
        except Exception as error:
            self.log.warn("reading allocations", error)
        self.log.flush()
        self.last_drain = time.monotonic()

    def drain_every(self) -> None:
        while not self.closed:
            time.sleep(_DRAIN_TIMER_S)
            if time.monotonic() - self.last_drain >= _DRAIN_TIMER_S:
                self.drain()

    def drain_if_due(self) -> None:
        if time.monotonic() - self.last_drain < _DRAIN_EVERY_S:
            return
        if self.cpu is not None:
            # Inside the step's own range: the profiler is restarted where that is safe.
            self.cpu.request()
        else:
            self.drain()

    def on_oom(self, device: int, requested: int, device_allocated: int, device_free: int) -> None:
        self.log.safe(self.drain)

    # The ends of phases (`vramscope_phases.PhaseEnds`).

    def forward_ended(self) -> None:
        if self.cpu is not None:
            # Programs without an optimizer step (inference) drain here.
            self.drain_if_due()

    def backward_ended(self) -> None:
        if self.cpu is not None:
            self.cpu.at_safe_point()

    def step_ended(self) -> None:
        self.drain_if_due()

    # -- end -------------------------------------------------------------------------------------

    def close(self) -> None:
        if self.closed:
            return
        self.log.safe(self.phases.end_evaluation)
        self.drain(restart=False)
        emulation = _emulation()
        if emulation is not None:
            # `vramscope estimate`: the emulated allocator's own peaks (its blocks as it sizes them).
            for allocator in emulation.allocators:
                self.log.write(
                    {
                        "t": "counters",
                        "dev": allocator.device,
                        "peak_allocated": allocator.peak_allocated,
                        "peak_reserved": allocator.peak_reserved,
                    }
                )
            for backend, calls in emulation.attention.items():
                self.log.write({"t": "attention", "backend": backend, "calls": calls})
        if self.cpu is not None:
            self.log.safe(self.cpu.close)
        if self.in_process:
            # The program goes on: everything installed comes out again, and the allocator's
            # history stops if this recording started it.
            for undo in reversed(self.undo):
                self.log.safe(undo)
            self.undo = []
            if self.cuda.started:
                self.log.safe(torch.cuda.memory._record_memory_history, None)
        # On the CPU, a process that never ran a model (a launcher such as torchrun's agent, a
        # helper) is not the training: its allocations would only blur the picture. Inside
        # the program (vramscope.record()) the block is what was asked for, model or not.
        self.log.close(remove=self.source == "cpu" and not self.tagger.roots and not self.in_process)

    def forked(self) -> None:
        # A forked child (a DataLoader worker, say) records nothing of its own: its copy of the
        # profiler and of this file are the parent's. Its locks may have been held by a thread
        # that does not exist in it: they are replaced.
        self.log.forked()
        self.drain_lock = threading.Lock()
