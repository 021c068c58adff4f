"""Recording inside the program: ``with vramscope.record("run.vtrace"):``."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
from types import TracebackType
from typing import TYPE_CHECKING

from ._binary import binary
from ._errors import VramscopeError, VramscopeFileExists, VramscopeUsageError

if TYPE_CHECKING:
    from ._shim.vramscope_recorder import Recorder

__all__ = ["record"]


class record(contextlib.ContextDecorator):
    """Records the PyTorch memory of the code inside it, in this process, to a ``.vtrace``.

    The same tags (parameter, gradient, optimizer state, activation, input), phases (forward,
    backward, optimizer step, iterations, each module's forward) and stacks as
    ``vramscope record -- python ...``, without relaunching the program: CUDA memory from the
    caching allocator's history, CPU memory from the profiler when there is no GPU. The trace
    is written when the block ends, when an exception (an out-of-memory error among them)
    leaves it, or when the process exits inside it; open it with ``vramscope FILE``.

    What it cannot see, unlike ``vramscope record``: memory that does not pass through PyTorch's
    allocator (NCCL buffers, other libraries' own ``cudaMalloc``), and the allocation of what was
    alive before the block began (its frees are seen).

    Args:
        path: the ``.vtrace`` to write. An existing file is replaced only with ``force=True``.
        source: ``"auto"`` (CUDA when available, else the CPU), ``"cuda"`` or ``"cpu"``.
        force: replace ``path`` if it exists.

    Raises:
        VramscopeUsageError: ``source`` is none of those (at construction).
        VramscopeFileExists: ``path`` exists and ``force`` is not set (as the block begins).
        VramscopeError: this recording is recording already (one per block).

    Example::

        import torch, vramscope

        with vramscope.record("step.vtrace"):
            loss = model(batch).sum()
            loss.backward()
            optimizer.step()

        @vramscope.record("eval.vtrace", force=True)
        def evaluate():
            ...

    Recording never breaks the program: if it cannot start or finish, it says why on stderr
    and the code inside runs as it would without it.
    """

    def __init__(self, path: str | os.PathLike[str], *, source: str = "auto", force: bool = False) -> None:
        if source not in ("auto", "cuda", "cpu"):
            raise VramscopeUsageError(f"source must be 'auto', 'cuda' or 'cpu', not {source!r}")
        self.path = os.path.abspath(os.fspath(path))
        self.source = source
        self.force = force
        self._lock = threading.Lock()
        self._recorder: Recorder | None = None
        self._dir: str | None = None
        #: What ``vramscope`` said when it wrote the trace (its closing line).
        self.message: str = ""

    def __fspath__(self) -> str:
        return self.path

    def __enter__(self) -> record:
        with self._lock:
            if self._recorder is not None:
                raise VramscopeError("this vramscope.record is already recording; make one per block")
            if os.path.exists(self.path) and not self.force:
                raise VramscopeFileExists(f"{self.path} exists: pass force=True to replace it")
            try:
                self._start()
            except Exception as error:  # never break the program
                print(f"vramscope: not recording: {error}", file=sys.stderr)
                self._recorder = None
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._finish()

    def _start(self) -> None:
        import torch  # noqa: F401  (first: without torch, nothing is made)

        from ._shim import vramscope_torch

        self._dir = tempfile.mkdtemp(prefix="vramscope-record-")
        # Like `record`'s manifest: `vramscope open --follow` finds this recording while it runs.
        manifest = {"recorder_pid": os.getpid(), "command": list(sys.argv), "output": self.path}
        with open(os.path.join(self._dir, "recording.json"), "w", encoding="utf-8") as file:
            json.dump(manifest, file)
        self._recorder = vramscope_torch.record_in_process(self._dir, self.source)
        atexit.register(self._finish)

    def _finish(self) -> None:
        with self._lock:
            recorder, self._recorder = self._recorder, None
            if recorder is None:
                return
            atexit.unregister(self._finish)
            try:
                recorder.close()
            except Exception as error:
                print(f"vramscope: the recording did not stop cleanly: {error!r}", file=sys.stderr)
            directory = self._dir
            if directory is None:
                return
            try:
                command = [binary(), "convert", directory, "-o", self.path]
                if self.force:
                    command.append("--force")
                done = subprocess.run(command, capture_output=True, text=True, check=False)
                self.message = done.stderr.strip()
            except Exception as error:  # never break the program
                done = subprocess.CompletedProcess([], 2)
                self.message = str(error)
            if done.returncode == 0:
                _remove_tree(directory)
                print(
                    self.message.splitlines()[-1] if self.message else f"vramscope: wrote {self.path}", file=sys.stderr
                )
            else:
                print(
                    f"vramscope: the trace was not written ({self.message}); what was recorded is kept in "
                    f"{directory}: `vramscope convert {directory} -o {self.path}` writes it",
                    file=sys.stderr,
                )


def _remove_tree(directory: str) -> None:
    for name in os.listdir(directory):
        with contextlib.suppress(OSError):
            os.remove(os.path.join(directory, name))
    with contextlib.suppress(OSError):
        os.rmdir(directory)
