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

import sys
import threading
import time

# Operators that only make memory for the operator around them.
_PLUMBING = frozenset({
    "aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty", "aten::new_empty_strided",
    "aten::resize_", "aten::zeros", "aten::zeros_like", "aten::zero_", "aten::fill_", "aten::full",
})


class CpuAllocations:
    """The profiler of one process, and when it may be restarted. `recorder` is the shim's
    `_Recorder` (its clock, log and backward depth)."""

    def __init__(self, recorder, quiet):
        self.recorder = recorder
        self.torch = recorder.torch
        self.quiet = quiet
        self.profiler = None
        # The program's own profiler runs: ours waits for it to stop.
        self.paused = False
        # Why the profiler stays off for good (None while it may run).
        self.blocked = None
        # A drain (or, with no profiler, a start) waits for a safe point.
        self.pending = False
        # Since when (CLOCK_MONOTONIC ns) the profiler has been off, and why.
        self.off_since = None
        self.off_why = None
        # When the profiler last stopped (CLOCK_MONOTONIC ns): nothing after it was seen.
        self.stopped = None
        # The program's `record_function` ranges open now, on any thread: id -> name.
        self.open_ranges = {}
        self.ranges_lock = threading.Lock()
        # Calls of `torch.autograd.grad` running (backward is the recorder's `backward_depth`).
        self.grad_depth = 0

    def start(self):
        self.track_ranges()
        self.track_grad()
        self.start_profiler()
        self.yield_to_user_profilers()

    # -- when ------------------------------------------------------------------------------------

    def safe_now(self):
        """Whether no range that a running profiler saw begin can still be open."""
        return not self.open_ranges and self.recorder.backward_depth == 0 and self.grad_depth == 0

    def request(self):
        """A drain is due: now if this is a safe point, else at the next one."""
        self.pending = True
        self.at_safe_point()

    def at_safe_point(self):
        """Called where a range may just have ended: does what waits, if it is safe now."""
        if self.pending and not self.paused and self.blocked is None and self.safe_now():
            self.pending = False
            self.recorder.drain()

    def track_ranges(self):
        """Keeps `open_ranges` as the program enters and leaves `record_function` (the class
        behind `torch.profiler.record_function`, the optimizer's step range, DDP's forward)."""
        cls = getattr(getattr(self.torch.autograd, "profiler", None), "record_function", None)
        if cls is None or getattr(cls, "_vramscope", False):
            return
        real_enter, real_exit = cls.__enter__, cls.__exit__
        source = self

        def __enter__(rf):
            result = real_enter(rf)
            with source.ranges_lock:
                source.open_ranges[id(rf)] = getattr(rf, "name", "")
            return result

        def __exit__(rf, *exc):
            try:
                return real_exit(rf, *exc)
            finally:
                with source.ranges_lock:
                    source.open_ranges.pop(id(rf), None)
                if source.pending and not source.open_ranges:
                    source.recorder.safe(source.at_safe_point)

        __enter__.__wrapped__ = real_enter
        __exit__.__wrapped__ = real_exit
        cls.__enter__, cls.__exit__ = __enter__, __exit__
        cls._vramscope = True

    def track_grad(self):
        """`torch.autograd.grad` runs the autograd engine as backward does (a checkpointed
        module's forward runs again inside it, and the model's forward hooks with it): no safe
        point while it runs."""
        real_grad = self.torch.autograd.grad
        if getattr(real_grad, "_vramscope", False):
            return
        source = self

        def grad(*args, **kwargs):
            source.grad_depth += 1
            try:
                return real_grad(*args, **kwargs)
            finally:
                source.grad_depth = max(source.grad_depth - 1, 0)
                if source.pending and source.grad_depth == 0:
                    source.recorder.safe(source.at_safe_point)

        grad.__wrapped__ = real_grad
        grad.__doc__ = real_grad.__doc__
        grad._vramscope = True
        self.torch.autograd.grad = grad

    # -- the profiler ----------------------------------------------------------------------------

    def start_profiler(self):
        from torch.profiler import ProfilerActivity, profile

        profiler = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        profiler._vramscope = True
        with self.quiet():
            profiler.start()
        self.profiler = profiler
        self.stopped = None
        self.end_gap()

    def begin_gap(self, why, detail=""):
        """The profiler is off from now, for `why`: `open_ranges` (ranges it saw begin are still
        open; `detail` names them), `own_profiler` (the program's runs) or `unsafe` (open where
        no hook sees it end: off for good)."""
        if self.off_since is None:
            self.off_since = self.stopped if self.stopped is not None else self.recorder.now()
            self.off_why = (why, detail)

    def end_gap(self):
        """Writes the stretch the profiler was off, if it was."""
        if self.off_since is not None:
            why, detail = self.off_why
            self.recorder.write({"t": "gap", "dev": -1, "begin": self.off_since, "end": self.recorder.now(),
                                 "why": why, "detail": detail})
            self.off_since = None

    def close(self):
        """At exit: the last stretch off, if the profiler is off."""
        if self.off_since is not None:
            self.end_gap()

    def drain(self, restart):
        """Writes the profiler's allocations since it started; then, if `restart` and nothing the
        profiler saw begin is still open, starts another (else it waits, or stays off)."""
        from torch._C._profiler import _EventType

        profiler, self.profiler = self.profiler, None
        if profiler is None:
            if restart and not self.paused and self.blocked is None:
                self.start_profiler()
            return
        stopped_at = time.time_ns()
        self.stopped = self.recorder.now()
        with self.quiet():
            profiler.stop()
        events = []
        still_open = []
        event = None
        stack = list(profiler.profiler.kineto_results.experimental_event_tree())
        while stack:
            event = stack.pop()
            if event.tag == _EventType.Allocation:
                fields = event.extra_fields
                if fields.device.type == "cpu":
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
        records = []
        offset = self.recorder.offset_ns
        for time_ns, ptr, size, parent in events:
            record = {"t": "alloc" if size > 0 else "free", "time": time_ns - offset, "dev": -1,
                      "addr": ptr, "size": abs(size)}
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

        fields = parent = None
        del events, stack, event, fields, parent
        owners = [profiler, getattr(profiler, "profiler", None)]
        refs = []
        for owner in owners:
            try:
                refs.append(weakref.ref(owner))
            except TypeError:
                pass
        for owner in owners:
            if owner is not None and hasattr(owner, "__dict__"):
                owner.__dict__.clear()
        del profiler, owners, owner
        if any(ref() is not None for ref in refs):
            gc.collect()
        for record in records:
            self.recorder.write(record)
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
                print("vramscope: PyTorch shim: CPU tensor allocations are not recorded from here on: "
                      f"PyTorch's profiler cannot be restarted safely while {self.blocked} is open", file=sys.stderr)
                return
            # Ranges that began under the stopped profiler: the next one starts once they end.
            self.begin_gap("open_ranges", ", ".join(sorted(set(still_open))[:3]))
            self.pending = True
            return
        self.start_profiler()

    def yield_to_user_profilers(self):
        """Only one profiler can run: the program's own takes over while it runs (what it
        allocates meanwhile is not recorded, and the log says so) and the shim's resumes after
        it, at the next safe point."""
        cls = self.torch.profiler.profile
        real_start, real_stop = cls.start, cls.stop
        source = self
        recorder = self.recorder

        def start(profiler):
            if not getattr(profiler, "_vramscope", False) and not source.paused:
                if source.profiler is not None:
                    recorder.safe(recorder.drain, False)
                source.paused = True
                source.begin_gap("own_profiler")
            return real_start(profiler)

        def stop(profiler):
            result = real_stop(profiler)
            if not getattr(profiler, "_vramscope", False) and source.paused and not recorder.closed:
                source.paused = False
                recorder.safe(source.request)
            return result

        cls.start, cls.stop = start, stop
