"""The emulated device's memory: PyTorch's CUDA caching allocator as a model, for `vramscope
estimate`, which runs a program's tensors without storage. Every tensor the program makes on the
emulated device is allocated here, so the program's own memory calls (`memory_allocated()`,
`max_memory_reserved()`, `memory_stats()`, `_snapshot()`, the allocator's history that the shim
records from) answer what the GPU would.

The rules are those `analysis/src/allocsim.rs` follows (`docs/ALLOCATOR-MODEL.md` states them,
from `c10/cuda/CUDACachingAllocator.cpp`): sizes rounded to 512 bytes (or by
`roundup_power2_divisions`); a small pool (rounded sizes up to 1 MiB) and a large one, each with
its free blocks per stream; the best fit (smallest free block on the stream, then the lowest
address); new segments of 2 MiB (small), 20 MiB (requests under 10 MiB) or the request rounded
to 2 MiB; a block split when what is left is at least 512 bytes (small pool) or more than 1 MiB
(large pool, below `max_split_size`); a freed block merged with its free neighbours. With
`expandable_segments`, one range per pool and stream mapped in pages (2 MiB small, 20 MiB large).
With `backend:cudaMallocAsync`, blocks are the sizes asked for, and the driver's pool keeps what
it reserved (PyTorch sets its release threshold to the maximum): reserved is the highest
allocated so far in the pool's 2 MiB pages (the driver's own placement inside its pool is not
modelled).

Both implementations are held to the same answers by `tests/tests/estimate.rs`.
"""

from __future__ import annotations

import bisect
import time
from collections import deque
from typing import Any

MIN_BLOCK = 512
SMALL_SIZE = 1 << 20
SMALL_BUFFER = 2 << 20
LARGE_BUFFER = 20 << 20
MIN_LARGE_ALLOC = 10 << 20
ROUND_LARGE = 2 << 20
# The virtual range each expandable segment reserves (more than any device holds).
_EXPANDABLE_RANGE = 1 << 42


class Settings:
    """`PYTORCH_CUDA_ALLOC_CONF` as the allocator reads it."""

    def __init__(self, conf: str = "") -> None:
        self.max_split_size: int | None = None
        self.divisions = [0] * 16
        self.expandable = False
        self.backend = "native"
        self.update(conf)

    def update(self, conf: str) -> None:
        for item in conf.replace(";", ",").split(","):
            key, _, value = item.strip().partition(":")
            key, value = key.strip(), value.strip()
            if key == "max_split_size_mb" and value.isdigit():
                self.max_split_size = max(int(value), LARGE_BUFFER >> 20) << 20
            elif key == "expandable_segments":
                self.expandable = value.lower() == "true"
            elif key == "backend":
                self.backend = "cudaMallocAsync" if value == "cudaMallocAsync" else "native"
            elif key == "roundup_power2_divisions":
                self._divisions(value)

    def _divisions(self, value: str) -> None:
        if value.isdigit():
            self.divisions = [int(value)] * 16
            return
        # [256:1,512:2,>:4]: per interval from 1 MiB, each power of two of MiB.
        last = 0
        for part in value.strip("[]").split(","):
            size, _, count = part.partition(":")
            if not count.strip().isdigit():
                continue
            if size.strip() == ">":
                for i in range(last, 16):
                    self.divisions[i] = int(count)
                continue
            if size.strip().isdigit():
                index = max(int(size).bit_length() - 1, 0)
                for i in range(last, min(index + 1, 16)):
                    self.divisions[i] = int(count)
                last = index + 1


class _Segment:
    __slots__ = ("address", "blocks", "ends", "expandable", "size", "small", "stream")

    def __init__(self, address: int, size: int, stream: int, small: bool, expandable: bool = False) -> None:
        self.address = address
        self.size = size
        self.stream = stream
        self.small = small
        self.expandable = expandable
        # address -> [size, allocated, requested]; the blocks cover the segment.
        self.blocks: dict[int, list[int]] = {address: [size, 0, 0]}
        # Where each block ends -> where it begins: a freed block's neighbour before it.
        self.ends: dict[int, int] = {address + size: address}

    def put(self, address: int, size: int, allocated: int, requested: int) -> None:
        old = self.blocks.get(address)
        if old is not None:
            del self.ends[address + old[0]]
        self.blocks[address] = [size, allocated, requested]
        self.ends[address + size] = address

    def drop(self, address: int) -> None:
        size = self.blocks.pop(address)[0]
        del self.ends[address + size]


