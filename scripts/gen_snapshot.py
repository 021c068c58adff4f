#!/usr/bin/env python3
"""Generate a synthetic PyTorch memory snapshot pickle for benchmarks.

    python3 gen_snapshot.py --entries N --out FILE [--seed S] [--protocol 4]

The output has the shape of torch.cuda.memory._dump_snapshot() files:

  * top-level keys in PyTorch's order: segments, device_traces,
    allocator_settings, external_annotations;
  * trace entries {action, addr, size, stream, time_us, frames} produced by a
    small model of the CUDA caching allocator (best-fit reuse of cached blocks,
    block splitting with the real split thresholds, 2 MiB / 20 MiB / rounded
    segments, occasional empty_cache), so alloc / free_requested /
    free_completed / segment_alloc / segment_free appear in realistic
    proportions and the final 'segments' list is exactly the end state of the
    replay;
  * a warm-up phase that is simulated but not recorded, as with a ring buffer
    or a late _record_memory_history call: the trace frees blocks it never saw
    allocated and the final state holds blocks and segments from before the
    window;
  * stack frames shared through the pickle memo the way real files share them:
    ~20 frames per stack drawn from a few thousand stack patterns over a few
    thousand frame dicts (each frame dict and each string is written once and
    then referenced), one frame list per captured traceback and reused where
    PyTorch reuses it (free_requested/free_completed share one list,
    segment_alloc shares the list of the alloc that caused it, a final block
    shares the list of its alloc; with --context alloc frees reuse the alloc's
    list), and a single shared empty list. --fresh-stack-fraction below 1
    additionally reuses one list object per stack pattern.

The pickle is written by a streaming opcode writer that produces what CPython's
C pickler produces for the same object graph (checked by --selftest, which
compares the opcode streams for a small snapshot), so memory use stays at a
few hundred MB even for 9M entries. Standard library only.
"""

import argparse
import array
import bisect
import io
import os
import pickle
import pickletools
import random
import struct
import sys
import time

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


# ---------------------------------------------------------------------------
# Frames and stacks
# ---------------------------------------------------------------------------

CPP_TOP = [  # every allocation stack recorded with stacks='all' starts like this
    ("torch::unwind::unwind()", "??", 0),
    ("torch::CapturedTraceback::gather(bool, bool, bool)", "??", 0),
    ("torch::cuda::(anonymous namespace)::gather_with_cpp()", "memory_snapshot.cpp", 0),
    ("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)",
     "CUDACachingAllocator.cpp", 0),
    ("c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::malloc(void**, signed char, unsigned long, CUstream_st*)",
     "", 0),
    ("c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)", "", 0),
]
CPP_BOTTOM = [
    ("PyEval_EvalCode", "??", 0),
    ("run_eval_code_obj", "??", 0),
    ("pyrun_file", "??", 0),
    ("_PyRun_SimpleFileObject", "??", 0),
    ("Py_RunMain", "??", 0),
    ("Py_BytesMain", "??", 0),
    ("__libc_start_main", "??", 0),
    ("_start", "??", 0),
]
OPS = ["add", "mul", "bmm", "mm", "addmm", "softmax", "gelu", "layer_norm", "embedding", "dropout",
       "cat", "view", "transpose", "contiguous", "sum", "mean", "div", "sub", "exp", "matmul",
       "einsum", "scaled_dot_product_attention", "cross_entropy", "nll_loss", "copy_", "zeros", "empty"]
CPP_FILES = ["??", "??", "??", "", "RegisterCUDA.cpp", "VariableType_0.cpp", "VariableType_3.cpp",
             "RegisterCompositeImplicitAutograd.cpp", "python_torch_functions_0.cpp", "Linear.cpp",
             "python_variable_methods.cpp", "TensorIterator.cpp"]
PY_DIRS = ["/home/user/project/model", "/home/user/project/train",
           "/opt/conda/lib/python3.11/site-packages/torch/nn/modules",
           "/opt/conda/lib/python3.11/site-packages/torch/nn",
           "/opt/conda/lib/python3.11/site-packages/torch/optim",
           "/opt/conda/lib/python3.11/site-packages/torch/autograd",
           "/opt/conda/lib/python3.11/site-packages/einops"]
PY_FUNCS = ["forward", "_call_impl", "_wrapped_call_impl", "step", "backward", "attention", "mlp",
            "train_step", "main", "<module>", "_single_tensor_adamw", "wrapper", "einsum", "apply",
            "_engine_run_backward", "layer_norm", "linear", "embedding", "run_epoch", "compute_loss"]


