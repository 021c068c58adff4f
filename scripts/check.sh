#!/usr/bin/env bash
# The whole check, as CI runs it: formatting, lints (warnings denied; ruff and mypy --strict for
# the Python side), every test, the pip wheel
# (built, installed into a fresh venv, used from there), the docs, and a short fuzz run of each
# importer. Run from anywhere; it works on a fresh machine and reuses the
# build directories under /var/tmp when they are there.
#
#   scripts/check.sh              everything
#   FUZZ_SECONDS=0 scripts/check.sh   skip the fuzz smoke run
set -euo pipefail

cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/vramscope-target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
FUZZ_SECONDS="${FUZZ_SECONDS:-15}"

step() { printf '\n==> %s\n' "$*"; }

step "system packages the GUI and terminal tests need (Xvfb, Mesa, tmux)"
scripts/install-gui-deps.sh

step "PyTorch for CPU in a venv, for the recording tests (reused when already there)"
VRAMSCOPE_TORCH_PYTHON="$(scripts/install-torch.sh | tail -n1)"
export VRAMSCOPE_TORCH_PYTHON

step "rustfmt"
cargo fmt --all -- --check

step "no crate's modules import each other in a cycle (every module directory of every crate)"
mapfile -t module_dirs < <(find app analysis trace-format collector tests samples fuzz -type d \( -name src -o -path '*/src/*' \) | sort)
[ "${#module_dirs[@]}" -ge 30 ] || { echo "the cycle check found only ${#module_dirs[@]} module directories" >&2; exit 1; }
for dir in "${module_dirs[@]}"; do
    python3 scripts/module_cycles.py "$dir"
done

step "only the words module makes sentences: no face says one of its phrases in its own code"
python3 scripts/check_words.py

step "the Python side: ruff (lint and format) and mypy --strict over python/"
scripts/check_python.sh

step "clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "build the binaries and the hook library the end-to-end tests drive"
cargo build --workspace --locked

step "tests"
if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --workspace --locked --no-fail-fast
    cargo test --workspace --doc --locked
else
    cargo test --workspace --locked --no-fail-fast
fi

step "the pip wheel: built for glibc 2.17 (zig), checked by auditwheel, installed into a fresh venv and used from there"
scripts/build-wheel.sh
scripts/test-wheel.sh

step "docs (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked

step "the README's set-up commands: the test command is this check, the main one draws its window"
python3 scripts/check_readme.py

if [ "$FUZZ_SECONDS" -gt 0 ]; then
    step "fuzz smoke run: ${FUZZ_SECONDS}s per target"
    scripts/fuzz.sh "$FUZZ_SECONDS"
fi

step "all checks passed"
