#!/usr/bin/env bash
# The GPU check of `vramscope record`, for a machine with an NVIDIA GPU and PyTorch but no Rust
# toolchain: the release binaries `vramscope`, `libvramscope_hook.so` and `cudarc-train` are
# taken from BIN (default .dev/bin). Records the cudarc sample and samples/pytorch with
# PyTorch's three allocator set-ups, with `info --json` of each trace beside PyTorch's own
# figures; also a snapshot of the same training with PyTorch's allocator history (fp32 and
# bf16) and which clock that history uses. Everything lands in RESULTS (default
# /tmp/gpu-check) and, packed, in $OUT/gpu-check.tar.gz when OUT is set.
set -u
BIN=${BIN:-.dev/bin}
RESULTS=${RESULTS:-/tmp/gpu-check}
mkdir -p "$RESULTS"
export VRAMSCOPE_HOOK="$BIN/libvramscope_hook.so" PYTHONUNBUFFERED=1 KINETO_LOG_LEVEL=5
step() { echo "== $*"; }
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

step "allocator history snapshots"
timeout 240 python3 scripts/gpu/snapshot_run.py "$RESULTS/history-fp32.pickle" -- "${TRAIN[@]:1}" --summary "$RESULTS/history-fp32.summary.json"
timeout 240 python3 scripts/gpu/snapshot_run.py "$RESULTS/history-bf16.pickle" -- "${TRAIN[@]:1}" --bf16 --summary "$RESULTS/history-bf16.summary.json"
timeout 60 python3 scripts/gpu/clock_probe.py > "$RESULTS/clock.json"

ls -la "$RESULTS"
if [ -n "${OUT:-}" ]; then tar czf "$OUT/gpu-check.tar.gz" -C "$RESULTS" .; fi
