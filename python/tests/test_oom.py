"""The out-of-memory capture is armed every way it can be, from the installed wheel: in code,
by `vramscope run`, by `python -m vramscope script.py`, and by VRAMSCOPE_CAPTURE_OOM alone (the
wheel's .pth), once per process whichever way. What it does when CUDA runs out of memory needs a
GPU: scripts/gpu-check.sh runs that."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import vramscope

PROBE = textwrap.dedent(
    """
    import os, sys
    import torch
    print("armed:", getattr(sys, "_vramscope_oom_armed", None))
    print("argv:", sys.argv[1:])
    sys.exit(int(os.environ.get("EXIT_WITH", "0")))
    """
)


def probe(tmp_path: Path) -> Path:
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    return script


def armed(output: str) -> str:
    return next(line.split(":", 1)[1].strip() for line in output.splitlines() if line.startswith("armed:"))


def test_in_code_once_per_process(tmp_path: Path) -> None:
    code = (
        "import sys, vramscope\n"
        f"first = vramscope.capture_oom({str(tmp_path / 'a')!r})\n"
        f"second = vramscope.capture_oom({str(tmp_path / 'b')!r})\n"
        "print(first == second == sys._vramscope_oom_armed, first)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", str(tmp_path / "a")]


def test_vramscope_run_and_python_dash_m(tmp_path: Path) -> None:
    script = probe(tmp_path)
    env = {**os.environ, "EXIT_WITH": "5"}
    for command in (
        [vramscope.binary(), "run", "--oom-dir", str(tmp_path / "oom"), "--", sys.executable, str(script), "x", "--y"],
        [sys.executable, "-m", "vramscope", str(script), "x", "--y"],
    ):
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path)
        assert done.returncode == 5, done.stderr
        assert "argv: ['x', '--y']" in done.stdout
        expected = tmp_path / "oom" if "run" in command[1:2] else tmp_path / "vramscope-oom"
        assert armed(done.stdout) == str(expected), done.stdout
        assert done.stderr == "", done.stderr


def test_the_environment_alone_arms_it(tmp_path: Path) -> None:
    script = probe(tmp_path)
    env = {**os.environ, "VRAMSCOPE_CAPTURE_OOM": str(tmp_path / "from-env")}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, check=True)
    assert armed(done.stdout) == str(tmp_path / "from-env")
    env.pop("VRAMSCOPE_CAPTURE_OOM")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, check=True)
    assert armed(done.stdout) == "None"
