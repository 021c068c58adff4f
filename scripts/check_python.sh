#!/usr/bin/env bash
# Lints and type-checks the Python side (python/: the package, its tests and the PyTorch shim):
# `ruff check`, `ruff format --check` and `mypy --strict`, as configured in pyproject.toml
# ([tool.ruff], [tool.mypy]). Exits non-zero on any finding; runs all three first.
#
#   scripts/check_python.sh
#
# The tools live in a venv of their own, ${VRAMSCOPE_PYCHECK_VENV:-/var/tmp/vramscope-pycheck-venv}
# (outside the work tree, so it survives a fresh checkout), with the pins below; it is made once
# (about 15 s) and reused while the pins hold (the check then takes a few seconds). What the
# checker reads types from is there too: pytest, IPython, nbformat and nbclient (the plugin, the
# notebook magic, the tests), and PyTorch, which the shim is checked against, from the project's
# venv (scripts/install-torch.sh, or VRAMSCOPE_TORCH_PYTHON) through a .pth file rather than a
# second install.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
venv="${VRAMSCOPE_PYCHECK_VENV:-/var/tmp/vramscope-pycheck-venv}"
torch_python="${VRAMSCOPE_TORCH_PYTHON:-$("$repo/scripts/install-torch.sh" | tail -n1)}"

# The checkers, and the libraries whose types they read (the versions scripts/test-wheel.sh runs
# the tests with; IPython is what ipykernel 7.4.0 brings). Bump together with what they report.
pins=(
    ruff==0.17.6
    mypy==2.4.1
    pytest==9.2.0
    nbformat==5.11.1
    nbclient==0.11.0
    ipython==9.18.1
)

py="$venv/bin/python"
marker="$venv/.vramscope-pycheck"
pip=("$py" -m pip --disable-pip-version-check --no-input --quiet)

# Two runs at once would install over each other: serialise them.
mkdir -p "$(dirname "$venv")"
if command -v flock >/dev/null 2>&1; then
    exec 4>"$venv.lock"
    flock 4
fi

if [ ! -x "$py" ] || [ "$(cat "$marker" 2>/dev/null)" != "${pins[*]}" ]; then
    start_s=$SECONDS
    if [ -e "$venv" ]; then
        # Only ever delete a venv: VRAMSCOPE_PYCHECK_VENV may point somewhere by mistake.
        if [ ! -f "$venv/pyvenv.cfg" ] && [ -n "$(ls -A "$venv" 2>/dev/null)" ]; then
            echo "check_python: $venv exists and is not a venv; not touching it" >&2
            exit 1
        fi
        rm -rf "$venv"
    fi
    # The torch venv's own Python, so that the .pth below points at packages of the same version.
    base_python="$("$torch_python" -c 'import sys; print(sys._base_executable)')"
    echo "check_python: creating $venv with $("$base_python" --version) and ${pins[*]}" >&2
    "$base_python" -m venv "$venv"
    "${pip[@]}" install "${pins[@]}"
    echo "${pins[*]}" >"$marker"
    echo "check_python: made in $((SECONDS - start_s)) s" >&2
fi

# PyTorch's types, from the project's venv (rewritten when that venv moves).
site="$("$py" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
torch_site="$("$torch_python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
if [ "$(cat "$site/project-torch.pth" 2>/dev/null)" != "$torch_site" ]; then
    echo "$torch_site" >"$site/project-torch.pth"
fi

cd "$repo"
# The caches live with the tools, not in the work tree.
export RUFF_CACHE_DIR="$venv/cache/ruff"
export MYPY_CACHE_DIR="$venv/cache/mypy"
failed=()
run() {
    printf '$ %s\n' "$*"
    if ! "$venv/bin/$@"; then
        failed+=("$*")
    fi
}
run ruff check python
run ruff format --check python
run mypy
if [ "${#failed[@]}" -gt 0 ]; then
    echo "check_python: findings from: ${failed[*]}" >&2
    exit 1
fi
