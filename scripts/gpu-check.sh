#!/usr/bin/env bash
# The GPU check of `vramscope record`, for a machine with an NVIDIA GPU and PyTorch but no Rust
# toolchain: the release binaries `vramscope`, `libvramscope_hook.so` and `cudarc-train` are
# taken from BIN (default .dev/bin). Records the cudarc sample and samples/pytorch with
# PyTorch's three allocator set-ups and with bf16 autocast, with `info --json` of each trace
# (at the peak and at the first optimizer step) beside PyTorch's own figures from the same run.
# With the pip wheel (WHEEL, default dist/*.whl): its install, the out-of-memory capture
# (`vramscope run`, VRAMSCOPE_CAPTURE_OOM) and `vramscope.record()` on CUDA. Last, held-out runs'
# summaries (torch.cuda's own counters) for `vramscope estimate` to be checked against, and the
# advisor's GPU-only remedies against runs with each change.
# Everything lands in RESULTS (default /tmp/gpu-check) and, packed, in $OUT/gpu-check.tar.gz
# when OUT is set.
set -u
BIN=${BIN:-.dev/bin}
RESULTS=${RESULTS:-/tmp/gpu-check}
mkdir -p "$RESULTS"
export VRAMSCOPE_HOOK="$BIN/libvramscope_hook.so" PYTHONUNBUFFERED=1 KINETO_LOG_LEVEL=5
step() { echo "== $*"; }
# What did not come out as it should, said again at the end (the steps go on regardless).
PROBLEMS=()
problem() { echo "!! $*"; PROBLEMS+=("$*"); }
# A recorded training run must finish: its summary is the script's last act.
finished() { [ -s "$RESULTS/$1.summary.json" ] || problem "$1: the program did not finish under vramscope record (see above)"; }
TRAIN=(samples/pytorch/train.py --device cuda --steps 3 --d-model 1024 --layers 8 --heads 16 --seq-len 512 --vocab 32000)

step "device"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$RESULTS/nvidia-smi.csv"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'

step "pytorch sees the GPU under the hook"
VRAMSCOPE_RECORD_DIR=$(mktemp -d) LD_PRELOAD="$VRAMSCOPE_HOOK" timeout 120 python3 -c 'import torch; print("cuda available:", torch.cuda.is_available())'

step "cudarc sample"
timeout 120 "$BIN/vramscope" record -o "$RESULTS/cudarc-train.vtrace" -- "$BIN/cudarc-train" 3 4 64
timeout 60 "$BIN/vramscope" info --json "$RESULTS/cudarc-train.vtrace" > "$RESULTS/cudarc-train.info.json"

for conf in plain expandable async; do
    case $conf in
        plain) alloc= ;;
        expandable) alloc=expandable_segments:True ;;
        async) alloc=backend:cudaMallocAsync ;;
    esac
    step "pytorch, allocator: ${alloc:-default}"
    PYTORCH_CUDA_ALLOC_CONF=$alloc timeout 240 "$BIN/vramscope" record -o "$RESULTS/torch-$conf.vtrace" -- \
        python3 "${TRAIN[@]}" --summary "$RESULTS/torch-$conf.summary.json"
    finished "torch-$conf"
    timeout 60 "$BIN/vramscope" info --json "$RESULTS/torch-$conf.vtrace" > "$RESULTS/torch-$conf.info.json"
    python3 - "$RESULTS/torch-$conf.summary.json" "$RESULTS/torch-$conf.info.json" <<'PY'
import json, sys
s, i = (json.load(open(p)) for p in sys.argv[1:3])
d = next((d for d in i.get("devices", []) if d.get("device") == 0), {})
c = s.get("cuda", {})
print(f"  torch reserved {c.get('memory_reserved')} max {c.get('max_memory_reserved')} ({c.get('allocator_backend')})"
      f" | trace reserved {d.get('reserved_bytes')} peak {d.get('peak_reserved_bytes')}")
PY
done

step "pytorch, bf16 autocast, default allocator"
timeout 240 "$BIN/vramscope" record -o "$RESULTS/torch-bf16.vtrace" -- \
    python3 "${TRAIN[@]}" --bf16 --summary "$RESULTS/torch-bf16.summary.json"
finished torch-bf16

step "pytorch, torch.compile"
timeout 300 "$BIN/vramscope" record -o "$RESULTS/torch-compile.vtrace" -- \
    python3 "${TRAIN[@]}" --compile --summary "$RESULTS/torch-compile.summary.json" 2>&1 | grep -v "^W1\|^I1" | tail -3
finished torch-compile

step "a run that dies of CUDA OOM (exit status 1 expected)"
timeout 120 "$BIN/vramscope" record -o "$RESULTS/oom.vtrace" -- python3 tests/scripts/cuda_oom.py 2>&1 | tail -4
timeout 60 "$BIN/vramscope" info "$RESULTS/oom.vtrace" | grep -i "memory\|peak\|cuda:0"
timeout 60 "$BIN/vramscope" info --json "$RESULTS/oom.vtrace" > "$RESULTS/oom.info.json"

