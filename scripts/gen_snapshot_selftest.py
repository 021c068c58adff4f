"""gen_snapshot.py --selftest: the same snapshot built as Python objects with the same sharing,
pickled by CPython, and compared with what the streaming writer wrote (loaded objects and opcode
streams, FRAME opcodes aside).
"""

import io
import pickle
import pickletools

from gen_snapshot_allocator import ACTION_NAMES, EMPTY
from gen_snapshot_pickle import ALLOCATOR_SETTINGS, final_segments, write_snapshot
from gen_snapshot_workload import simulate


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
