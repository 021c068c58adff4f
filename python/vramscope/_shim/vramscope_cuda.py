"""The CUDA source of the PyTorch shim: tensor allocations from the caching allocator's own
history (`torch.cuda.memory._record_memory_history`), drained into the log (often, at exit and on
an OOM: the recorder says when), and the allocator's configuration as the program sets it.

Imported once the program has imported torch (by `vramscope_recorder`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Callable, TypedDict

import torch

if TYPE_CHECKING:
    from .vramscope_log import Log

if TYPE_CHECKING or "." in __name__:  # vramscope._shim, imported by vramscope.record()
    from .vramscope_patches import WithoutLazyInductor, is_marked, mark, restore
else:  # written into a recording's folder by `vramscope record`, outside the package
    from vramscope_patches import WithoutLazyInductor, is_marked, mark, restore

# The CUDA history's ring buffer: entries between two drains must fit.
_HISTORY_ENTRIES = int(os.environ.get("VRAMSCOPE_TORCH_HISTORY", "1000000"))

# The log's line type for each of the allocator's actions that it keeps (`oom` has its own).
_KINDS = {
    "alloc": "alloc",
    "free_requested": "free_requested",
    "free_completed": "free",
    "segment_alloc": "segment_alloc",
    "segment_free": "segment_free",
    "segment_map": "segment_map",
    "segment_unmap": "segment_unmap",
}


# What the shim reads of `torch.cuda.memory._snapshot()` (PyTorch documents it there; its own
# function is unannotated). Older versions lack fields: everything is read with `.get`.
class _Frame(TypedDict, total=False):
    filename: str
    line: int
    name: str


class _Block(TypedDict, total=False):
    address: int
    size: int
    state: str


class _Segment(TypedDict, total=False):
    device: int
    address: int
    stream: int
    total_size: int
    blocks: list[_Block]


class _TraceEntry(TypedDict, total=False):
    action: str
    addr: int
    size: int
    stream: int
    time_us: int
    device_free: int
    frames: list[_Frame]


class _Snapshot(TypedDict, total=False):
    segments: list[_Segment]
    device_traces: list[list[_TraceEntry]]


def has_cuda_device() -> bool:
    """Whether a CUDA device is there, asked without initialising CUDA (through NVML, as
    PyTorch's own fork-safe check does)."""
    if torch.version.cuda is None:
        return False
    count = getattr(torch.cuda, "_device_count_nvml", None)
    if count is not None:
        try:
            found = count()
            if found >= 0:
                return bool(found > 0)
        except Exception:
            pass
    return any(os.path.exists(f"/dev/nvidia{i}") for i in range(16))


class CudaHistory:
    """The caching allocator's history, read into the log: its entries once each, their stacks as
    frame ids, and (in process) what was alive before recording began."""

    def __init__(self, log: Log) -> None:
        self.log = log
        #: This recording started the history (and stops it when it ends in process).
        self.started = False
        # Frame ids, by (file, line, function).
        self.frames: dict[tuple[str, int, str], int] = {}
        # The newest entry's time written, and the entries at that time (several can share it).
        self.mark_us = -1
        self.seen_at_mark: set[tuple[int, int, str | None, int | None, int | None]] = set()
        # Held by a thread while it takes a snapshot (see WithoutLazyInductor).
        self.taking_snapshot = WithoutLazyInductor()

    def note_allocator_conf(self) -> Callable[[], None] | None:
        """Records the caching allocator's configuration as the program has it (the environment
        when torch is imported, then each change it makes at run time); returns what takes the
        watch on changes out again."""
        conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF")
        if conf:
            self.log.write({"t": "allocator_conf", "conf": conf})
        memory = getattr(torch.cuda, "memory", None)
        real = getattr(memory, "_set_allocator_settings", None)
        if memory is None or real is None or is_marked(real):
            return None
        log = self.log

        def set_allocator_settings(settings: object, *args: object, **kwargs: object) -> object:
            result = real(settings, *args, **kwargs)
            if isinstance(settings, str) and not log.closed:
                log.safe(log.write, {"t": "allocator_conf", "conf": settings})
            return result

        mark(set_allocator_settings)
        memory._set_allocator_settings = set_allocator_settings
        return lambda: restore(memory, "_set_allocator_settings", set_allocator_settings, real)

    def start(self) -> bool:
        """Starts the allocator's history; False (said in the log) where the allocator keeps none."""
        try:
            torch.cuda.memory._record_memory_history(max_entries=_HISTORY_ENTRIES, context="all", stacks="python")
        except RuntimeError as error:
            # backend:cudaMallocAsync keeps no history; its tensors are driver-level allocations
            # one for one, which the hook records and the tags still name.
            self.log.write(
                {
                    "t": "meta",
                    "pid": self.log.pid,
                    "torch": torch.__version__,
                    "source": "driver",
                    "why": str(error),
                    "time": self.log.now(),
                }
            )
            return False
        self.started = True
        return True

    def snapshot(self) -> _Snapshot:
        """The allocator's snapshot, taken without importing torch._inductor."""
        with self.taking_snapshot:
            # Under `vramscope estimate`, the emulation's whole history (the program's own
            # snapshots begin where it started its history).
            take = getattr(torch.cuda.memory._snapshot, "vramscope_whole", torch.cuda.memory._snapshot)
            snapshot: _Snapshot = take()
            return snapshot

    def note_alive_at_start(self) -> None:
        """In process, recording begins with memory already held: the allocator's segments and
        the blocks alive in them now are written as allocated at the start (their history was
        not recorded, so their stacks are not known)."""
        now = self.log.now()
        snapshot = self.snapshot()
        self.mark_us = max(
            self.mark_us,
            max((e.get("time_us", 0) for t in snapshot.get("device_traces", []) for e in t), default=-1),
        )
        for segment in snapshot.get("segments", []):
            device = segment.get("device", 0)
            address = segment.get("address", 0)
            stream = segment.get("stream", 0)
            self.log.write(
                {
                    "t": "segment_alloc",
                    "time": now,
                    "dev": device,
                    "addr": address,
                    "size": segment.get("total_size", 0),
                    "stream": stream,
                    "stack": [],
                }
            )
            offset = address
            for block in segment.get("blocks", []):
                size = block.get("size", 0)
                state = block.get("state")
                if state in ("active_allocated", "active_pending_free"):
                    record = {
                        "t": "alloc",
                        "time": now,
                        "dev": device,
                        "addr": block.get("address", offset),
                        "size": size,
                        "stream": stream,
                        "stack": [],
                    }
                    self.log.write(record)
                    # Freed by the program already, waiting for its streams: not allocated.
                    if state == "active_pending_free":
                        self.log.write(dict(record, t="free_requested"))
                offset += size

    def frame_ids(self, frames: list[_Frame] | None) -> list[int]:
        """The ids of `frames`, each written as a `frame` line the first time it is seen."""
        ids = []
        for frame in frames or ():
            key = (frame.get("filename", ""), frame.get("line", 0), frame.get("name", ""))
            fid = self.frames.get(key)
            if fid is None:
                fid = len(self.frames)
                self.frames[key] = fid
                self.log.write({"t": "frame", "id": fid, "file": key[0], "line": key[1], "name": key[2]})
            ids.append(fid)
        return ids

    def drain(self) -> None:
        """Writes the CUDA allocator's history entries not written yet."""
        snapshot = self.snapshot()
        newest = self.mark_us
        offset_ns = self.log.offset_ns
        for device, entries in enumerate(snapshot.get("device_traces", [])):
            for entry in entries:
                time_us = entry.get("time_us", 0)
                if time_us < self.mark_us:
                    continue
                key = (device, time_us, entry.get("action"), entry.get("addr"), entry.get("size"))
                if time_us == self.mark_us and key in self.seen_at_mark:
                    continue
                if time_us > newest:
                    newest = time_us
                    self.seen_at_mark = set()
                if time_us == newest:
                    self.seen_at_mark.add(key)
                action = entry.get("action")
                if action == "oom":
                    self.log.write(
                        {
                            "t": "oom",
                            "time": time_us * 1000 - offset_ns,
                            "dev": device,
                            "size": entry.get("size", 0),
                            "free": entry.get("device_free", 0),
                        }
                    )
                    continue
                kind = _KINDS.get(action or "")
                if kind is None:
                    continue
                self.log.write(
                    {
                        "t": kind,
                        "time": time_us * 1000 - offset_ns,
                        "dev": device,
                        "addr": entry.get("addr", 0),
                        "size": entry.get("size", 0),
                        "stream": entry.get("stream", 0),
                        "stack": self.frame_ids(entry.get("frames")),
                    }
                )
        self.mark_us = newest
