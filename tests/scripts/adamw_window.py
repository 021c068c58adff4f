#!/usr/bin/env python3
"""Writes memory snapshots of one training script (a small GPT, AdamW) at several context lengths,
as `torch.cuda.memory._dump_snapshot` writes them after recording one step, and what must be
said of them, worked out here from the tensors' shapes (standard library only).

    python3 adamw_window.py OUT_DIR      -> OUT_DIR/ctx*.pickle, and a JSON line of expectations

Where the recording starts differs as it does in real runs: at one length history was turned on
before the first step, so the window shows AdamW making its state; at the others after warm-up,
so the parameters and the optimizer's state were allocated before the window (their blocks in the
final state carry no frames, or, for the parameters, the `Module.to` that moved them). In every
file the window holds one whole step: the forward (activations by context length), the backward
(one gradient per parameter, from the autograd engine) and AdamW's step (temporaries of each
parameter's size). The expectations: parameters, gradients and optimizer state (two moments per
parameter) as AdamW's update begins, each the sum of the blocks' sizes (requests rounded up to 512
bytes, as the caching allocator does).
"""

import json
import os
import pickle
import sys

HIDDEN, VOCAB, LAYERS = 256, 1000, 4
T0 = 1_700_000_000_000_000


def shapes():
    """The model's parameters: (name, elements)."""
    out = [("wte.weight", VOCAB * HIDDEN), ("wpe.weight", 1024 * HIDDEN)]
    for layer in range(LAYERS):
        out += [(f"h.{layer}.ln_1.weight", HIDDEN), (f"h.{layer}.attn.c_attn.weight", 3 * HIDDEN * HIDDEN),
                (f"h.{layer}.attn.c_proj.weight", HIDDEN * HIDDEN), (f"h.{layer}.ln_2.weight", HIDDEN),
                (f"h.{layer}.mlp.c_fc.weight", 4 * HIDDEN * HIDDEN), (f"h.{layer}.mlp.c_proj.weight", 4 * HIDDEN * HIDDEN)]
    return out + [("ln_f.weight", HIDDEN)]


def rounded(size):
    return max(512, (size + 511) // 512 * 512)


def frame(name, filename, line):
    return {"name": name, "filename": filename, "line": line}


SITE = "/usr/lib/python3/dist-packages/torch"
PROGRAM = [frame("train_step", "/work/gpt/train.py", 40), frame("<module>", "/work/gpt/train.py", 90)]
MOVE = [frame("_apply", f"{SITE}/nn/modules/module.py", 942), frame("to", f"{SITE}/nn/modules/module.py", 1355),
        frame("<module>", "/work/gpt/train.py", 70)]
FORWARD = [frame("forward", "/work/gpt/model.py", 55), frame("_call_impl", f"{SITE}/nn/modules/module.py", 1784)] + PROGRAM
BACKWARD = [frame("torch::autograd::Engine::evaluate_function(std::shared_ptr<torch::autograd::GraphTask>&)", "??", 0)]
STATE = [frame("_init_group", f"{SITE}/optim/adamw.py", 110), frame("step", f"{SITE}/optim/adamw.py", 210)] + PROGRAM
STEP = [frame("_multi_tensor_adamw", f"{SITE}/optim/adamw.py", 640), frame("step", f"{SITE}/optim/adamw.py", 230)] + PROGRAM


class Snapshot:
    """One device's allocations: each block its own segment, as large requests get."""

    def __init__(self):
        self.address = 0x7F0000000000
        self.trace, self.segments, self.t = [], [], T0

    def alloc(self, size, frames, in_window=True):
        self.t += 10
        address, self.address = self.address, self.address + (1 << 24)
        block = {"address": address, "size": rounded(size), "requested_size": size, "state": "active_allocated",
                 "frames": frames}
        self.segments.append({"device": 0, "address": address, "total_size": rounded(size),
                              "allocated_size": rounded(size), "active_size": rounded(size), "requested_size": size,
                              "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
                              "is_expandable": False, "frames": frames, "blocks": [block]})
        if in_window:
            self.trace.append({"action": "segment_alloc", "addr": address, "size": rounded(size), "stream": 0,
                               "time_us": self.t, "frames": frames})
            self.trace.append({"action": "alloc", "addr": address, "size": size, "stream": 0, "time_us": self.t,
                               "frames": frames})
        return block

    def free(self, block):
        self.t += 10
        for action in ("free_requested", "free_completed"):
            self.trace.append({"action": action, "addr": block["address"], "size": block["requested_size"],
                               "stream": 0, "time_us": self.t, "frames": block["frames"]})
        block.update(state="inactive", requested_size=0, frames=[])


def snapshot(context, history_before_first_step, parameter_frames):
    s = Snapshot()
    # The model, moved to the device before any recording.
    params = [s.alloc(4 * n, MOVE if parameter_frames else [], in_window=False) for _, n in shapes()]
    if not history_before_first_step:
        # Warm-up steps before the window: AdamW's two moments per parameter already exist.
        for _, n in shapes():
            for _ in range(2):
                s.alloc(4 * n, [], in_window=False)
    # The step recorded: forward, backward, AdamW.
    activations = [s.alloc(4 * context * HIDDEN * k, FORWARD) for _ in range(LAYERS) for k in (1, 3, 4, 4)]
    # Backward: a gradient per parameter, last layer first, each layer's activations going.
    for _, n in reversed(shapes()):
        s.alloc(4 * n, BACKWARD)
        if activations:
            s.free(activations.pop())
    while activations:
        s.free(activations.pop())
    if history_before_first_step:
        for _, n in shapes():
            for _ in range(2):
                s.alloc(4 * n, STATE)
    for _, n in shapes():
        s.free(s.alloc(4 * n, STEP))
    return {"segments": s.segments, "device_traces": [s.trace],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1, "expandable_segments": False}}


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    parameter_bytes = sum(rounded(4 * n) for _, n in shapes())
    files = []
    for context, before_first, frames in [(128, True, True), (256, False, True), (512, False, False), (1024, False, False)]:
        name = f"ctx{context}.pickle"
        snap = snapshot(context, before_first, frames)
        with open(os.path.join(out_dir, name), "wb") as f:
            pickle.dump(snap, f, protocol=4)
        entries = snap["device_traces"][0]
        # AdamW's update begins (its first temporary), from the first entry: the model's state
        # and the step's gradients alive, nothing else.
        update = next(e for e in entries if e["action"] == "alloc" and e["frames"] == STEP)
        files.append({"file": name, "update_offset_us": update["time_us"] - entries[0]["time_us"]})
    print(json.dumps({"files": files, "parameter_bytes": parameter_bytes, "gradient_bytes": parameter_bytes,
                      "optimizer_state_bytes": 2 * parameter_bytes}))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: adamw_window.py OUT_DIR")
    main(sys.argv[1])