class _Expandable:
    """One pool and stream's range: pieces by address (free, allocated or unmapped)."""

    def __init__(self, base: int, page: int) -> None:
        self.base = base
        self.page = page
        self.pieces: dict[int, tuple[int, str]] = {base: (_EXPANDABLE_RANGE, "unmapped")}
        self.order: list[int] = [base]
        self.free: list[tuple[int, int]] = []

    def _put(self, address: int, size: int, state: str) -> None:
        self.pieces[address] = (size, state)
        bisect.insort(self.order, address)
        if state == "free":
            bisect.insort(self.free, (size, address))

    def _take(self, address: int) -> tuple[int, str]:
        size, state = self.pieces.pop(address)
        del self.order[bisect.bisect_left(self.order, address)]
        if state == "free":
            del self.free[bisect.bisect_left(self.free, (size, address))]
        return size, state

    def _merge(self, address: int) -> int:
        """Merges the piece at `address` with its neighbours of the same state; where it begins."""
        own, state = self._take(address)
        begin, size = address, own
        i = bisect.bisect_left(self.order, address)
        if i > 0:
            prev = self.order[i - 1]
            prev_size, prev_state = self.pieces[prev]
            if prev_state == state and prev + prev_size == address:
                self._take(prev)
                begin, size = prev, size + prev_size
        following = self.pieces.get(address + own)
        if following is not None and following[1] == state:
            self._take(address + own)
            size += following[0]
        self._put(begin, size, state)
        return begin

    def malloc(self, rounded: int) -> tuple[int, int, int, int]:
        """(address, block size, where pages were newly mapped, how many bytes)."""
        i = bisect.bisect_left(self.free, (rounded, 0))
        mapped = map_at = 0
        if i < len(self.free):
            start = self.free[i][1]
        else:
            found = None
            for address in self.order:
                size, state = self.pieces[address]
                if state != "unmapped":
                    continue
                j = bisect.bisect_left(self.order, address)
                start, have = address, 0
                if j > 0:
                    prev = self.order[j - 1]
                    prev_size, prev_state = self.pieces[prev]
                    if prev_state == "free" and prev + prev_size == address:
                        start, have = prev, prev_size
                need = -(-max(rounded - have, 0) // self.page) * self.page
                if need <= size:
                    found = (start, address, need)
                    break
            if found is None:
                return self.base, rounded, 0, 0
            start, at, need = found
            map_at = at
            size, _ = self._take(at)
            self._put(at, need, "free")
            if size > need:
                self._put(at + need, size - need, "unmapped")
            if start != at:
                start = self._merge(at)
            mapped = need
        size, _ = self._take(start)
        taken = rounded if size - rounded >= MIN_BLOCK else size
        self._put(start, taken, "allocated")
        if taken < size:
            self._put(start + taken, size - taken, "free")
        return start, taken, map_at, mapped

    def release(self, address: int) -> int | None:
        """Frees the block at `address`; its size."""
        piece = self.pieces.get(address)
        if piece is None or piece[1] != "allocated":
            return None
        self._take(address)
        self._put(address, piece[0], "free")
        self._merge(address)
        return piece[0]

    def unmap_free(self) -> list[tuple[int, int]]:
        """Unmaps the whole pages inside free pieces; the (address, size) ranges unmapped."""
        out = []
        for size, address in list(self.free):
            first = -(-(address - self.base) // self.page) * self.page + self.base
            end = (address + size - self.base) // self.page * self.page + self.base
            if end <= first:
                continue
            self._take(address)
            if first > address:
                self._put(address, first - address, "free")
            self._put(first, end - first, "unmapped")
            if address + size > end:
                self._put(end, address + size - end, "free")
            self._merge(first)
            out.append((first, end - first))
        return out

    def mapped_ranges(self) -> list[tuple[int, list[tuple[int, int, str]]]]:
        """Each contiguous mapped range with its pieces, as a snapshot shows segments."""
        ranges: list[tuple[int, list[tuple[int, int, str]]]] = []
        current: list[tuple[int, int, str]] = []
        for address in self.order:
            size, state = self.pieces[address]
            if state == "unmapped":
                if current:
                    ranges.append((current[0][0], current))
                    current = []
                continue
            current.append((address, size, state))
        if current:
            ranges.append((current[0][0], current))
        return ranges


class Allocator:
    """The caching allocator of one emulated device."""

    def __init__(self, device: int, settings: Settings) -> None:
        self.device = device
        self.settings = settings
        self.segments: dict[int, _Segment] = {}
        self.segment_starts: list[int] = []
        # Free blocks per (small, stream): sorted (size, address).
        self.free: dict[tuple[bool, int], list[tuple[int, int]]] = {}
        self.expandable: dict[tuple[bool, int], _Expandable] = {}
        # address -> (block size, requested, expandable range key or None)
        self.live: dict[int, tuple[int, int, tuple[bool, int] | None]] = {}
        self.next_address = 0x7F0000000000 + device * (1 << 44)
        self.allocated = 0
        self.requested = 0
        self.reserved = 0
        self.peak_allocated = 0
        self.peak_requested = 0
        self.peak_reserved = 0
        self.num_allocs = 0
        self.num_frees = 0
        self.segment_allocs = 0
        self.segment_frees = 0
        self.num_ooms = 0
        # The history (`_record_memory_history`): None while it is off.
        self.history: deque[dict[str, Any]] | None = None
        self.history_frames = True
        # Entries ever traced, and how many there were when the program itself started the
        # history (the shim started it first): what the program's snapshots begin at.
        self.history_total = 0
        self.program_history_from: int | None = None

    # -- the model -------------------------------------------------------------------------------

    def round(self, size: int) -> int:
        if size < MIN_BLOCK:
            return MIN_BLOCK
        interval = min(max(size.bit_length() - 1 - 20, 0), 15)
        divisions = self.settings.divisions[interval]
        if divisions > 1 and size > MIN_BLOCK * divisions:
            if size & (size - 1) == 0:
                return size
            floor = 1 << (size.bit_length() - 1)
            step = floor // divisions
            if step == 0:
                return floor * 2
            return -(-size // step) * step
        return -(-size // MIN_BLOCK) * MIN_BLOCK

    @staticmethod
    def segment_size(rounded: int) -> int:
        if rounded <= SMALL_SIZE:
            return SMALL_BUFFER
        if rounded < MIN_LARGE_ALLOC:
            return LARGE_BUFFER
        return -(-rounded // ROUND_LARGE) * ROUND_LARGE

    def _max_split(self) -> int:
        return self.settings.max_split_size if self.settings.max_split_size is not None else 1 << 62

    def _best_fit(self, small: bool, stream: int, rounded: int) -> tuple[int, int] | None:
        pool = self.free.get((small, stream))
        if not pool:
            return None
        i = bisect.bisect_left(pool, (rounded, 0))
        if i == len(pool):
            return None
        size, address = pool[i]
        max_split = self._max_split()
        if rounded < max_split and size >= max_split:
            return None
        if rounded >= max_split and size >= rounded + LARGE_BUFFER:
            return None
        return address, size

    def _free_add(self, small: bool, stream: int, size: int, address: int) -> None:
        bisect.insort(self.free.setdefault((small, stream), []), (size, address))

    def _free_remove(self, small: bool, stream: int, size: int, address: int) -> None:
        pool = self.free[(small, stream)]
        del pool[bisect.bisect_left(pool, (size, address))]

    def _segment_of(self, address: int) -> _Segment | None:
        i = bisect.bisect_right(self.segment_starts, address) - 1
        if i < 0:
            return None
        segment = self.segments[self.segment_starts[i]]
        return segment if address < segment.address + segment.size else None

    def malloc(self, requested: int, stream: int, frames: list[dict[str, Any]]) -> int:
        """Allocates `requested` bytes on `stream`; the block's address."""
        if self.settings.backend == "cudaMallocAsync":
            return self._malloc_async(requested, stream, frames)
        rounded = self.round(requested)
        small = rounded <= SMALL_SIZE
        fixed = self._best_fit(small, stream, rounded)
        if self.settings.expandable and fixed is None:
            key = (small, stream)
            rng = self.expandable.get(key)
            if rng is None:
                rng = _Expandable(self.next_address, SMALL_BUFFER if small else LARGE_BUFFER)
                self.next_address += _EXPANDABLE_RANGE
                self.expandable[key] = rng
            address, taken, map_at, mapped = rng.malloc(rounded)
            if mapped:
                # One entry per page, as the allocator maps a handle per page.
                for page in range(map_at, map_at + mapped, rng.page):
                    self._trace("segment_map", page, rng.page, stream, frames)
                self.reserved += mapped
            self.live[address] = (taken, requested, key)
            return self._allocated(address, taken, requested, stream, frames)
        if fixed is None:
            size = self.segment_size(rounded)
            address = self.next_address
            self.next_address += -(-size // ROUND_LARGE) * ROUND_LARGE
            segment = _Segment(address, size, stream, small)
            self.segments[address] = segment
            bisect.insort(self.segment_starts, address)
            self._free_add(small, stream, size, address)
            self.reserved += size
            self.segment_allocs += 1
            self._trace("segment_alloc", address, size, stream, frames)
        else:
            address, size = fixed
        self._free_remove(small, stream, size, address)
        remaining = size - rounded
        split = remaining >= MIN_BLOCK if small else (rounded < self._max_split() and remaining > SMALL_SIZE)
        taken = rounded if split else size
        holder = self._segment_of(address)
        if holder is not None:
            holder.put(address, taken, 1, requested)
            if split:
                holder.put(address + taken, remaining, 0, 0)
                self._free_add(small, stream, remaining, address + taken)
        self.live[address] = (taken, requested, None)
        return self._allocated(address, taken, requested, stream, frames)

    def _malloc_async(self, requested: int, stream: int, frames: list[dict[str, Any]]) -> int:
        address = self.next_address
        self.next_address += -(-max(requested, 1) // MIN_BLOCK) * MIN_BLOCK
        self.live[address] = (requested, requested, None)
        self._allocated(address, requested, requested, stream, frames)
        pages = -(-self.allocated // ROUND_LARGE) * ROUND_LARGE
        if pages > self.reserved:
            self.reserved = pages
        return address

    def _allocated(self, address: int, size: int, requested: int, stream: int, frames: list[dict[str, Any]]) -> int:
        self.allocated += size
        self.requested += requested
        self.num_allocs += 1
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        self.peak_requested = max(self.peak_requested, self.requested)
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        # The history gives the size asked for (as PyTorch's does); the stats count the block.
        self._trace("alloc", address, requested, stream, frames)
        return address

    def release(self, address: int, stream: int, frames: list[dict[str, Any]]) -> None:
        """Frees the block at `address` (the caching allocator keeps it for reuse)."""
        held = self.live.pop(address, None)
        if held is None:
            return
        size, requested, key = held
        self.allocated -= size
        self.requested -= requested
        self.num_frees += 1
        self._trace("free_requested", address, requested, stream, frames)
        self._trace("free_completed", address, requested, stream, frames)
        if self.settings.backend == "cudaMallocAsync":
            return
        if key is not None:
            self.expandable[key].release(address)
            return
        segment = self._segment_of(address)
        if segment is None:
            return
        small, seg_stream = segment.small, segment.stream
        begin, total = address, size
        prev = segment.ends.get(address)
        if prev is not None:
            prev_size, prev_allocated, _ = segment.blocks[prev]
            if not prev_allocated:
                self._free_remove(small, seg_stream, prev_size, prev)
                segment.drop(address)
                begin, total = prev, total + prev_size
        following = segment.blocks.get(address + size)
        if following is not None and not following[1]:
            self._free_remove(small, seg_stream, following[0], address + size)
            segment.drop(address + size)
            total += following[0]
        segment.put(begin, total, 0, 0)
        self._free_add(small, seg_stream, total, begin)

    def empty_cache(self) -> None:
        """`release_cached_blocks`: every wholly free segment goes, and the whole pages inside
        the expandable ranges' free blocks are unmapped."""
        if self.settings.backend == "cudaMallocAsync":
            return
        for (_, stream), rng in self.expandable.items():
            for address, size in rng.unmap_free():
                self.reserved -= size
                self._trace("segment_unmap", address, size, stream, [])
        for address in list(self.segment_starts):
            segment = self.segments[address]
            if len(segment.blocks) == 1 and not segment.blocks[address][1]:
                self._free_remove(segment.small, segment.stream, segment.size, address)
                del self.segments[address]
                del self.segment_starts[bisect.bisect_left(self.segment_starts, address)]
                self.reserved -= segment.size
                self.segment_frees += 1
                self._trace("segment_free", address, segment.size, segment.stream, [])

    def reset_peaks(self) -> None:
        self.peak_allocated = self.allocated
        self.peak_requested = self.requested
        self.peak_reserved = self.reserved

    # -- what the program asks -------------------------------------------------------------------

    def _trace(self, action: str, address: int, size: int, stream: int, frames: list[dict[str, Any]]) -> None:
        if self.history is not None:
            self.history_total += 1
            self.history.append(
                {
                    "action": action,
                    "addr": address,
                    "size": size,
                    "stream": stream,
                    "time_us": time.time_ns() // 1000,
                    "frames": frames if self.history_frames else [],
                }
            )

    def stats(self) -> dict[str, int]:
        """`memory_stats()`'s keys, for the pools together (`all`)."""
        out: dict[str, int] = {}
        for name, current, peak in (
            ("allocated_bytes", self.allocated, self.peak_allocated),
            ("active_bytes", self.allocated, self.peak_allocated),
            ("requested_bytes", self.requested, self.peak_requested),
            ("reserved_bytes", self.reserved, self.peak_reserved),
        ):
            for pool in ("all", "large_pool", "small_pool"):
                out[f"{name}.{pool}.current"] = current if pool == "all" else 0
                out[f"{name}.{pool}.peak"] = peak if pool == "all" else 0
                out[f"{name}.{pool}.allocated"] = 0
                out[f"{name}.{pool}.freed"] = 0
        out["allocation.all.current"] = len(self.live)
        out["num_alloc_retries"] = 0
        out["num_ooms"] = self.num_ooms
        out["num_sync_all_streams"] = 0
        out["num_device_alloc"] = self.segment_allocs
        out["num_device_free"] = self.segment_frees
        out["segment.all.current"] = len(self.segments)
        return out

    def program_history(self) -> list[dict[str, Any]]:
        """The history as the program's own snapshot has it: the entries since the program
        started the history itself (all of them where it did not)."""
        entries = list(self.history or ())
        if self.program_history_from is None:
            return entries
        return entries[max(len(entries) - (self.history_total - self.program_history_from), 0) :]

    def snapshot_segments(self) -> list[dict[str, Any]]:
        """The segments and their blocks, as `torch.cuda.memory._snapshot()` gives them."""
        out: list[dict[str, Any]] = []
        for address in self.segment_starts:
            segment = self.segments[address]
            blocks: list[dict[str, Any]] = []
            for start in sorted(segment.blocks):
                size, allocated, requested = segment.blocks[start]
                blocks.append(
                    {
                        "address": start,
                        "size": size,
                        "requested_size": requested if allocated else 0,
                        "state": "active_allocated" if allocated else "inactive",
                        "frames": [],
                    }
                )
            out.append(self._segment_entry(address, segment.size, segment.stream, segment.small, False, blocks))
        for (small, stream), rng in self.expandable.items():
            for start, pieces in rng.mapped_ranges():
                blocks = [
                    {
                        "address": a,
                        "size": s,
                        "requested_size": self.live.get(a, (0, 0, None))[1] if st == "allocated" else 0,
                        "state": "active_allocated" if st == "allocated" else "inactive",
                        "frames": [],
                    }
                    for a, s, st in pieces
                ]
                total = sum(s for _, s, _ in pieces)
                out.append(self._segment_entry(start, total, stream, small, True, blocks))
        return out

    def _segment_entry(
        self, address: int, size: int, stream: int, small: bool, expandable: bool, blocks: list[dict[str, Any]]
    ) -> dict[str, Any]:
        allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
        return {
            "device": self.device,
            "address": address,
            "total_size": size,
            "allocated_size": allocated,
            "active_size": allocated,
            "requested_size": sum(b["requested_size"] for b in blocks),
            "stream": stream,
            "segment_type": "small" if small else "large",
            "segment_pool_id": (0, 0),
            "is_expandable": expandable,
            "frames": [],
            "blocks": blocks,
        }