def build_frames(rng, count):
    """Distinct (name, filename, line) triples; about 85% C++ like real files."""
    frames = list(CPP_TOP) + list(CPP_BOTTOM)
    seen = set(frames)
    while len(frames) < count:
        if rng.random() < 0.85:
            op = rng.choice(OPS)
            kind = rng.randrange(6)
            if kind == 0:
                name = f"at::_ops::{op}::call(at::Tensor const&, at::Tensor const&)"
            elif kind == 1:
                name = f"at::_ops::{op}::redispatch(c10::DispatchKeySet, at::Tensor const&)"
            elif kind == 2:
                name = f"at::native::{op}_out_cuda_{rng.randrange(40)}(at::Tensor const&, c10::ArrayRef<long>)"
            elif kind == 3:
                name = f"torch::autograd::VariableType::(anonymous namespace)::{op}(c10::DispatchKeySet, at::Tensor const&)"
            elif kind == 4:
                name = f"at::(anonymous namespace)::wrapper_CUDA_{op}_{rng.randrange(40)}(at::Tensor const&)"
            else:
                name = f"_PyEval_EvalFrameDefault.{rng.randrange(10**6)}"
            frame = (name, rng.choice(CPP_FILES), 0)
        else:
            frame = (rng.choice(PY_FUNCS), f"{rng.choice(PY_DIRS)}/m{rng.randrange(60)}.py", rng.randrange(1, 2500))
        if frame not in seen:
            seen.add(frame)
            frames.append(frame)
    return frames


