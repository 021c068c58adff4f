"""The Python API against the command it wraps, run from the installed wheel
(scripts/test-wheel.sh): every answer is the command's own, on real fixtures."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import vramscope
from vramscope._sizes import parse_size

FIXTURES = Path(os.environ.get("VRAMSCOPE_FIXTURES", Path(__file__).resolve().parents[3] / "shared" / "fixtures"))
SNAPSHOT = FIXTURES / "pytorch-snapshots" / "gpt_ctx128_fullstep_fp32.pickle"
FORWARD_FP32 = FIXTURES / "pytorch-snapshots" / "gpt_ctx128_forward_fp32.pickle"
FORWARD_MIXED = FIXTURES / "pytorch-snapshots" / "gpt_ctx128_forward_mixed.pickle"
PROFILE = FIXTURES / "torch-profiler" / "mlp_adam_cpu.chrome_trace.json"


def command_json(*args: str) -> dict[str, object]:
    done = subprocess.run([vramscope.binary(), *args], capture_output=True, text=True, check=True)
    answer: dict[str, object] = json.loads(done.stdout)
    return answer


def test_the_package_uses_the_command_installed_with_it() -> None:
    # The wheel puts the command in the environment's scripts folder, beside this interpreter.
    assert Path(vramscope.binary()).parent == Path(sys.executable).parent
    assert (
        vramscope.version()
        == subprocess.run([vramscope.binary(), "--version"], capture_output=True, text=True, check=True).stdout.split()[
            -1
        ]
    )


REFERENCE = Path(__file__).resolve().parents[2] / "scripts" / "reference" / "snapshot_reference.py"
REFERENCE_KEYS = (
    "peak_allocated_bytes",
    "peak_reserved_bytes",
    "allocated_bytes",
    "reserved_bytes",
    "categories_at_peak",
)


def reference(trace: Path) -> dict[int, dict[str, Any]]:
    """The independent reference's account of a snapshot (scripts/reference/snapshot_reference.py)."""
    done = subprocess.run([sys.executable, str(REFERENCE), str(trace)], capture_output=True, text=True, check=True)
    return {d["device"]: d for d in json.loads(done.stdout)["devices"]}


def test_summary_is_what_info_json_says() -> None:
    """Consistency test: the package's answer is the command's JSON; its numbers are also checked
    against the independent reference."""
    for trace in (SNAPSHOT, PROFILE):
        facts = vramscope.summary(trace)
        assert facts == command_json("info", "--json", str(trace))
        assert facts["devices"][0]["peak_allocated_bytes"] > 0
    theirs = reference(SNAPSHOT)
    for device in vramscope.summary(SNAPSHOT)["devices"]:
        assert {k: device[k] for k in REFERENCE_KEYS} == {k: theirs[device["device"]][k] for k in REFERENCE_KEYS}
    assert vramscope.summary(str(SNAPSHOT), all_phases=True) == command_json(
        "info", "--json", "--all-phases", str(SNAPSHOT)
    )


def test_compare_is_what_diff_json_says() -> None:
    """Consistency test: compare() is diff --json; both runs' peaks are also the reference's."""
    change = vramscope.compare(FORWARD_FP32, FORWARD_MIXED)
    assert change == command_json("diff", "--json", str(FORWARD_FP32), str(FORWARD_MIXED))
    assert "ranks" not in change
    for side, trace in (change["a"], FORWARD_FP32), (change["b"], FORWARD_MIXED):
        theirs = reference(trace)[side["device"]]
        assert (side["peak_allocated_bytes"], side["peak_reserved_bytes"]) == (
            theirs["peak_allocated_bytes"],
            theirs["peak_reserved_bytes"],
        )
        assert side["categories_at_peak"] == theirs["categories_at_peak"]
    assert change == vramscope.compare(str(FORWARD_FP32), FORWARD_MIXED, device=0)
    # What diff refuses is raised with its words.
    with pytest.raises(vramscope.VramscopeError, match="compared with itself"):
        vramscope.compare(SNAPSHOT, SNAPSHOT)


def test_errors_name_the_file_and_the_problem(tmp_path: Path) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("not a trace")
    with pytest.raises(vramscope.VramscopeError) as caught:
        vramscope.summary(bad)
    assert str(bad) in str(caught.value)
    assert "not a format vramscope reads" in str(caught.value)
    assert caught.value.exit_status == 2
    assert caught.value.returncode == 2, "the exit status under its earlier name"
    assert "error:" in caught.value.stderr
    with pytest.raises(vramscope.VramscopeError, match="cannot read"):
        vramscope.summary(tmp_path / "missing.pickle")


