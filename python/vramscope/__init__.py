"""vramscope: a GPU memory profiler and trace analyzer for deep-learning workloads.

The ``vramscope`` command (installed with this package) records a run and opens traces in its
desktop app; this package calls it from Python::

    import vramscope

    facts = vramscope.summary("run.vtrace")          # what `vramscope info --json` says
    peak = facts["devices"][0]["peak_allocated_bytes"]
    change = vramscope.compare("before.pickle", "after.pickle")   # `vramscope diff --json`
    vramscope.open("run.vtrace")                    # the app, on that file
    need = vramscope.estimate(["train.py"], gpu="h100")  # its GPU memory, run here without one

    with vramscope.record("step.vtrace"):           # record this process's PyTorch memory
        train_one_step()

In Jupyter, ``%load_ext vramscope`` and then ``%%vramscope`` at the top of a cell records it and
shows the timeline, the peak's breakdown and the top remedies under it; ``%%vramscope --estimate
H100`` runs the cell on an emulated H100 instead and shows what it would need there.

Every file vramscope reads works here too: PyTorch memory snapshots (``.pickle``), profiler
traces and memory timelines (``.json``, ``.json.gz``), ``.vtrace`` recordings, and folders of
per-rank files. Every error the package raises on purpose is a :class:`VramscopeError`: when the
command refused or failed, with its message and its ``exit_status``.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from typing import Union

from ._binary import binary
from ._documents import (
    AdviceDocument,
    DiffDocument,
    EstimateDocument,
    InfoDocument,
    OomDocument,
    RanksDiffDocument,
    ReportDocument,
    RunDocument,
)
from ._errors import VramscopeError, VramscopeFileExists, VramscopeNotFound, VramscopeUsageError
from ._estimate import Estimate, estimate
from ._notebook import load_ipython_extension
from ._oom import capture_oom
from ._record import record
from ._summary import Summary, format_bytes

__all__ = [
    "AdviceDocument",
    "DiffDocument",
    "Estimate",
    "EstimateDocument",
    "InfoDocument",
    "OomDocument",
    "PathLike",
    "RanksDiffDocument",
    "ReportDocument",
    "RunDocument",
    "Summary",
    "VramscopeError",
    "VramscopeFileExists",
    "VramscopeNotFound",
    "VramscopeUsageError",
    "binary",
    "capture_oom",
    "compare",
    "estimate",
    "format_bytes",
    "load_ipython_extension",
    "open",
    "record",
    "summary",
    "version",
]

#: A path to a trace: a string, a :class:`pathlib.Path`, or anything with ``__fspath__``
#: (a recording returned by :func:`record` among them).
PathLike = Union[str, "os.PathLike[str]"]


def _run(args: Sequence[str], ok: Sequence[int] = (0,)) -> str:
    command = [binary(), *args]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode not in ok:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("error:")]
        message = (errors or lines or [f"vramscope exited with status {done.returncode}"])[-1]
        raise VramscopeError(message.removeprefix("error: "), done.returncode, done.stderr)
    return done.stdout


def version() -> str:
    """The version of the ``vramscope`` command, for example ``"0.1.0"``.

    >>> vramscope.version()  # doctest: +SKIP
    '0.1.0'
    """
    return _run(["--version"]).split()[-1]


def summary(trace: PathLike, *, all_phases: bool = False) -> Summary:
    """What ``vramscope info --json`` says about a trace, as Python objects.

    Args:
        trace: the file (or a folder of per-rank files) to read.
        all_phases: every phase row (each iteration's), not only the highest ones.

    Returns:
        A :class:`Summary`, a dict: ``devices`` (each with ``peak_allocated_bytes``,
        ``peak_reserved_bytes``, ``categories_at_peak``, ``phases``, ``growth``, ...),
        ``format``, ``notes`` (what the trace cannot show) and more. In a notebook it draws
        itself: the timeline by category, the peak's breakdown and the top remedies.

    Raises:
        VramscopeError: the file cannot be read (the message names it and the problem,
            ``exit_status`` is the command's).

    >>> facts = vramscope.summary("run.vtrace")  # doctest: +SKIP
    >>> facts["devices"][0]["categories_at_peak"]  # doctest: +SKIP
    {'parameter': 1073741824, 'activation': 402653184, ...}
    """
    args = ["info", "--json", os.fspath(trace)]
    if all_phases:
        args.append("--all-phases")
    facts: InfoDocument | RunDocument = json.loads(_run(args))
    return Summary(os.fspath(trace), facts)


def compare(
    before: PathLike,
    after: PathLike,
    *,
    all_phases: bool = False,
    device: int | str | None = None,
    fail_if_peak_grows: float | None = None,
    fail_if_category_grows: Mapping[str, float] | None = None,
    fail_if_phase_grows: Mapping[str, float] | None = None,
) -> DiffDocument | RanksDiffDocument:
    """What ``vramscope diff --json`` says: two runs side by side, phase by phase, with gates.

    Args:
        before: the baseline trace (or a folder of per-rank files).
        after: the trace to compare with it.
        all_phases: every phase row, not only the first iterations'.
        device: compare this device: an index (``0``), ``"cuda:1"`` or ``"host"``.
        fail_if_peak_grows: a gate: the allocated peak may grow at most this many percent.
        fail_if_category_grows: gates by category at the peak, e.g. ``{"activation": 10}``.
        fail_if_phase_grows: gates by phase's high point, e.g. ``{"forward": 5, "backward:activation": 10}``.

    Returns:
        A :class:`DiffDocument` (two traces: ``a`` and ``b`` at their peaks, ``delta``, the
        ``summary`` sentence, the phases and sites that changed, each gate with its ``words``,
        and ``gates_hold``), or a :class:`RanksDiffDocument` for two runs of several ranks. A gate
        that fails is in the answer (``gates_hold`` is false), not an error.

    Raises:
        VramscopeError: a file cannot be read or a gate cannot be checked (``exit_status`` 2).

    >>> change = vramscope.compare("main.vtrace", "branch.vtrace", fail_if_peak_grows=5)  # doctest: +SKIP
    >>> change["delta"]["peak_allocated_bytes"], change["gates_hold"]  # doctest: +SKIP
    (25165824, True)
    """
    args = [os.fspath(before), os.fspath(after)]
    if all_phases:
        args.append("--all-phases")
    if device is not None:
        args += ["--device", str(device)]
    if fail_if_peak_grows is not None:
        args += ["--fail-if-peak-grows", str(fail_if_peak_grows)]
    for name, percent in (fail_if_category_grows or {}).items():
        args += ["--fail-if-category-grows", f"{name}={percent}"]
    for name, percent in (fail_if_phase_grows or {}).items():
        args += ["--fail-if-phase-grows", f"{name}={percent}"]
    return _diff(args)


def _diff(args: Sequence[str]) -> DiffDocument | RanksDiffDocument:
    """`diff --json ARGS...` (the two traces and the gates): its document, a gate that failed
    (exit status 1) included."""
    document: DiffDocument | RanksDiffDocument = json.loads(_run(["diff", "--json", *args], ok=(0, 1)))
    return document


def open(trace: PathLike, *, view: str | None = None) -> subprocess.Popen[bytes]:  # noqa: A001
    """Opens the vramscope app on a trace, in a window of its own, and returns at once.

    Args:
        trace: the file to open.
        view: the view to start in (``timeline``, ``peak``, ``fragmentation``, ``advisor``, ...).

    Returns:
        The app's process; the window stays open after this Python program ends.

    >>> vramscope.open("run.vtrace", view="peak")  # doctest: +SKIP
    """
    args: list[str] = [binary(), os.fspath(trace)]
    if view is not None:
        args += ["--view", view]
    return subprocess.Popen(args, start_new_session=True, stdin=subprocess.DEVNULL)