def build_stacks(rng, n_frames, count, depth):
    """Stack patterns as tuples of frame indices, ~depth frames each.

    Top: the allocator entry frames; middle: random op/python frames from the
    pool; bottom: interpreter start-up frames, like a real stacks='all' trace.
    """
    top = tuple(range(len(CPP_TOP)))
    bottom = tuple(range(len(CPP_TOP), len(CPP_TOP) + len(CPP_BOTTOM)))
    first_free = len(CPP_TOP) + len(CPP_BOTTOM)
    middle_mean = max(1, depth - len(top) - len(bottom) // 2)
    stacks = []
    for _ in range(count):
        n_mid = max(1, int(rng.gauss(middle_mean, middle_mean / 3)))
        mid = tuple(rng.randrange(first_free, n_frames) for _ in range(n_mid))
        stacks.append(top + mid + bottom[rng.randrange(len(bottom)):])
    return stacks


# ---------------------------------------------------------------------------
# Allocator simulation
# ---------------------------------------------------------------------------

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


class Workload:
    """Training-loop-like traffic: long-lived parameters, then iterations that
    grow activations (forward) and release them (backward), with op sites that
    tie a stack pattern to a size, and sizes that drift a little between
    iterations (changing batch shapes cause fragmentation and new segments)."""

    def __init__(self, rng, n_stacks, iteration_allocs):
        self.rng = rng
        self.n_stacks = n_stacks
        self.iteration_allocs = iteration_allocs
        self.site_size = []
        for _ in range(n_stacks):
            r = rng.random()
            if r < 0.05:
                size = rng.choice([4, 8, 16, 64, 128, 256, 400])
            elif r < 0.25:
                size = int(2 ** rng.uniform(9, 20))        # 512 B .. 1 MiB
            elif r < 0.85:
                size = int(2 ** rng.uniform(20, 24.5))     # 1 .. ~23 MiB
            else:
                size = int(2 ** rng.uniform(24.5, 27.3))   # ~23 .. ~160 MiB
            if rng.random() < 0.5:
                size = max(4, size // 4 * 4)
            self.site_size.append(size)
        # Zipf-like popularity over sites.
        self.weights = [1.0 / (i + 1) ** 0.9 for i in range(n_stacks)]
        self.cum = []
        total = 0.0
        for w in self.weights:
            total += w
            self.cum.append(total)
        self.total = total

    def site(self):
        return bisect.bisect_left(self.cum, self.rng.random() * self.total)

    def size_for(self, site, scale):
        return max(1, int(self.site_size[site] * scale))


def simulate(args, frames, stacks):
    rng = random.Random(args.seed + 1)
    n_stacks = len(stacks)
    sim = Simulator(rng, n_stacks, args.fresh_stack_fraction,
                    0x7FD9_0000_0000 + rng.randrange(1 << 20) * ROUND_LARGE, args.context == "all")
    work = Workload(rng, n_stacks, args.iteration_allocs)
    rec = Recording()
    annotations = []
    target = args.entries
    warmup_ops = args.warmup if args.warmup is not None else min(50_000, max(2_000, target // 10))

    params = []
    temps = []  # allocation order, so frees can be LIFO-ish

    # Long-lived "parameters" and "optimizer state", allocated before the
    # window: they appear only in the final segments (and as pre-window frees
    # when the occasional one is released).
    for _ in range(max(50, n_stacks // 20)):
        site = work.site()
        params.append(sim.malloc(work.size_for(site, 1.0), site))

    def entries_left():
        return target - len(rec)

    ops = 0
    recording = False

    def start_recording_if_due():
        # Recording starts in the middle of whatever the program is doing,
        # like _record_memory_history() or a wrapped ring buffer.
        nonlocal recording
        if not recording and ops >= warmup_ops:
            recording = True
            sim.rec = rec
            sim.entries_left = entries_left

    while True:
        start_recording_if_due()
        if recording and len(rec) >= target:
            break

        # One iteration: forward grows the live set, backward shrinks it.
        scale = rng.uniform(0.75, 1.25)
        fwd = int(work.iteration_allocs * rng.uniform(0.8, 1.2))
        it_start = sim.now
        phase_marks = []
        for phase, steps, p_alloc in (("forward", fwd, 0.72), ("backward", fwd, 0.32)):
            phase_marks.append((phase, sim.now))
            for _ in range(steps):
                ops += 1
                start_recording_if_due()
                left = entries_left() if recording else 1 << 60
                if left <= 0:
                    break
                want_alloc = rng.random() < p_alloc or not temps
                if left <= 2:
                    # Finish on exactly the requested count: a free is two
                    # entries, an alloc one (two if it needs a new segment).
                    if left == 2 and temps:
                        want_alloc = False
                    else:
                        site = work.site()
                        size = work.size_for(site, scale)
                        if not sim.fits_cached(round_size(size)):
                            size = 1 if sim.fits_cached(MIN_BLOCK) else size
                        if left == 1 and not sim.fits_cached(round_size(size)):
                            lst = sim.free_sorted[False] or sim.free_sorted[True]
                            if lst:
                                size = lst[-1][0]
                        temps.append(sim.malloc(size, site))
                        continue
                if want_alloc:
                    site = work.site()
                    temps.append(sim.malloc(work.size_for(site, scale), site))
                else:
                    if rng.random() < 0.7:
                        block = temps.pop()
                    else:
                        j = rng.randrange(len(temps))
                        temps[j], temps[-1] = temps[-1], temps[j]
                        block = temps.pop()
                    sim.free(block, work.site())
                if recording and rng.random() < 0.00002 and params and entries_left() > 2:
                    # A long-lived tensor released inside the window.
                    j = rng.randrange(len(params))
                    params[j], params[-1] = params[-1], params[j]
                    sim.free(params.pop(), work.site())
            if recording and entries_left() <= 0:
                break
        if recording:
            end = sim.now
            names = {"forward": "## forward ##", "backward": "## backward ##"}
            for k, (phase, t0) in enumerate(phase_marks):
                t1 = phase_marks[k + 1][1] if k + 1 < len(phase_marks) else end
                annotations.append(("START", names[phase], max(t0, it_start)))
                annotations.append(("END", names[phase], t1))
            # record_function ranges as external_annotations: the optimizer
            # step runs between iterations, so time moves on.
            annotations.append(("START", "Optimizer.step#AdamW.step", end))
            sim.now += rng.randrange(50, 5000)
            annotations.append(("END", "Optimizer.step#AdamW.step", sim.now))
        # Between iterations: the optimizer keeps some outputs alive, and now
        # and then the program calls empty_cache().
        if rng.random() < args.empty_cache_prob and (not recording or entries_left() > 64):
            sim.release_cached(work.site())
        while len(temps) > 40 and (not recording or entries_left() > 2):
            block = temps.pop()
            sim.free(block, work.site())
        if recording and entries_left() <= 0:
            break

    return sim, rec, annotations


# ---------------------------------------------------------------------------
# Pickle writer
# ---------------------------------------------------------------------------

FRAME_TARGET = 64 * 1024
PROTO, FRAME, STOP = b"\x80", b"\x95", b"."
EMPTY_DICT, EMPTY_LIST, MARK, MEMOIZE = b"}", b"]", b"(", b"\x94"
SETITEM, SETITEMS, APPEND, APPENDS = b"s", b"u", b"a", b"e"
BATCH = 1000  # the pickler's batch size for APPENDS/SETITEMS


def encode_int(x):
    """Same opcode choice as pickle's save_long (protocol >= 2)."""
    if 0 <= x <= 0xFF:
        return b"K" + bytes((x,))
    if 0 <= x <= 0xFFFF:
        return b"M" + x.to_bytes(2, "little")
    if -0x80000000 <= x <= 0x7FFFFFFF:
        return b"J" + x.to_bytes(4, "little", signed=True)
    n = (x.bit_length() >> 3) + 1
    data = x.to_bytes(n, "little", signed=True)
    if x < 0 and n > 1 and data[-1] == 0xFF and data[-2] & 0x80:
        data = data[:-1]
    if len(data) < 256:
        return b"\x8a" + bytes((len(data),)) + data
    return b"\x8b" + struct.pack("<i", len(data)) + data


class PickleWriter:
    """Streams protocol-4 opcodes with the C pickler's conventions: every
    dict, list, tuple and string is memoized (MEMOIZE), repeated objects are
    written as BINGET/LONG_BINGET, containers are filled in batches of 1000
    (a one-element container uses APPEND/SETITEM), and the output is cut into
    FRAMEs of about 64 KiB. Object identity is modelled explicitly: strings
    are shared by value, stacks and frames by their id in the recording."""

    def __init__(self, f, protocol):
        if protocol < 4:
            raise SystemExit("only protocol 4 and 5 are supported (PyTorch writes 4 by default)")
        self.f = f
        self.buf = bytearray()
        self.memo_len = 0
        self.strings = {}
        f.write(PROTO + bytes((protocol,)))

    # -- framing -------------------------------------------------------------
    def commit(self, force=False):
        if len(self.buf) >= FRAME_TARGET or (force and self.buf):
            if len(self.buf) >= 4:
                self.f.write(FRAME + struct.pack("<Q", len(self.buf)))
            self.f.write(self.buf)
            self.buf = bytearray()

    def finish(self):
        self.buf += STOP
        self.commit(force=True)

    # -- memo ------------------------------------------------------------------
    def memoize(self):
        self.buf += MEMOIZE
        self.memo_len += 1
        return self.memo_len - 1

    @staticmethod
    def get(index):
        if index < 256:
            return b"h" + bytes((index,))
        return b"j" + struct.pack("<I", index)

    # -- values ----------------------------------------------------------------
    def put_str(self, s):
        ref = self.strings.get(s)
        if ref is not None:
            self.buf += ref
            return
        data = s.encode("utf-8", "surrogatepass")
        if len(data) <= 0xFF:
            self.buf += b"\x8c" + bytes((len(data),)) + data
        else:
            self.buf += b"X" + struct.pack("<I", len(data)) + data
        self.strings[s] = self.get(self.memoize())

    def put(self, value):
        """Generic save for the small parts (settings, annotations)."""
        self.commit()
        if value is None:
            self.buf += b"N"
        elif value is True:
            self.buf += b"\x88"
        elif value is False:
            self.buf += b"\x89"
        elif isinstance(value, int):
            self.buf += encode_int(value)
        elif isinstance(value, float):
            self.buf += b"G" + struct.pack(">d", value)
        elif isinstance(value, str):
            self.put_str(value)
        elif isinstance(value, dict):
            self.put_dict(list(value.items()))
        elif isinstance(value, list):
            self.put_list(value, self.put)
        elif isinstance(value, tuple) and len(value) == 2:
            self.put(value[0])
            self.put(value[1])
            self.buf += b"\x86"  # TUPLE2
            self.memoize()
        else:
            raise TypeError(type(value))

    def put_dict(self, items):
        """items: list of (key, value) where value is a plain value or a
        callable that writes itself."""
        self.buf += EMPTY_DICT
        self.memoize()

        def put_item(kv):
            self.put_str(kv[0])
            v = kv[1]
            if callable(v):
                v()
            else:
                self.put(v)
        if len(items) == 1:
            put_item(items[0])
            self.buf += SETITEM
        elif items:
            for start in range(0, len(items), BATCH):
                self.buf += MARK
                for kv in items[start:start + BATCH]:
                    put_item(kv)
                self.buf += SETITEMS

    def put_list(self, items, put_one, count=None):
        """Write a list whose items are produced by put_one(item)."""
        self.buf += EMPTY_LIST
        self.memoize()
        n = len(items) if count is None else count
        if n == 1:
            for item in items:
                put_one(item)
            self.buf += APPEND
            return
        batch = 0
        for item in items:
            if batch == 0:
                self.buf += MARK
            put_one(item)
            batch += 1
            if batch == BATCH:
                self.buf += APPENDS
                batch = 0
        if batch:
            self.buf += APPENDS


class SnapshotWriter(PickleWriter):
    def __init__(self, f, protocol, frames, stacks, fresh_patterns):
        super().__init__(f, protocol)
        self.frames = frames
        self.stacks = stacks
        self.fresh_patterns = fresh_patterns
        self.n_stacks = len(stacks)
        self.frame_memo = [None] * len(frames)
        self.stack_memo = [None] * len(stacks)
        # Memo index per fresh list (-1: not written yet). An array rather than
        # a dict of opcodes: there can be millions of fresh lists.
        self.fresh_memo = array.array("q", [-1]) * len(fresh_patterns)
        self.empty_memo = None

    def put_frame(self, index):
        ref = self.frame_memo[index]
        if ref is not None:
            self.buf += ref
            return
        name, filename, line = self.frames[index]
        self.buf += EMPTY_DICT
        ref = self.get(self.memoize())
        self.buf += MARK
        self.put_str("name")
        self.put_str(name)
        self.put_str("filename")
        self.put_str(filename)
        self.put_str("line")
        self.buf += encode_int(line)
        self.buf += SETITEMS
        self.frame_memo[index] = ref

    def put_stack(self, ref):
        if ref == EMPTY:
            if self.empty_memo is not None:
                self.buf += self.empty_memo
            else:
                self.buf += EMPTY_LIST
                self.empty_memo = self.get(self.memoize())
            return
        if ref < self.n_stacks:
            cached = self.stack_memo[ref]
            if cached is not None:
                self.buf += cached
                return
            pattern = ref
        else:
            fresh = ref - self.n_stacks
            index = self.fresh_memo[fresh]
            if index >= 0:
                self.buf += self.get(index)
                return
            pattern = self.fresh_patterns[fresh]
        self.buf += EMPTY_LIST
        index = self.memoize()
        self.put_list_items(self.stacks[pattern])
        if ref < self.n_stacks:
            self.stack_memo[ref] = self.get(index)
        else:
            self.fresh_memo[ref - self.n_stacks] = index

    def put_list_items(self, frames):
        if len(frames) == 1:
            self.put_frame(frames[0])
            self.buf += APPEND
            return
        for start in range(0, len(frames), BATCH):
            self.buf += MARK
            for fi in frames[start:start + BATCH]:
                self.put_frame(fi)
            self.buf += APPENDS


def final_segments(sim):
    """Segments sorted by address with their blocks in address order."""
    by_seg = {}
    for b in sim.blocks.values():
        by_seg.setdefault(b.seg.addr, []).append(b)
    out = []
    for addr in sorted(sim.segments):
        seg = sim.segments[addr]
        blocks = sorted(by_seg[addr], key=lambda b: b.addr)
        assert sum(b.size for b in blocks) == seg.size
        out.append((seg, blocks))
    return out


ALLOCATOR_SETTINGS = {
    "PYTORCH_CUDA_ALLOC_CONF": "",
    "max_split_size": -1,
    "garbage_collection_threshold": 0.0,
    "expandable_segments": False,
    "pinned_num_register_threads": 1,
    "release_lock_on_cudamalloc": False,
    "pinned_use_cuda_host_register": False,
    "roundup_power2_divisions": {str(1 << i): 0 for i in range(16)},
}


def write_snapshot(path, protocol, frames, stacks, sim, rec, annotations):
    with open(path, "wb", buffering=1 << 20) as f:
        w = SnapshotWriter(f, protocol, frames, stacks, sim.fresh_patterns)
        segs = final_segments(sim)

        def put_segment(item):
            seg, blocks = item
            w.commit()
            alloc = [b for b in blocks if b.allocated]
            allocated = sum(b.size for b in alloc)
            items = [
                ("device", 0),
                ("address", seg.addr),
                ("total_size", seg.size),
                ("allocated_size", allocated),
                ("active_size", allocated),
                ("requested_size", sum(b.requested for b in alloc)),
                ("stream", 0),
                ("segment_type", "small" if seg.small else "large"),
                ("segment_pool_id", (0, 0)),
                ("is_expandable", False),
            ]
            block_list = ("blocks", lambda: w.put_list(blocks, put_block))
            frames_item = ("frames", lambda: w.put_stack(seg.stack))
            # PyTorch inserts an empty 'frames' right away but appends real
            # frames after symbolizing, i.e. after 'blocks'.
            if seg.stack == EMPTY:
                items += [frames_item, block_list]
            else:
                items += [block_list, frames_item]
            w.put_dict(items)

        def put_block(b):
            w.put_dict([
                ("address", b.addr),
                ("size", b.size),
                ("requested_size", b.requested),
                ("state", "active_allocated" if b.allocated else "inactive"),
                ("frames", lambda: w.put_stack(b.stack if b.allocated else EMPTY)),
            ])

        action, addr, size, tm, stack = rec.action, rec.addr, rec.size, rec.time, rec.stack
        names = ACTION_NAMES
        buf_limit = FRAME_TARGET

        def put_entry(i):
            # The hot loop: one trace entry, keys in PyTorch's order.
            w.buf += b"}\x94("      # EMPTY_DICT MEMOIZE MARK
            w.memo_len += 1
            w.put_str("action")
            w.put_str(names[action[i]])
            w.put_str("addr")
            w.buf += encode_int(addr[i])
            w.put_str("size")
            w.buf += encode_int(size[i])
            w.put_str("stream")
            w.buf += b"K\x00"
            w.put_str("time_us")
            w.buf += encode_int(tm[i])
            w.put_str("frames")
            w.put_stack(stack[i])
            w.buf += SETITEMS
            if len(w.buf) >= buf_limit:
                w.commit()

        def put_trace():
            w.put_list(range(len(rec)), put_entry)

        def put_device_traces():
            w.buf += EMPTY_LIST
            w.memoize()
            put_trace()
            w.buf += APPEND

        notes = [{"stage": stage, "name": name, "device": 0, "time_us": t} for stage, name, t in annotations]
        w.put_dict([
            ("segments", lambda: w.put_list(segs, put_segment)),
            ("device_traces", put_device_traces),
            ("allocator_settings", ALLOCATOR_SETTINGS),
            ("external_annotations", notes),
        ])
        w.finish()


# ---------------------------------------------------------------------------
# Self-test: the same snapshot as Python objects, pickled by CPython
# ---------------------------------------------------------------------------

def build_objects(frames, stacks, sim, rec, annotations):
    """The object graph the streaming writer describes, with the same sharing."""
    strs = {}

    def S(s):
        return strs.setdefault(s, s)

    frame_objs = [{S("name"): S(n), S("filename"): S(f), S("line"): ln} for n, f, ln in frames]
    pool = [[frame_objs[i] for i in st] for st in stacks]
    fresh = {}
    empty = []

    def stack(ref):
        if ref == EMPTY:
            return empty
        if ref < len(stacks):
            return pool[ref]
        if ref not in fresh:
            fresh[ref] = [frame_objs[i] for i in stacks[sim.fresh_patterns[ref - len(stacks)]]]
        return fresh[ref]

    segments = []
    for seg, blocks in final_segments(sim):
        alloc = [b for b in blocks if b.allocated]
        d = {S("device"): 0, S("address"): seg.addr, S("total_size"): seg.size,
             S("allocated_size"): sum(b.size for b in alloc), S("active_size"): sum(b.size for b in alloc),
             S("requested_size"): sum(b.requested for b in alloc), S("stream"): 0,
             S("segment_type"): S("small" if seg.small else "large"),
             S("segment_pool_id"): tuple([0, 0]), S("is_expandable"): False}
        blist = [{S("address"): b.addr, S("size"): b.size, S("requested_size"): b.requested,
                  S("state"): S("active_allocated" if b.allocated else "inactive"),
                  S("frames"): stack(b.stack if b.allocated else EMPTY)} for b in blocks]
        if seg.stack == EMPTY:
            d[S("frames")] = stack(EMPTY)
            d[S("blocks")] = blist
        else:
            d[S("blocks")] = blist
            d[S("frames")] = stack(seg.stack)
        segments.append(d)
    trace = [{S("action"): S(ACTION_NAMES[rec.action[i]]), S("addr"): rec.addr[i], S("size"): rec.size[i],
              S("stream"): 0, S("time_us"): rec.time[i], S("frames"): stack(rec.stack[i])}
             for i in range(len(rec))]

    def settings(v):
        if isinstance(v, dict):
            return {S(k): settings(x) for k, x in v.items()}
        return S(v) if isinstance(v, str) else v
    return {S("segments"): segments, S("device_traces"): [trace],
            S("allocator_settings"): settings(ALLOCATOR_SETTINGS),
            S("external_annotations"): [{S("stage"): S(a), S("name"): S(b), S("device"): 0, S("time_us"): t}
                                        for a, b, t in annotations]}


def unframed(data):
    """The opcode stream without FRAME opcodes (frame cut points are an
    implementation detail of the pickler, not part of the object)."""
    ops = list(pickletools.genops(data))
    out = bytearray()
    for k, (op, _arg, pos) in enumerate(ops):
        end = ops[k + 1][2] if k + 1 < len(ops) else len(data)
        if op.name != "FRAME":
            out += data[pos:end]
    return bytes(out)


def selftest(args, frames, stacks):
    tmp = io.BytesIO()
    sim, rec, annotations = simulate(args, frames, stacks)
    w_path = args.out
    write_snapshot(w_path, 4, frames, stacks, sim, rec, annotations)
    with open(w_path, "rb") as f:
        mine = f.read()
    obj = build_objects(frames, stacks, sim, rec, annotations)
    pickle.dump(obj, tmp, protocol=4)
    theirs = tmp.getvalue()
    loaded = pickle.loads(mine)
    assert loaded == obj, "streamed pickle does not load to the expected objects"
    assert unframed(mine) == unframed(theirs), "opcode stream differs from CPython's pickler"
    print(f"selftest ok: {len(rec)} entries, {len(mine)} bytes (CPython: {len(theirs)} bytes)")


# ---------------------------------------------------------------------------


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--entries", type=int, required=True, help="trace entries to record")
    p.add_argument("--out", required=True, help="output pickle path")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--protocol", type=int, default=4, choices=(4, 5))
    p.add_argument("--frames", type=int, default=3000, help="distinct frame dicts")
    p.add_argument("--stacks", type=int, default=4000, help="distinct stack patterns")
    p.add_argument("--depth", type=int, default=20, help="mean frames per stack")
    p.add_argument("--fresh-stack-fraction", type=float, default=1.0,
                   help="share of events that get their own frame-list object (as in real files, "
                        "where every captured traceback becomes a new list); the rest reuse one "
                        "pooled list per stack pattern, which makes the file smaller")
    p.add_argument("--context", choices=("all", "alloc"), default="all",
                   help="like _record_memory_history(context=...): with 'all' frees record their "
                        "own stack, with 'alloc' they reuse the allocation's frame list")
    p.add_argument("--iteration-allocs", type=int, default=1500,
                   help="allocations in the forward half of one simulated iteration")
    p.add_argument("--empty-cache-prob", type=float, default=0.8,
                   help="chance of an empty_cache() after an iteration")
    p.add_argument("--warmup", type=int, default=None,
                   help="allocator operations simulated before recording starts")
    p.add_argument("--selftest", action="store_true",
                   help="also build the objects in memory and compare with CPython's pickler (small N only)")
    args = p.parse_args(argv)

    start = time.perf_counter()
    rng = random.Random(args.seed)
    frames = build_frames(rng, args.frames)
    stacks = build_stacks(rng, len(frames), args.stacks, args.depth)
    if args.selftest:
        selftest(args, frames, stacks)
        return 0
    sim, rec, annotations = simulate(args, frames, stacks)
    t_sim = time.perf_counter()
    write_snapshot(args.out, args.protocol, frames, stacks, sim, rec, annotations)
    t_end = time.perf_counter()

    counts = {}
    for a in rec.action:
        counts[a] = counts.get(a, 0) + 1
    mix = ", ".join(f"{ACTION_NAMES[a]} {counts[a]}" for a in sorted(counts))
    size = os.path.getsize(args.out)
    print(f"entries: {len(rec)} ({mix})", file=sys.stderr)
    print(f"segments: {len(sim.segments)}, reserved {sim.reserved / MIB:.0f} MiB; "
          f"simulate {t_sim - start:.1f}s, write {t_end - t_sim:.1f}s", file=sys.stderr)
    print(f"{args.out}: {size} bytes ({size / MIB:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