step "categories at the peak and at the first optimizer step"
for trace in "$RESULTS"/torch-*.vtrace; do
    timeout 60 "$BIN/vramscope" info --json --at optimizer_step "$trace" > "${trace%.vtrace}.at-step.json"
    python3 - "${trace%.vtrace}.summary.json" "${trace%.vtrace}.at-step.json" <<'PY'
import json, sys
s, i = (json.load(open(p)) for p in sys.argv[1:3])
d = next((d for d in i.get("devices", []) if d.get("device") == 0), {})
a = next((d for d in i.get("at", {}).get("devices", []) if d.get("device") == 0), {})
print(f"  {sys.argv[1].split('/')[-1]}: params {s['parameter_bytes']} buffers {s['buffer_bytes']} grads {s['gradient_bytes']}"
      f" state on device {s.get('optimizer_state_bytes_on_device')}")
print(f"    at step: {a.get('categories')}")
print(f"    at peak: {d.get('categories_at_peak')}")
PY
done

# The pip wheel on the GPU (WHEEL: dist/*.whl, carried): installed into a venv that sees the
# machine's PyTorch; the out-of-memory capture and in-process recording on CUDA.
WHEEL=${WHEEL:-$(ls dist/vramscope-*.whl 2>/dev/null | head -n1)}
if [ -n "$WHEEL" ]; then
    step "the wheel: install"
    python3 -m venv --system-site-packages "$RESULTS/venv"
    # The machine's PyTorch may sit in a venv of its own, which a new venv's
    # --system-site-packages does not see: a .pth names python3's package directories.
    python3 -c 'import sys; print("\n".join(p for p in sys.path if p.endswith("-packages")))' \
        > "$("$RESULTS/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/machine-packages.pth"
    "$RESULTS/venv/bin/pip" install --no-index --quiet "$WHEEL"
    VPY="$RESULTS/venv/bin/python"
    step "the wheel: vramscope run catches a CUDA OOM (exit status 1 expected; a snapshot and the post-mortem)"
    (cd "$RESULTS" && timeout 180 "$RESULTS/venv/bin/vramscope" run --oom-dir oom-run -- "$VPY" "$OLDPWD/tests/scripts/cuda_oom.py" 2>&1 | tail -20)
    ls -la "$RESULTS/oom-run"
    ls "$RESULTS"/oom-run/*.pickle >/dev/null 2>&1 || problem "vramscope run: no snapshot written at the OOM"
    step "the wheel: VRAMSCOPE_CAPTURE_OOM alone"
    (cd "$RESULTS" && VRAMSCOPE_CAPTURE_OOM=oom-env timeout 180 "$VPY" "$OLDPWD/tests/scripts/cuda_oom.py" 2>&1 | tail -6)
    ls -la "$RESULTS/oom-env"
    ls "$RESULTS"/oom-env/*.pickle >/dev/null 2>&1 || problem "VRAMSCOPE_CAPTURE_OOM: no snapshot written at the OOM"
    step "the wheel: vramscope.record() on CUDA, a model built before the block"
    timeout 240 "$VPY" - "$RESULTS/inprocess-cuda.vtrace" <<'PY' || problem "vramscope.record() on CUDA failed (see above)"
import sys, torch, vramscope
model = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(4)]).cuda()
opt = torch.optim.Adam(model.parameters())
params = sum(p.numel() * p.element_size() for p in model.parameters())
with vramscope.record(sys.argv[1], force=True):
    for _ in range(3):
        loss = model(torch.randn(64, 4096, device="cuda")).square().mean()
        opt.zero_grad(); loss.backward(); opt.step()
torch.cuda.synchronize()
facts = vramscope.summary(sys.argv[1])
dev = next(d for d in facts["devices"] if d["device"] == 0)
print("params", params, "| at peak", dev["categories_at_peak"], "| peak", dev["peak_allocated_bytes"],
      "| torch max allocated", torch.cuda.max_memory_allocated(), "| notes", facts["notes"])
PY
fi

# Runs for `vramscope estimate` to be checked against (estimate them on a machine without a GPU
# and compare with the summaries' `cuda` counters): other sizes than the samples', checkpointing,
# SGD with momentum, tied weights, and attention through scaled_dot_product_attention.
step "held-out runs for vramscope estimate (summaries only, no recording)"
for run in "small --layers 4 --d-model 768 --heads 12 --batch-size 16 --seq-len 256 --vocab 16000" \
           "ckpt --checkpoint --bf16 --layers 8 --d-model 1024 --heads 16 --batch-size 8 --seq-len 1024" \
           "sgd --optimizer sgd --momentum 0.9 --tie-weights --layers 6 --d-model 1024 --batch-size 12" \
           "mlp --model mlp --d-model 2048 --batch-size 64 --vocab 32000"; do
    set -- $run
    name=$1; shift
    timeout 300 python3 samples/pytorch/train.py --device cuda --steps 3 --summary "$RESULTS/heldout-$name.summary.json" "$@" \
        || problem "held-out run $name failed"
done
timeout 300 python3 - "$RESULTS/heldout-sdpa.json" <<'PY' || problem "held-out sdpa run failed"
import json, sys, torch, torch.nn.functional as F
q, k, v = (torch.randn(8, 16, 2048, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
torch.cuda.synchronize()
json.dump({"max_memory_allocated": torch.cuda.max_memory_allocated(), "max_memory_reserved": torch.cuda.max_memory_reserved(),
           "device": torch.cuda.get_device_name(), "torch": torch.__version__}, open(sys.argv[1], "w"))
PY

# The advisor's remedies that only show on a GPU or differ there, for `vramscope advise` on the
# base recording to be compared with each changed run's torch.cuda counters (its summary's
# `cuda.max_memory_allocated`): the multi-tensor step is CUDA's default, so the fused and the
# per-parameter steps save there; CPU offload; gradients kept zeroed; tied embeddings.
step "remedies: a base recording and the runs with each change (summaries)"
REMEDY=(--layers 4 --d-model 512 --heads 8 --batch-size 2 --seq-len 128 --vocab 16000)
timeout 300 "$BIN/vramscope" record -o "$RESULTS/remedy-base.vtrace" -- \
    python3 samples/pytorch/train.py --device cuda --steps 3 "${REMEDY[@]}" || problem "remedy base run failed"
for run in "fused --fused" "loop --no-foreach" "offload --offload-optimizer" "kept --no-zero-grad-none" \
           "tied --tie-weights"; do
    set -- $run
    name=$1; shift
    timeout 300 python3 samples/pytorch/train.py --device cuda --steps 3 "${REMEDY[@]}" \
        --summary "$RESULTS/remedy-$name.summary.json" "$@" || problem "remedy run $name failed"
done
"$BIN/vramscope" advise --json "$RESULTS/remedy-base.vtrace" > "$RESULTS/remedy-base.advice.json" \
    || problem "advise on the remedy base failed"

# The whole GPU (issue 51): a PyTorch process recorded beside a second one that holds memory and
# is not recorded; NVML's account of both (`info --json`'s whole_devices) against what each
# process's torch.cuda says, and NCCL's buffers (outside PyTorch) under torchrun with nccl.
step "whole GPU: a recorded run beside a process holding memory, and NCCL under torchrun"
python3 - "$RESULTS/holder.json" <<'PY' &
import json, sys, time, torch
x = torch.empty(3 << 30, dtype=torch.uint8, device="cuda")
json.dump({"reserved": torch.cuda.memory_reserved()}, open(sys.argv[1], "w"))
time.sleep(90)
PY
HOLDER=$!
sleep 15
timeout 300 "$BIN/vramscope" record -o "$RESULTS/beside.vtrace" -- \
    python3 samples/pytorch/train.py --device cuda --steps 3 --summary "$RESULTS/beside.summary.json" \
    || problem "the run beside another process failed"
kill $HOLDER 2>/dev/null
"$BIN/vramscope" info --json "$RESULTS/beside.vtrace" > "$RESULTS/beside.info.json" || problem "info on beside failed"
python3 - "$RESULTS/beside.info.json" <<'PY' || problem "the whole device does not show both processes"
import json, sys
whole = json.load(open(sys.argv[1])).get("whole_devices", [])
assert whole and len(whole[0]["processes"]) >= 2, whole
print(json.dumps([{k: p.get(k) for k in ("name", "recorded", "at_high_bytes", "peak_bytes", "parts")} for p in whole[0]["processes"]], indent=1))
PY
timeout 300 "$BIN/vramscope" record -o "$RESULTS/nccl.vtrace" -- \
    torchrun --nproc_per_node=1 samples/pytorch/train.py --device cuda --steps 3 \
    || problem "the torchrun (nccl) run failed"
"$BIN/vramscope" info "$RESULTS/nccl.vtrace" > "$RESULTS/nccl.info.txt" || problem "info on the nccl run failed"
# The flight recorder on a GPU: a ring per process, read back.
timeout 300 "$BIN/vramscope" record --flight=16MiB -o "$RESULTS/flight" -- \
    python3 samples/pytorch/train.py --device cuda --steps 3 || problem "the flight-recorded run failed"
"$BIN/vramscope" info "$RESULTS/flight" > "$RESULTS/flight.info.txt" || problem "info on the flight rings failed"

ls -la "$RESULTS"
if [ ${#PROBLEMS[@]} -eq 0 ]; then
    echo "== gpu-check: no problem found (compare the figures above with PyTorch's)"
else
    echo "== gpu-check: ${#PROBLEMS[@]} problem(s):"
    printf '  %s\n' "${PROBLEMS[@]}"
fi
if [ -n "${OUT:-}" ]; then tar czf "$OUT/gpu-check.tar.gz" -C "$RESULTS" .; fi
