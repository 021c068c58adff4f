"""gen_snapshot.py's model of the CUDA caching allocator: its size constants and rounding, the
blocks and segments it hands out and caches (best-fit reuse, splitting, merging, empty_cache), and
the trace entries it records while the window is open.
"""

import array
import bisect

KIB = 1024
MIB = 1024 * 1024

# CUDACachingAllocator.cpp constants.
MIN_BLOCK = 512             # kMinBlockSize: every block is a multiple of this
SMALL_SIZE = 1 * MIB        # kSmallSize: requests up to this use the small pool
SMALL_BUFFER = 2 * MIB      # kSmallBuffer: small-pool segment size
MIN_LARGE_ALLOC = 10 * MIB  # kMinLargeAlloc: below this, large requests get...
LARGE_BUFFER = 20 * MIB     # kLargeBuffer: ...a 20 MiB segment
ROUND_LARGE = 2 * MIB       # kRoundLarge: bigger segments round up to 2 MiB

# Trace action codes used in the in-memory recording.
ALLOC, FREE_REQUESTED, FREE_COMPLETED, SEGMENT_ALLOC, SEGMENT_FREE = range(5)
ACTION_NAMES = ["alloc", "free_requested", "free_completed", "segment_alloc", "segment_free"]

EMPTY = -1  # stack reference meaning "the shared empty frames list"


def round_size(size):
    if size < MIN_BLOCK:
        return MIN_BLOCK
    return (size + MIN_BLOCK - 1) // MIN_BLOCK * MIN_BLOCK


def allocation_size(rsize):
    if rsize <= SMALL_SIZE:
        return SMALL_BUFFER
    if rsize < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return (rsize + ROUND_LARGE - 1) // ROUND_LARGE * ROUND_LARGE


class Block:
    __slots__ = ("addr", "size", "seg", "allocated", "requested", "stack")

    def __init__(self, addr, size, seg, requested=0):
        self.addr = addr
        self.size = size
        self.seg = seg
        self.allocated = False
        self.requested = requested  # stale after a free, as in the real allocator
        self.stack = EMPTY


class Segment:
    __slots__ = ("addr", "size", "small", "stack")

    def __init__(self, addr, size, small, stack):
        self.addr = addr
        self.size = size
        self.small = small
        self.stack = stack


class Recording:
    """Trace entries kept as compact arrays until the pickle is written."""

    def __init__(self):
        self.action = array.array("B")
        self.addr = array.array("q")
        self.size = array.array("q")
        self.time = array.array("q")
        self.stack = array.array("q")

    def __len__(self):
        return len(self.action)

    def add(self, action, addr, size, t, stack):
        self.action.append(action)
        self.addr.append(addr)
        self.size.append(size)
        self.time.append(t)
        self.stack.append(stack)


