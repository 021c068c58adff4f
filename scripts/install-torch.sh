#!/usr/bin/env bash
# Creates a Python venv with PyTorch for CPU use (the PyTorch sample and the tests that run it) and
# prints the path of its python as the last line of stdout; progress goes to stderr.
#
#   py=$(scripts/install-torch.sh | tail -n1)
#
# Where: ${VRAMSCOPE_VENV:-/var/tmp/vramscope-venv}, outside the work tree so it survives a fresh
# checkout on the same machine. Idempotent: when the venv holds a finished install of the pinned
# torch that imports, it does nothing (about a second). A half-finished install (no marker, wrong
# version, broken import) is removed and redone.
#
# Why not `pip install torch`: the torch wheel on PyPI is the CUDA build; it links against the
# NVIDIA libraries even when it only runs on the CPU, and its full dependency set (cuda-toolkit,
# triton, cuda-bindings, ...) is about 3 GB. Installing torch and exactly the NVIDIA wheels its
# libraries link against with --no-deps, plus its pure-Python requirements, is about 2.5 GB and
# about 60-90 s (4.1 GB unpacked). The versions are the ones torch's own metadata pins; bump them
# together. Left out, as unneeded on the CPU: cusolver (libtorch_cuda_linalg.so loads it only for
# CUDA linear algebra), curand, nvtx, cuda-bindings, and triton (torch.compile's GPU backend; on the
# CPU it compiles C++ with the system compiler and only warns that flop counting lacks triton).
set -euo pipefail

# Everything but the final path goes to stderr.
exec 3>&1 1>&2

venv="${VRAMSCOPE_VENV:-/var/tmp/vramscope-venv}"
base_python="${VRAMSCOPE_BASE_PYTHON:-python3.11}"
torch_version="2.15.0"

# Linked by libtorch_cuda.so and friends; pinned by torch 2.15.0 (directly or via cuda-toolkit 13.2.2).
nvidia_wheels=(
    nvidia-cuda-runtime==13.2.86
    nvidia-cuda-cupti==13.2.86
    nvidia-cuda-nvrtc==13.2.86
    nvidia-cublas==13.4.1.3
    nvidia-cufft==12.2.0.57
    nvidia-cufile==1.17.1.22
    nvidia-cusparse==12.7.10.12
    nvidia-nvjitlink==13.5.37
    nvidia-cudnn-cu13==9.26.0.51
    nvidia-cusparselt-cu13==0.8.1
    nvidia-nccl-cu13==2.30.7
    nvidia-nvshmem-cu13==3.7.2
)
# torch's Requires-Dist without the CUDA and triton parts; numpy for torch.from_numpy and friends.
python_requirements=(
    filelock
    "typing-extensions>=4.13.0"
    "setuptools>=77.0.3"
    "sympy>=1.13.3"
    "networkx>=2.5.1"
    jinja2
    "fsspec>=0.8.5"
    numpy
)

# Not torch's: what the tests read vramscope's output with (DuckDB reads `export --format parquet`;
# the official MCP client talks to `vramscope mcp`), and the trainers the tests record as real clients (Lightning, accelerate, the transformers Trainer, peft:
# `tests/workloads/trainers.py`).
# Installed beside torch and checked on its own, so adding one does not redo the torch install.
extra_requirements=(
    duckdb==2.0.1
    lightning==2.6.6
    accelerate==1.12.0
    transformers==4.57.1
    # peft: LoRA, as `train.py --lora` fine-tunes with it (the advisor's LoRA remedy is checked
    # against that run).
    peft==0.21.2
    # bitsandbytes: 4-bit loading for QLoRA (`finetune.py --qlora`), on the host too.
    bitsandbytes==0.50.2
    mcp==2.3.0
    # jsonschema: validates every JSON answer against `vramscope schema` (tests/scripts/validate_documents.py).
    jsonschema==4.26.0
)

py="$venv/bin/python"
marker="$venv/.vramscope-install"
# The marker holds what was installed, so changing a pin above makes the next run redo the install.
want_marker="torch==$torch_version ${nvidia_wheels[*]} ${python_requirements[*]}"

# Kineto (torch's profiler) logs about the missing CUPTI device at import otherwise.
export KINETO_LOG_LEVEL="${KINETO_LOG_LEVEL:-5}"
check_torch() {
    "$py" - "$torch_version" <<'EOF'
import sys
import torch
want = sys.argv[1]
got = torch.__version__.split("+")[0]
if got != want:
    sys.exit(f"torch {got} installed, want {want}")
if float(torch.ones(2).sum()) != 2.0:
    sys.exit("torch.ones(2).sum() != 2")
EOF
}

installed() {
    [ -x "$py" ] && [ -f "$marker" ] && [ "$(cat "$marker")" = "$want_marker" ] && check_torch
}

pip=("$py" -m pip --disable-pip-version-check --no-input)
# Each extra as pinned: `pip install` only when one is missing or at another version.
ensure_extras() {
    local pinned='
import sys
from importlib.metadata import version, PackageNotFoundError
for pin in sys.argv[1:]:
    name, want = pin.split("==")
    try:
        if version(name) != want:
            sys.exit(1)
    except PackageNotFoundError:
        sys.exit(1)
'
    if ! "$py" -c "$pinned" "${extra_requirements[@]}"; then
        echo "install-torch: installing ${extra_requirements[*]}" >&2
        "${pip[@]}" install --quiet "${extra_requirements[@]}"
    fi
}

# Two runs at once (a test and a person, say) would install over each other: serialise them.
mkdir -p "$(dirname "$venv")"
if command -v flock >/dev/null 2>&1; then
    exec 4>"$venv.lock"
    flock 4
fi

if installed 2>/dev/null; then
    ensure_extras
    echo "$py" >&3
    exit 0
fi

if ! command -v "$base_python" >/dev/null 2>&1; then
    echo "install-torch: $base_python not found (set VRAMSCOPE_BASE_PYTHON)" >&2
    exit 1
fi

start_s=$SECONDS
if [ -e "$venv" ]; then
    # Only ever delete a venv (or an empty folder): VRAMSCOPE_VENV may point somewhere by mistake.
    if [ ! -f "$venv/pyvenv.cfg" ] && [ -n "$(ls -A "$venv" 2>/dev/null)" ]; then
        echo "install-torch: $venv exists and is not a venv; not touching it" >&2
        exit 1
    fi
    echo "install-torch: removing unfinished or outdated venv at $venv" >&2
    rm -rf "$venv"
fi
echo "install-torch: creating $venv with $("$base_python" --version)" >&2
"$base_python" -m venv "$venv"

echo "install-torch: installing torch's Python requirements" >&2
"${pip[@]}" install --quiet "${python_requirements[@]}"
echo "install-torch: installing torch $torch_version and the NVIDIA libraries it links (--no-deps, ~2.5 GB)" >&2
"${pip[@]}" install --quiet --no-deps "torch==$torch_version" "${nvidia_wheels[@]}"

echo "install-torch: checking that torch imports" >&2
check_torch
ensure_extras
echo "$want_marker" >"$marker"
echo "install-torch: done in $((SECONDS - start_s)) s, $(du -sh "$venv" | cut -f1)" >&2
echo "$py" >&3
