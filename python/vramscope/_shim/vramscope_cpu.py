"""The CPU source of vramscope's PyTorch shim: tensor allocations from PyTorch's profiler
(`torch.profiler` with `profile_memory=True`), read by stopping the profiler and starting another.

PyTorch's profiler must never be started while a range that began under an earlier one is still
open (a `record_function`, such as the `Optimizer.step#SGD.step` around every optimizer step and
its hooks, or an operator that calls back into Python): when that range ends, the new profiler's
callback writes into the event storage the stopped one has freed. The heap is then corrupt and
the workload dies later (a malloc abort or SIGSEGV, now and then, more often under load). So:

- the profiler is stopped and started again only at a safe point: no `record_function` open on
  any thread (they are tracked here) and no backward pass running (the autograd engine's
  operators enclose every hook it calls). A drain wanted elsewhere (at an optimizer step's end,
  inside the step's own range) waits for the next safe point: the exit of the last open range,
  the end of backward, the end of the model's forward;
- after each stop, the events the profiler still had open are checked against the tracked
  ranges: those are waited for; one it could not be told of leaves the profiler off for good,
  said on stderr and in the log, never a crash;
- while the profiler is off (waiting, the program's own profiler running, or off for good) the
  log says from when to when (`gap` lines), so a viewer never shows a quiet stretch as one.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Callable

import torch

if TYPE_CHECKING:
    from torch._C._profiler import _ProfilerEvent
    from torch.profiler import profile

    from .vramscope_log import Log

if TYPE_CHECKING or "." in __name__:  # vramscope._shim, imported by vramscope.record()
    from .vramscope_patches import is_marked, mark, restore, wraps
else:  # written into a recording's folder by `vramscope record`, outside the package
    from vramscope_patches import is_marked, mark, restore, wraps

# Operators that only make memory for the operator around them.
_PLUMBING = frozenset(
    {
        "aten::empty",
        "aten::empty_strided",
        "aten::empty_like",
        "aten::new_empty",
        "aten::new_empty_strided",
        "aten::resize_",
        "aten::zeros",
        "aten::zeros_like",
        "aten::zero_",
        "aten::fill_",
        "aten::full",
    }
)


@contextlib.contextmanager
def _profiler_quiet() -> Iterator[None]:
    """While the shim's own profiler starts or stops, what the profiler's library prints to
    stderr (kineto's `USDT: ... profiler_start` lines, and its `ERROR: ... gpuGetDeviceCount`
    on a machine without a GPU) goes nowhere: the workload's output stays as it is without
    vramscope. A user who set KINETO_LOG_LEVEL asked for those lines and gets them. Only the
    file descriptor is redirected, for the few milliseconds of the call, after Python's own
    buffers are flushed."""
    if "KINETO_LOG_LEVEL" in os.environ:
        yield
        return
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    saved: int | None = None
    try:
        saved = os.dup(2)
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, 2)
        finally:
            os.close(null)
    except OSError:
        saved = None
    try:
        yield
    finally:
        if saved is not None:
            try:
                os.dup2(saved, 2)
            finally:
                os.close(saved)


class CpuAllocations:
    """The profiler of one process, and when it may be restarted. `drain(restart)` is the
    recorder's (which writes what the profiler saw, through `drain` here, under its lock);
    `in_backward()` says whether a backward pass runs."""

    def __init__(self, log: Log, drain: Callable[[bool], None], in_backward: Callable[[], bool]) -> None:
        self.log = log
        self.recorder_drain = drain
        self.in_backward = in_backward
        self.profiler: profile | None = None
        # The program's own profiler runs: ours waits for it to stop.
        self.paused = False
        # Why the profiler stays off for good (None while it may run).
        self.blocked: str | None = None
        # A drain (or, with no profiler, a start) waits for a safe point.
        self.pending = False
        # Since when (CLOCK_MONOTONIC ns) the profiler has been off, and why.
        self.off_since: int | None = None
        self.off_why: tuple[str, str] = ("", "")
        # When the profiler last stopped (CLOCK_MONOTONIC ns): nothing after it was seen.
        self.stopped: int | None = None
        # The program's `record_function` ranges open now, on any thread: id -> name.
        self.open_ranges: dict[int, str] = {}
        self.ranges_lock = threading.Lock()
        # Calls of `torch.autograd.grad` running (backward is `in_backward`).
        self.grad_depth = 0

    def start(self) -> list[Callable[[], None]]:
        """Starts the profiler, with torch patched to say when it is safe to restart it; returns
        what undoes the patches (a recording inside the program takes them out when it closes,
        so that the next one installs its own: a patch left in place would go on telling a
        closed recording, and the next would never see a range open)."""
        undo = [self.track_ranges(), self.track_grad()]
        self.start_profiler()
        undo.append(self.yield_to_user_profilers())
        return undo

    # -- when ------------------------------------------------------------------------------------

    def safe_now(self) -> bool:
        """Whether no range that a running profiler saw begin can still be open."""
        return not self.open_ranges and not self.in_backward() and self.grad_depth == 0

    def request(self) -> None:
        """A drain is due: now if this is a safe point, else at the next one."""
        self.pending = True
        self.at_safe_point()

    def at_safe_point(self) -> None:
        """Called where a range may just have ended: does what waits, if it is safe now."""
        if self.pending and not self.paused and self.blocked is None and self.safe_now():
            self.pending = False
            self.recorder_drain(True)

    def track_ranges(self) -> Callable[[], None]:
        """Keeps `open_ranges` as the program enters and leaves `record_function` (the class
        behind `torch.profiler.record_function`, the optimizer's step range, DDP's forward);
        returns what undoes it."""
        cls = getattr(getattr(torch.autograd, "profiler", None), "record_function", None)
        if cls is None:
            return lambda: None
        real_enter, real_exit = cls.__enter__, cls.__exit__
        source = self

        def __enter__(rf: object) -> object:
            result = real_enter(rf)
            with source.ranges_lock:
                source.open_ranges[id(rf)] = getattr(rf, "name", "")
            return result

        def __exit__(rf: object, *exc: object) -> object:
            try:
                return real_exit(rf, *exc)
            finally:
                with source.ranges_lock:
                    source.open_ranges.pop(id(rf), None)
                if source.pending and not source.open_ranges:
                    source.log.safe(source.at_safe_point)

        wraps(__enter__, real_enter)
        wraps(__exit__, real_exit)
        cls.__enter__, cls.__exit__ = __enter__, __exit__
        mark(cls)

        def undo() -> None:
            restore(cls, "__enter__", __enter__, real_enter)
            restore(cls, "__exit__", __exit__, real_exit)

        return undo

    def track_grad(self) -> Callable[[], None]:
        """`torch.autograd.grad` runs the autograd engine as backward does (a checkpointed
        module's forward runs again inside it, and the model's forward hooks with it): no safe
        point while it runs. Returns what undoes it."""
        real_grad = torch.autograd.grad
        source = self

        def grad(*args: Any, **kwargs: Any) -> Any:
            source.grad_depth += 1
            try:
                return real_grad(*args, **kwargs)
            finally:
                source.grad_depth = max(source.grad_depth - 1, 0)
                if source.pending and source.grad_depth == 0:
                    source.log.safe(source.at_safe_point)

        wraps(grad, real_grad)
        grad.__doc__ = real_grad.__doc__
        mark(grad)
        torch.autograd.grad = grad
        return lambda: restore(torch.autograd, "grad", grad, real_grad)

    # -- the profiler ----------------------------------------------------------------------------

    def start_profiler(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        profiler = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        mark(profiler)
        with _profiler_quiet():
            profiler.start()
        self.profiler = profiler
        self.stopped = None
        self.end_gap()

    def begin_gap(self, why: str, detail: str = "") -> None:
        """The profiler is off from now, for `why`: `open_ranges` (ranges it saw begin are still
        open; `detail` names them), `own_profiler` (the program's runs) or `unsafe` (open where
        no hook sees it end: off for good)."""
        if self.off_since is None:
            self.off_since = self.stopped if self.stopped is not None else self.log.now()
            self.off_why = (why, detail)

    def end_gap(self) -> None:
        """Writes the stretch the profiler was off, if it was."""
        if self.off_since is not None:
            why, detail = self.off_why
            self.log.write(
                {"t": "gap", "dev": -1, "begin": self.off_since, "end": self.log.now(), "why": why, "detail": detail}
            )
            self.off_since = None

    def close(self) -> None:
        """At exit: the last stretch off, if the profiler is off."""
        if self.off_since is not None:
            self.end_gap()

    def drain(self, restart: bool) -> None:
        """Writes the profiler's allocations since it started; then, if `restart` and nothing the
        profiler saw begin is still open, starts another (else it waits, or stays off)."""
        from torch._C._profiler import _EventType, _ExtraFields_Allocation

        profiler, self.profiler = self.profiler, None
        if profiler is None:
            if restart and not self.paused and self.blocked is None:
                self.start_profiler()
            return
        stopped_at = time.time_ns()
        self.stopped = self.log.now()
        with _profiler_quiet():
            profiler.stop()
        results = profiler.profiler.kineto_results if profiler.profiler is not None else None
        if results is None:
            raise RuntimeError("the stopped profiler holds no results")
        events: list[tuple[int, int, int, _ProfilerEvent | None]] = []
        still_open: list[str] = []
        event: _ProfilerEvent | None = None
        fields: object = None
        parent: _ProfilerEvent | None = None
        stack = list(results.experimental_event_tree())
        while stack:
            event = stack.pop()
            if event.tag == _EventType.Allocation:
                fields = event.extra_fields
                if isinstance(fields, _ExtraFields_Allocation) and fields.device.type == "cpu":
                    # The operator that wanted the memory, not the allocating one inside it.
                    parent = event.parent
                    while parent is not None and parent.name in _PLUMBING:
                        parent = parent.parent
                    events.append((event.start_time_ns, fields.ptr, fields.alloc_size, parent))
            elif event.end_time_ns > stopped_at:
                # The profiler ends what is still open at its own stop, after `stopped_at`;
                # whatever had ended did so before it.
                still_open.append(event.name)
            stack.extend(event.children)
        events.sort(key=lambda e: e[0])
        records: list[dict[str, object]] = []
        offset = self.log.offset_ns
        for time_ns, ptr, size, parent in events:
            record: dict[str, object] = {
                "t": "alloc" if size > 0 else "free",
                "time": time_ns - offset,
                "dev": -1,
                "addr": ptr,
                "size": abs(size),
            }
            if parent is not None and size > 0:
                record["op"] = parent.name
            records.append(record)
        # The event tree's objects hold the profiler's results: they go first (every local that
        # holds one is dropped; they form no cycles), then the profiler and its results. The
        # profiler's objects do form cycles (bound methods kept in their own attributes), so
        # their attributes are dropped: they go now, in this order, not at some later collection
        # on whatever thread (nor at interpreter exit, where the order is not kept), and without
        # a full collection, which costs ~0.1 s with PyTorch loaded. Only if something still holds
        # them does one run.
        import gc
        import weakref

        del events, stack, event, fields, parent, results
        owners: list[object] = [profiler, getattr(profiler, "profiler", None)]
        refs = []
        for owner in owners:
            with contextlib.suppress(TypeError):
                refs.append(weakref.ref(owner))
        for owner in owners:
            if owner is not None and hasattr(owner, "__dict__"):
                owner.__dict__.clear()
        del profiler, owners, owner
        if any(ref() is not None for ref in refs):
            gc.collect()
        for record in records:
            self.log.write(record)
        if not restart:
            return
        if still_open:
            with self.ranges_lock:
                tracked = list(self.open_ranges.values())
            unknown = []
            for name in still_open:
                if name in tracked:
                    tracked.remove(name)
                else:
                    unknown.append(name)
            if unknown:
                # Open where no hook can see it end: a restart could corrupt the program's heap.
                self.blocked = ", ".join(sorted(set(unknown))[:3])
                self.begin_gap("unsafe", self.blocked)
                print(
                    "vramscope: PyTorch shim: CPU tensor allocations are not recorded from here on: "
                    f"PyTorch's profiler cannot be restarted safely while {self.blocked} is open",
                    file=sys.stderr,
                )
                return
            # Ranges that began under the stopped profiler: the next one starts once they end.
            self.begin_gap("open_ranges", ", ".join(sorted(set(still_open))[:3]))
            self.pending = True
            return
        self.start_profiler()

    def yield_to_user_profilers(self) -> Callable[[], None]:
        """Only one profiler can run: the program's own takes over while it runs (what it
        allocates meanwhile is not recorded, and the log says so) and the shim's resumes after
        it, at the next safe point."""
        cls = torch.profiler.profile
        real_start, real_stop = cls.start, cls.stop
        source = self
        log = self.log

        # Methods of torch's profiler: `self` is the program's profiler (or the shim's own).
        def start(self: profile) -> None:
            if not is_marked(self) and not source.paused:
                if source.profiler is not None:
                    log.safe(source.recorder_drain, False)
                source.paused = True
                source.begin_gap("own_profiler")
            real_start(self)

        def stop(self: profile) -> None:
            real_stop(self)
            if not is_marked(self) and source.paused and not log.closed:
                source.paused = False
                log.safe(source.request)

        # Patching torch's profiler class is the point: the program's profiler runs these.
        cls.start, cls.stop = start, stop  # type: ignore[method-assign]

        def undo() -> None:
            restore(cls, "start", start, real_start)
            restore(cls, "stop", stop, real_stop)

        return undo
