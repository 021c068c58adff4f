"""The PyTorch shim's log: `torch.<pid>.jsonl` in the recording directory, one JSON object a line,
read by the collector (`collector/src/torch.rs`).

Every time is CLOCK_MONOTONIC in ns, the clock of the driver-level hook. Line types (field `t`):
`meta`, `frame` (id, file, line, name), `alloc` / `free_requested` / `free` / `segment_alloc` /
`segment_free` / `segment_map` / `segment_unmap` (time, dev, addr, size, stream, stack: frame ids
innermost first), `oom` (time, dev, size, free), `tag` (time, dev, addr, cat, name), `span` (kind:
forward, backward, optimizer_step, iteration, evaluation, module; name, begin, end), `autocast`
(device_type, dtype: forward ran under autocast), `grad_mode` (enabled: a forward ran with autograd
recording), `allocator_conf` (conf: the allocator's
configuration string, from the environment when torch is imported and from each
`torch.cuda.memory._set_allocator_settings` call), `dtypes` (parameters: the model's parameter
bytes by dtype; layers: its linear and embedding layers; when either changes), `gap` (dev,
begin, end, why, detail: a stretch whose CPU allocations were not seen, the profiler being
off).

Nothing the shim does may break the program: `Log.safe` runs a step, and the first error of any
step is said once on stderr; recording goes on.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from typing import TypeVar

    from typing_extensions import TypeVarTuple, Unpack

    T = TypeVar("T")
    Ts = TypeVarTuple("Ts")


def clock_offset_ns() -> int:
    """Epoch ns minus CLOCK_MONOTONIC ns, from the tightest of a few paired readings."""
    readings = []
    for _ in range(5):
        m0 = time.monotonic_ns()
        e = time.time_ns()
        m1 = time.monotonic_ns()
        readings.append((m1 - m0, e - (m0 + m1) // 2))
    # The first of the tightest.
    return min(readings, key=lambda reading: reading[0])[1]


class Log:
    """This process's log file, written from any thread, and the one warning on stderr."""

    def __init__(self, directory: str) -> None:
        self.pid = os.getpid()
        self.lock = threading.RLock()
        # Open until close(): hooks and threads write to it all through the run.
        self.file = open(os.path.join(directory, f"torch.{self.pid}.jsonl"), "a", encoding="utf-8")  # noqa: SIM115
        #: Epoch ns minus CLOCK_MONOTONIC ns: the allocator's and the profiler's times are epoch.
        self.offset_ns = clock_offset_ns()
        self.warned = False
        #: Recording has ended (or never started, or this is a forked child): nothing is written
        #: and the hooks do nothing.
        self.closed = False

    def write(self, record: Mapping[str, object]) -> None:
        with self.lock:
            if not self.closed:
                self.file.write(json.dumps(record, separators=(",", ":")))
                self.file.write("\n")

    def flush(self) -> None:
        with self.lock:
            if not self.closed:
                self.file.flush()

    def now(self) -> int:
        """CLOCK_MONOTONIC, in ns."""
        return time.monotonic_ns()

    def warn(self, what: str, error: BaseException) -> None:
        """Says on stderr that `what` failed, the first time anything does."""
        if not self.warned:
            self.warned = True
            print(f"vramscope: PyTorch shim: {what} failed ({error!r}); recording goes on", file=sys.stderr)

    def safe(self, function: Callable[[Unpack[Ts]], T], *args: Unpack[Ts]) -> T | None:
        """`function(*args)`, or None (said by `warn`) if it raises."""
        try:
            return function(*args)
        except Exception as error:
            self.warn(getattr(function, "__name__", "a hook"), error)
            return None

    def close(self, remove: bool = False) -> None:
        """Ends the log; `remove` deletes its file (a process whose log would only blur the picture)."""
        with self.lock:
            self.closed = True
            self.file.close()
            if remove:
                os.remove(self.file.name)

    def forked(self) -> None:
        """In a forked child: its copy of this file is the parent's, so it writes nothing, and its
        lock may have been held by a thread that does not exist in it: it is replaced."""
        self.lock = threading.RLock()
        self.closed = True
