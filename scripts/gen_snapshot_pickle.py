"""gen_snapshot.py's pickle writer: a streaming protocol-4/5 opcode writer with the C pickler's
conventions (memo, batches, frames), the snapshot-specific part that writes frames and stacks
with the sharing real files have, and write_snapshot, which writes the whole file.
"""

import array
import struct

from gen_snapshot_allocator import ACTION_NAMES, EMPTY

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
