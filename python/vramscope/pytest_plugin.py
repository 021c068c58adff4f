"""pytest gates on memory (entry point ``pytest11``; installed with the wheel).

Mark a test to have its PyTorch memory recorded (in process, as :func:`vramscope.record`)::

    import pytest

    @pytest.mark.vramscope(max_peak="512 MiB")
    def test_forward_fits(model, batch):
        model(batch)

The test fails when its peak allocated memory passes ``max_peak`` (bytes, or a size such as
``"512 MiB"``, ``"2G"`` (binary) or ``"2GB"`` (decimal)). With ``--vramscope-baseline DIR`` each marked test's trace is
stored in DIR the first time, and later runs fail a test whose memory grew past the same gates
``vramscope diff`` has: ``--vramscope-fail-if-peak-grows PCT`` (5 when no gate is given),
``--vramscope-fail-if-category-grows CAT=PCT``, ``--vramscope-fail-if-phase-grows PHASE[:CAT]=PCT``;
the failure says ``diff``'s sentence. ``--vramscope-update-baseline`` stores the new traces
instead. Every recorded trace is kept (the failure message says where) for opening in the app.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, cast

import pytest

from ._sizes import parse_size

if TYPE_CHECKING:
    from ._documents import DiffDocument, RanksDiffDocument, RunDocument

# Where a marked test's trace goes (the folder), set by the fixture below for the hook.
_TRACES = pytest.StashKey[Path]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("vramscope", "GPU memory gates (vramscope)")
    group.addoption(
        "--vramscope-baseline",
        metavar="DIR",
        help="store each marked test's trace in DIR once, then fail tests whose memory grows past the gates",
    )
    group.addoption(
        "--vramscope-update-baseline",
        action="store_true",
        help="with --vramscope-baseline: store this run's traces as the new baseline",
    )
    group.addoption(
        "--vramscope-fail-if-peak-grows",
        metavar="PCT",
        help="fail when a test's allocated peak is more than PCT percent above its baseline's (default 5)",
    )
    group.addoption(
        "--vramscope-fail-if-category-grows",
        metavar="CAT=PCT",
        action="append",
        default=[],
        help="fail when a category's bytes at the peak grow more than PCT percent (repeatable)",
    )
    group.addoption(
        "--vramscope-fail-if-phase-grows",
        metavar="PHASE[:CAT]=PCT",
        action="append",
        default=[],
        help="fail when a phase's high point grows more than PCT percent (repeatable)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "vramscope(max_peak=None): record the test's PyTorch memory with vramscope; fail when its peak allocated "
        "memory passes max_peak (bytes or '512 MiB'), or grows past --vramscope-baseline's gates",
    )


def _name(item: pytest.Item) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", item.nodeid).strip("_")[:200]


def _peak(path: str) -> tuple[int, int]:
    """The highest allocated peak of any device in the trace, and how many allocator events the
    trace holds (0: it saw nothing, and no gate may pass on it)."""
    from . import summary

    facts = summary(path).document
    if "run" in facts:
        run = cast("RunDocument", facts)
        return max((r["peak_allocated_bytes"] for r in run["run"]["ranks"]), default=0), run["allocator_events"]
    return max((d["peak_allocated_bytes"] for d in facts["devices"]), default=0), facts["allocator_events"]


def _gates(config: pytest.Config) -> list[str]:
    args: list[str] = []
    peak = config.getoption("--vramscope-fail-if-peak-grows")
    categories = config.getoption("--vramscope-fail-if-category-grows")
    phases = config.getoption("--vramscope-fail-if-phase-grows")
    if peak is None and not categories and not phases:
        peak = "5"
    if peak is not None:
        args += ["--fail-if-peak-grows", str(peak)]
    for gate in categories:
        args += ["--fail-if-category-grows", gate]
    for gate in phases:
        args += ["--fail-if-phase-grows", gate]
    return args


@pytest.fixture(autouse=True)
def _vramscope_traces(request: pytest.FixtureRequest) -> None:
    """For a marked test: where its trace goes, in pytest's own base temporary folder (so it is
    kept as pytest keeps its temporary folders), for `pytest_runtest_call` below."""
    if request.node.get_closest_marker("vramscope") is not None:
        factory: pytest.TempPathFactory = request.getfixturevalue("tmp_path_factory")
        request.node.stash[_TRACES] = factory.getbasetemp() / "vramscope"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    marker = item.get_closest_marker("vramscope")
    if marker is None:
        return (yield)
    from . import _diff, format_bytes, record

    folder = item.stash.get(_TRACES, None)
    if folder is None:  # not a test function, which fixtures (the one above) are for
        raise pytest.fail.Exception(
            f"vramscope records test functions only, not {type(item).__name__} items", pytrace=False
        )
    limit: int | None = None
    if marker.kwargs.get("max_peak") is not None:
        limit = parse_size(marker.kwargs["max_peak"])
    config = item.config
    folder.mkdir(parents=True, exist_ok=True)
    trace = folder / f"{_name(item)}.vtrace"
    recording = record(trace, force=True)
    recording.__enter__()
    try:
        result = yield
    finally:
        recording.__exit__(None, None, None)
    if not trace.exists():
        raise pytest.fail.Exception(
            f"vramscope could not record this test: {recording.message or 'no trace written'}", pytrace=False
        )
    baseline_dir = config.getoption("--vramscope-baseline")
    baseline = Path(baseline_dir) / f"{_name(item)}.vtrace" if baseline_dir else None
    compared = baseline is not None and baseline.exists() and not config.getoption("--vramscope-update-baseline")
    # One run of the command: the comparison with the baseline says this run's peak too.
    change: DiffDocument | RanksDiffDocument | None = None
    if compared and baseline is not None:
        change = _diff([*_gates(config), str(baseline), str(trace)])
        peak, events = _compared_peak(change)
    else:
        peak, events = _peak(str(trace))
    if events == 0:
        # A gate that saw nothing must not pass: the memory may have been allocated where the
        # recording could not see it (another process, before the test, outside PyTorch).
        raise pytest.fail.Exception(
            f"vramscope recorded no allocations in this test, so its memory gates cannot be checked: "
            f"nothing the test did went through PyTorch's allocator while it was recorded (the trace: {trace})",
            pytrace=False,
        )
    if limit is not None and peak > limit:
        raise pytest.fail.Exception(
            f"peak allocated memory {format_bytes(peak)} ({peak:,} bytes) passed the limit "
            f"{format_bytes(limit)} ({limit:,} bytes); the trace: {trace} (`vramscope {trace}` opens it)",
            pytrace=False,
        )
    if baseline is not None and change is None:
        baseline.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(trace, baseline)
    elif change is not None and not change["gates_hold"]:
        sentence = (
            cast("RanksDiffDocument", change)["most_grown"]["summary"] if "ranks" in change else change["summary"]
        )
        failed = [gate["words"] for gate in change["gates"] if not gate["passed"]]
        why = "\n".join([sentence, *failed])
        raise pytest.fail.Exception(
            f"memory grew past the baseline {baseline}:\n{why}\nthis run's trace: {trace} "
            f"(`vramscope compare {baseline} {trace}` shows both)",
            pytrace=False,
        )
    return result


def _compared_peak(change: DiffDocument | RanksDiffDocument) -> tuple[int, int]:
    """This run's (B's) highest allocated peak and allocator events, as the comparison says them."""
    if "ranks" in change:
        # The test is recorded in its own process: a baseline of several ranks is another run's.
        raise pytest.fail.Exception(
            "the baseline is a run of several ranks; this test records one process: give a baseline folder "
            "of this test's own traces",
            pytrace=False,
        )
    return change["b"]["peak_allocated_bytes"], change["b"]["allocator_events"]
