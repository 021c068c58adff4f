#!/usr/bin/env bash
# Installs the wheel scripts/build-wheel.sh made into a fresh venv and uses vramscope from that
# venv only, as a user would after `pip install`: the command's version, a recording of a CPU
# PyTorch training run, info and diff of two, the app's window drawn under Xvfb (the picture is
# kept as $VRAMSCOPE_WHEEL_SHOT, /tmp/vramscope-wheel-shot.png by default, for a person to look
# at), and the Python package's tests (python/tests) against the installed package. Prints the
# wheel's size and the install's time.
#
#   scripts/test-wheel.sh [WHEEL]     default: dist/vramscope-*.whl
#
# CPU PyTorch is the project's venv (scripts/install-torch.sh), made visible to the fresh venv by
# a .pth file rather than installed a second time (2.5 GB); nothing else of the project is.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
wheel="${1:-$(ls "$repo"/dist/vramscope-*.whl)}"
torch_python="${VRAMSCOPE_TORCH_PYTHON:-$("$repo/scripts/install-torch.sh" | tail -n1)}"
base_python="$("$torch_python" -c 'import sys; print(sys._base_executable)')"
work="$(mktemp -d "${TMPDIR:-/tmp}/vramscope-wheel-test.XXXXXX")"
trap 'rm -rf "$work"' EXIT

"$base_python" -m venv "$work/venv"
venv="$work/venv"
start=$(date +%s%N)
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-index "$wheel"
end=$(date +%s%N)
printf 'wheel: %s, %s bytes; pip install: %d ms\n' "$(basename "$wheel")" "$(stat -c %s "$wheel")" $(((end - start) / 1000000))
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
"$torch_python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))' >"$site/project-torch.pth"
"$venv/bin/pip" install --quiet --disable-pip-version-check "pytest==9.2.0" "nbclient==0.11.0" "nbformat==5.11.1" "ipykernel==7.4.0"

# From here on only the venv: no build directory, no hook library, no VRAMSCOPE_BIN.
export PATH="$venv/bin:/usr/local/bin:/usr/bin:/bin"
unset VRAMSCOPE_BIN VRAMSCOPE_HOOK CARGO_TARGET_DIR
cd "$work"
set -x
test "$(command -v vramscope)" = "$venv/bin/vramscope"
vramscope --version
vramscope record -o run.vtrace -- python "$repo/samples/pytorch/train.py" --model mlp --steps 3
vramscope info run.vtrace | tee info.txt
grep -q "parameter" info.txt
vramscope record -o bigger.vtrace -- python "$repo/samples/pytorch/train.py" --model mlp --steps 3 --batch-size 64
vramscope diff run.vtrace bigger.vtrace
# The MCP server of the installed command, as an agent's client starts it: handshake, one tool.
printf '%s\n' \
    '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"sh","version":"0"}}}' \
    '{"jsonrpc":"2.0","method":"notifications/initialized"}' \
    '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"summary","arguments":{"paths":"run.vtrace"}}}' \
    | vramscope mcp >mcp.jsonl
python - <<'EOF_MCP'
import json
replies = [json.loads(line) for line in open("mcp.jsonl")]
assert [r["id"] for r in replies] == [1, 2], replies
assert replies[1]["result"]["structuredContent"]["devices"][0]["peak_allocated_bytes"] > 0, replies[1]
EOF_MCP
xvfb-run -a -s "-screen 0 1280x800x24" vramscope run.vtrace --screenshot shot.png --size 1280x800
test -s shot.png
cp shot.png "${VRAMSCOPE_WHEEL_SHOT:-${TMPDIR:-/tmp}/vramscope-wheel-shot.png}"   # for a person to look at
python -m pytest -q -p no:cacheprovider -p pytester "$repo/python/tests"