def test_a_wrong_vramscope_bin_is_said(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("VRAMSCOPE_BIN", str(tmp_path / "nothing"))
    with pytest.raises(vramscope.VramscopeNotFound, match="VRAMSCOPE_BIN") as caught:
        vramscope.summary(SNAPSHOT)
    assert isinstance(caught.value, vramscope.VramscopeError)
    assert caught.value.exit_status is None, "no command ran"


def test_every_error_raised_on_purpose_is_a_vramscope_error(tmp_path: Path) -> None:
    # Each is also the built-in error it was, for code that catches that.
    with pytest.raises(vramscope.VramscopeUsageError, match="source must be") as usage:
        vramscope.record(tmp_path / "a.vtrace", source="tpu")
    with pytest.raises(vramscope.VramscopeUsageError, match="not a size") as size:
        parse_size("lots")
    (tmp_path / "kept.vtrace").write_bytes(b"mine")
    with (
        pytest.raises(vramscope.VramscopeFileExists, match="force=True") as exists,
        vramscope.record(tmp_path / "kept.vtrace"),
    ):
        pass
    for error, builtin in ((usage, ValueError), (size, ValueError), (exists, FileExistsError)):
        assert isinstance(error.value, vramscope.VramscopeError)
        assert isinstance(error.value, builtin)
        assert error.value.exit_status is None


def test_python_dash_m_is_the_command() -> None:
    done = subprocess.run([sys.executable, "-m", "vramscope", "--version"], capture_output=True, text=True)
    assert done.returncode == 0
    assert done.stdout.split()[-1] == vramscope.version()
    done = subprocess.run(
        [sys.executable, "-m", "vramscope", "info", "/nonexistent.pickle"], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "/nonexistent.pickle" in done.stderr


def test_help_explains_every_function() -> None:
    for name in vramscope.__all__:
        item = getattr(vramscope, name)
        if inspect.isfunction(item) or inspect.isclass(item):
            assert item.__doc__, name
            assert len(item.__doc__) > 40, name
    assert "summary" in (vramscope.__doc__ or "")


def test_the_notebook_display_runs_the_command_once(monkeypatch: pytest.MonkeyPatch) -> None:
    facts = vramscope.summary(FORWARD_FP32)
    calls: list[list[str]] = []
    real = subprocess.run

    def counting(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        calls.append(list(args))
        done: subprocess.CompletedProcess[str] = real(args, **kwargs)  # type: ignore[call-overload]
        return done

    monkeypatch.setattr(subprocess, "run", counting)
    shown = facts._repr_html_()
    png = facts._repr_png_()
    assert [call[1] for call in calls] == ["report"], calls
    assert png is not None
    assert png.startswith(b"\x89PNG")
    assert "<img" in shown
    assert "largest alive at the peak" in shown
    assert "remedy" in shown
    # Its numbers are the command's: the largest block shown is info --blocks' largest.
    largest = command_json("info", "--json", "--blocks", "1", str(FORWARD_FP32))["largest_blocks"]
    first = largest["devices"][0]["blocks"][0]  # type: ignore[index]
    assert f"data-bytes='{first['size_bytes']}'" in shown


TRAIN = Path(__file__).resolve().parents[2] / "samples" / "pytorch" / "train.py"
SMALL_TRAIN = [str(TRAIN), "--layers", "1", "--steps", "2", "--d-model", "64", "--vocab", "256", "--seq-len", "32"]


def test_estimate_is_what_the_command_says_and_the_program_saw() -> None:
    """Consistency test (the package's answer is the command's), and the program's own view: the
    script's summary holds what torch.cuda said inside the emulated run."""
    summary_file = Path(os.environ.get("TMPDIR", "/tmp")) / f"estimate-api-{os.getpid()}.json"
    found = vramscope.estimate([*SMALL_TRAIN, "--summary", str(summary_file)], gpu="l4")
    want = command_json("estimate", "--json", "--gpu", "l4", "--", sys.executable, *SMALL_TRAIN)
    stable = ("target", "fits", "devices", "rests_on", "standins", "not_modelled", "context_bytes")
    assert {k: found[k] for k in stable} == {k: want[k] for k in stable}
    assert found.fits
    assert found["target"]["name"] == "NVIDIA L4"
    own = json.loads(summary_file.read_text())
    summary_file.unlink()
    assert own["cuda"]["max_memory_allocated"] == found.peak_allocated_bytes
    assert own["cuda"]["max_memory_reserved"] == found.peak_reserved_bytes
    assert own["cuda"]["device_name"] == "NVIDIA L4"
    assert "NVIDIA L4" in str(found)
    assert "fits" in str(found)
    assert "vramscope estimate" in found._repr_html_()


def test_an_estimate_that_does_not_fit_is_an_answer_and_one_that_cannot_run_an_error() -> None:
    found = vramscope.estimate(SMALL_TRAIN, gpu="t4", device_memory="600 MiB", context="600 MiB")
    assert not found.fits
    assert found["devices"][0]["headroom_bytes"] < 0
    assert "does NOT fit" in str(found)
    with pytest.raises(vramscope.VramscopeError) as failed:
        vramscope.estimate([sys.executable, "-c", "raise SystemExit(3)"])
    assert failed.value.exit_status == 2
    assert "status 3" in str(failed.value)
    with pytest.raises(vramscope.VramscopeError, match="H300"):
        vramscope.estimate(SMALL_TRAIN, gpu="H300")
