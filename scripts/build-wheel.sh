#!/usr/bin/env bash
# Builds the pip wheel: dist/vramscope-<version>-py3-none-manylinux_2_17_x86_64.whl, holding the
# `vramscope` command (the app and every subcommand; the hook library and the PyTorch shim travel
# inside it) and the `vramscope` Python package. Linked against glibc 2.17 with zig (from the
# `ziglang` package), so that it installs on any Linux x86_64 of the last ten years; checked
# with `auditwheel show`.
#
#   scripts/build-wheel.sh             build dist/*.whl
#
# Tools go into a venv of their own (VRAMSCOPE_WHEEL_VENV, reused when there); the build into
# VRAMSCOPE_WHEEL_TARGET (a target directory of its own: its linker differs from the normal
# build's).
set -euo pipefail

cd "$(dirname "$0")/.."
VENV="${VRAMSCOPE_WHEEL_VENV:-/var/tmp/vramscope-wheel-venv}"
TARGET_DIR="${VRAMSCOPE_WHEEL_TARGET:-/var/tmp/vramscope-wheel-target}"
PLATFORM=manylinux_2_17_x86_64

if [ ! -x "$VENV/bin/maturin" ] || [ ! -x "$VENV/bin/auditwheel" ] || ! "$VENV/bin/python" -c 'import ziglang' 2>/dev/null; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "maturin==1.16.0" "ziglang==0.17.1" "auditwheel==6.8.2"
fi
export PATH="$VENV/bin:$PATH"

rm -rf dist
CARGO_TARGET_DIR="$TARGET_DIR" maturin build --release --locked --zig --compatibility "$PLATFORM" --out dist
wheel=$(ls dist/vramscope-*.whl)
# auditwheel must accept the tag the wheel claims: no symbol newer than glibc 2.17, no library
# outside the manylinux set.
auditwheel show "$wheel" | tee dist/auditwheel.txt
# (auditwheel folds its lines)
tr -s ' \n' ' ' <dist/auditwheel.txt | grep -q "is consistent with the following platform tag: \"$PLATFORM\""
echo "$wheel"
