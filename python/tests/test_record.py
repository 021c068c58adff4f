"""``vramscope.record()`` on real CPU PyTorch: the trace it writes holds what the program did,
tagged as ``vramscope record`` tags it, and recording never changes what the program does."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import vramscope

if TYPE_CHECKING:
    import torch
else:
    torch = pytest.importorskip("torch")

# An MLP whose parameter bytes are known exactly: (64*256 + 256) + (256*256 + 256) + (256*10 + 10)
# float32 values.
PARAMETER_BYTES = 4 * ((64 * 256 + 256) + (256 * 256 + 256) + (256 * 10 + 10))


def model_and_optimizer() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)
    )
    return model, torch.optim.Adam(model.parameters(), lr=1e-3)


def train(model: torch.nn.Module, optimizer: torch.optim.Optimizer, steps: int = 3) -> float:
    loss = torch.zeros(())
    for _ in range(steps):
        x = torch.randn(32, 64)
        y = torch.randint(0, 10, (32,))
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return float(loss.detach())


def test_a_block_is_recorded_with_its_tags_and_phases(tmp_path: Path) -> None:
    model, optimizer = model_and_optimizer()
    path = tmp_path / "run.vtrace"
    with vramscope.record(path) as recording:
        train(model, optimizer)
    assert path.exists(), recording.message
    facts = vramscope.summary(path)
    device = facts["devices"][0]
    categories = device["categories_at_peak"]
    assert categories["parameter"] == PARAMETER_BYTES
    # Adam keeps two moments of every parameter (and a step count each).
    assert categories["optimizer_state"] >= 2 * PARAMETER_BYTES
    assert {"forward", "backward", "optimizer_step"} <= {p["kind"] for p in device["phases"]["highest"]}
    caveats = " ".join(facts["notes"])
    assert "inside the program" in caveats


def test_recording_leaves_the_program_as_it_was(tmp_path: Path) -> None:
    # What the recorder patches to know where it may restart the CPU profiler: each comes out
    # again, so that the next recording installs its own (a patch left in place would go on
    # telling the closed recording, and the next would never see a range open).
    patched = [
        (torch.autograd, "backward"),
        (torch.autograd, "grad"),
        (torch.autograd.profiler.record_function, "__enter__"),
        (torch.autograd.profiler.record_function, "__exit__"),
        (torch.profiler.profile, "start"),
        (torch.profiler.profile, "stop"),
    ]
    before = [getattr(owner, name) for owner, name in patched]
    model, optimizer = model_and_optimizer()
    with vramscope.record(tmp_path / "a.vtrace"):
        assert torch.autograd.grad is not before[1], "the recording tracks torch.autograd.grad"
        recorded = train(model, optimizer)
    after = [getattr(owner, name) for owner, name in patched]
    assert after == before, [name for (_, name), a, b in zip(patched, after, before) if a is not b]
    model, optimizer = model_and_optimizer()
    assert train(model, optimizer) == recorded
    # A second recording in the same process sees the same.
    model, optimizer = model_and_optimizer()
    with vramscope.record(tmp_path / "b.vtrace"):
        train(model, optimizer)
    first = vramscope.summary(tmp_path / "a.vtrace")["devices"][0]["categories_at_peak"]
    second = vramscope.summary(tmp_path / "b.vtrace")["devices"][0]["categories_at_peak"]
    assert first["parameter"] == second["parameter"] == PARAMETER_BYTES


def test_a_block_without_a_model_is_recorded(tmp_path: Path) -> None:
    # Only factories: 4 tensors of exactly 16 MiB kept, one of them doubled into a fifth.
    path = tmp_path / "tensors.vtrace"
    with vramscope.record(path):
        kept = [torch.ones(1024, 1024, 4) for _ in range(4)]
        doubled = kept[0] * 2
    facts = vramscope.summary(path)
    assert facts["allocator_events"] > 0
    # What earlier tests left and this block freed counts too (a few bytes): no more than that.
    peak = facts["devices"][0]["peak_allocated_bytes"]
    assert 5 * (16 << 20) <= peak < 5 * (16 << 20) + (1 << 20), peak
    del kept, doubled


def test_as_a_decorator_and_through_an_exception(tmp_path: Path) -> None:
    model, optimizer = model_and_optimizer()

    @vramscope.record(tmp_path / "step.vtrace")
    def step() -> None:
        train(model, optimizer, steps=1)
        raise RuntimeError("out of memory (a stand-in)")

    with pytest.raises(RuntimeError, match="a stand-in"):
        step()
    assert vramscope.summary(tmp_path / "step.vtrace")["devices"][0]["peak_allocated_bytes"] > PARAMETER_BYTES


def test_an_existing_file_is_kept_unless_forced(tmp_path: Path) -> None:
    path = tmp_path / "kept.vtrace"
    path.write_bytes(b"mine")
    with pytest.raises(FileExistsError), vramscope.record(path):
        pass
    assert path.read_bytes() == b"mine"


def test_the_trace_is_written_when_the_process_exits_inside_the_block(tmp_path: Path) -> None:
    script = tmp_path / "exits.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys, torch, vramscope
            model = torch.nn.Linear(64, 64)
            recording = vramscope.record(sys.argv[1])
            recording.__enter__()
            model(torch.randn(8, 64)).sum().backward()
            sys.exit(3)
            """
        )
    )
    path = tmp_path / "exit.vtrace"
    done = subprocess.run([sys.executable, str(script), str(path)], capture_output=True, text=True)
    assert done.returncode == 3, done.stderr
    assert path.exists(), done.stderr
    assert vramscope.summary(path)["devices"][0]["categories_at_peak"]["parameter"] == 4 * (64 * 64 + 64)


def test_a_trace_that_cannot_be_written_never_breaks_the_program(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    model, optimizer = model_and_optimizer()
    path = tmp_path / "later.vtrace"
    command = vramscope.binary()
    with vramscope.record(path):
        train(model, optimizer, steps=1)
        monkeypatch.setenv("VRAMSCOPE_BIN", str(tmp_path / "gone"))
    monkeypatch.delenv("VRAMSCOPE_BIN")
    said = capsys.readouterr().err
    assert not path.exists()
    assert "the trace was not written" in said
    # What was recorded is kept, and `vramscope convert` of the folder writes the trace.
    folder = said.split("what was recorded is kept in ")[1].split(":")[0]
    subprocess.run([command, "convert", folder, "-o", str(path)], check=True, capture_output=True)
    assert vramscope.summary(path)["devices"][0]["categories_at_peak"]["parameter"] == PARAMETER_BYTES