class Simulator:
    def __init__(self, rng, n_stacks, fresh_fraction, seg_base, free_context):
        self.rng = rng
        self.blocks = {}                      # addr -> Block (allocated or free)
        self.block_end = {}                   # end addr -> free Block, for merging
        self.free_sorted = {True: [], False: []}  # small? -> sorted [(size, addr)]
        self.segments = {}                    # addr -> Segment
        self.reserved = 0
        self.next_seg_addr = seg_base
        self.recycled = {}                    # size -> [addr] of released segments
        self.rec = None                       # Recording while the window is open
        self.now = 1_748_732_571_000_000 + rng.randrange(10**9)
        self.n_stacks = n_stacks
        self.fresh_fraction = fresh_fraction
        self.fresh_patterns = array.array("i")
        self.free_context = free_context
        self.entries_left = None

    # -- recording helpers ------------------------------------------------
    def tick(self):
        r = self.rng.random()
        if r < 0.3:
            return self.now
        self.now += 1 + int(self.rng.expovariate(1 / 27.0))
        return self.now

    def stack_ref(self, pattern):
        """A frame-list object for an event: the shared pool list for this
        pattern, or a fresh list with the same frames (a new CapturedTraceback
        that symbolized to the same frames)."""
        if self.rec is None:
            return EMPTY  # before recording: no context was captured
        if self.rng.random() < self.fresh_fraction:
            self.fresh_patterns.append(pattern)
            return self.n_stacks + len(self.fresh_patterns) - 1
        return pattern

    def emit(self, action, addr, size, stack):
        if self.rec is not None:
            self.rec.add(action, addr, size, self.tick(), stack)

    # -- free lists ---------------------------------------------------------
    def _insert_free(self, b):
        bisect.insort(self.free_sorted[b.seg.small], (b.size, b.addr))
        self.block_end[b.addr + b.size] = b

    def _remove_free(self, b):
        lst = self.free_sorted[b.seg.small]
        i = bisect.bisect_left(lst, (b.size, b.addr))
        del lst[i]
        del self.block_end[b.addr + b.size]

    def fits_cached(self, rsize):
        lst = self.free_sorted[rsize <= SMALL_SIZE]
        return bisect.bisect_left(lst, (rsize, -1)) < len(lst)

    # -- segments -------------------------------------------------------------
    def _new_segment_addr(self, size):
        spare = self.recycled.get(size)
        if spare and self.rng.random() < 0.7:
            # cudaMalloc tends to hand back a just-freed range of the same size.
            return spare.pop()
        addr = self.next_seg_addr
        self.next_seg_addr += size + ROUND_LARGE * self.rng.randrange(0, 3)
        return addr

    def release_cached(self, pattern):
        """empty_cache(): cudaFree every segment that is one free block."""
        whole = [b for lst in self.free_sorted.values() for _, a in lst
                 for b in (self.blocks[a],) if b.size == b.seg.size]
        if self.entries_left is not None and len(whole) > self.entries_left() - 8:
            return  # keep the exact entry count reachable
        stack = self.stack_ref(pattern)
        for b in whole:
            self._remove_free(b)
            del self.blocks[b.addr]
            seg = self.segments.pop(b.addr)
            self.reserved -= seg.size
            self.recycled.setdefault(seg.size, []).append(seg.addr)
            self.emit(SEGMENT_FREE, seg.addr, seg.size, stack)

    # -- malloc / free ------------------------------------------------------
    def malloc(self, size, pattern):
        rsize = round_size(size)
        small = rsize <= SMALL_SIZE
        stack = self.stack_ref(pattern)
        lst = self.free_sorted[small]
        i = bisect.bisect_left(lst, (rsize, -1))
        if i < len(lst):
            _, addr = lst[i]
            block = self.blocks[addr]
            self._remove_free(block)
        else:
            seg_size = allocation_size(rsize)
            addr = self._new_segment_addr(seg_size)
            seg = Segment(addr, seg_size, small, stack)
            self.segments[addr] = seg
            self.reserved += seg_size
            block = Block(addr, seg_size, seg)
            self.blocks[addr] = block
            self.emit(SEGMENT_ALLOC, addr, seg_size, stack)

        remaining = block.size - rsize
        if (remaining >= MIN_BLOCK) if small else (remaining > SMALL_SIZE):
            # Split: the front becomes the allocation, the old block object
            # (with its stale requested size) becomes the free remainder.
            rest = Block(block.addr + rsize, remaining, block.seg, block.requested)
            self.blocks[rest.addr] = rest
            self._insert_free(rest)
            block = Block(block.addr, rsize, block.seg)
            self.blocks[block.addr] = block
        block.allocated = True
        block.requested = size
        block.stack = stack
        self.emit(ALLOC, block.addr, size, stack)
        return block

    def free(self, block, pattern):
        if self.free_context:
            stack = self.stack_ref(pattern)
        else:
            # context='alloc': frees reuse the allocation's context object.
            stack = block.stack
        self.emit(FREE_REQUESTED, block.addr, block.requested, stack)
        self.emit(FREE_COMPLETED, block.addr, block.requested, stack)
        block.allocated = False
        block.stack = EMPTY
        # Merge with free neighbours of the same segment.
        prev = self.block_end.get(block.addr)
        if prev is not None and prev.seg is block.seg:
            self._remove_free(prev)
            del self.blocks[block.addr]
            prev.size += block.size
            prev.requested = block.requested
            block = prev
        nxt = self.blocks.get(block.addr + block.size)
        if nxt is not None and not nxt.allocated and nxt.seg is block.seg:
            self._remove_free(nxt)
            del self.blocks[nxt.addr]
            block.size += nxt.size
        self._insert_free(block)
