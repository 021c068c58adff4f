"""pytest gates on memory (entry point ``pytest11``; installed with the wheel).

Mark a test to have its PyTorch memory recorded (in process, as :func:`vramscope.record`)::

    import pytest

    @pytest.mark.vramscope(max_peak="512 MiB")
    def test_forward_fits(model, batch):
        model(batch)

The test fails when its peak allocated memory passes ``max_peak`` (bytes, or a size such as
``"512 MiB"``, ``"2G"`` (binary) or ``"2GB"`` (decimal)).

With ``device="H100"`` (any GPU ``vramscope estimate`` knows) the test runs on that GPU, emulated,
so a machine without one gates GPU memory: the test runs in a pytest of its own under
``vramscope estimate`` (its fixtures are set up there, not here), and fails when its peak passes
``max_peak`` or its memory would not fit the GPU with the CUDA context::

    @pytest.mark.vramscope(max_peak="70 GiB", device="H100")
    def test_training_step_fits():
        model = build().cuda()
        train_step(model, batch_size=16)
 With ``--vramscope-baseline DIR`` each marked test's trace is
stored in DIR the first time, and later runs fail a test whose memory grew past the same gates
``vramscope diff`` has: ``--vramscope-fail-if-peak-grows PCT`` (5 when no gate is given),
``--vramscope-fail-if-category-grows CAT=PCT``, ``--vramscope-fail-if-phase-grows PHASE[:CAT]=PCT``;
the failure says ``diff``'s sentence. ``--vramscope-update-baseline`` stores the new traces
instead. Every recorded trace is kept (the failure message says where) for opening in the app.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, cast

import pytest

from ._sizes import parse_size

if TYPE_CHECKING:
    from ._documents import DiffDocument, RanksDiffDocument, RunDocument
    from ._estimate import Estimate

# Where a marked test's trace goes (the folder), set by the fixture below for the hook.
_TRACES = pytest.StashKey[Path]()
# Set in the pytest that runs one test under `vramscope estimate`: it runs the test, and the
# pytest that started it checks the estimate.
_ESTIMATING = "VRAMSCOPE_ESTIMATING_TEST"


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
        "vramscope(max_peak=None, device=None): record the test's PyTorch memory with vramscope; fail when its peak "
        "allocated memory passes max_peak (bytes or '512 MiB'), or grows past --vramscope-baseline's gates; with "
        "device='H100', run it on that GPU emulated (vramscope estimate), and fail when it would not fit",
    )


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test marked with a device runs under `vramscope estimate`, in a pytest of its own: here
    it is an item that starts that pytest and checks what it needed (no fixtures here)."""
    if os.environ.get(_ESTIMATING):
        return
    for i, item in enumerate(items):
        marker = item.get_closest_marker("vramscope")
        parent = item.parent
        if marker is None or marker.kwargs.get("device") is None or parent is None:
            continue
        if isinstance(item, pytest.Function):
            items[i] = EstimatedTest.from_parent(parent, name=item.name, test=item)


class EstimatedTest(pytest.Item):
    """A test run on an emulated GPU (``@pytest.mark.vramscope(device=...)``)."""

    def __init__(self, *, test: pytest.Function, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.test = test
        self.own_markers = list(test.own_markers)
        self.keywords.update(test.keywords)

    def reportinfo(self) -> tuple[os.PathLike[str] | str, int | None, str]:
        return self.test.reportinfo()

    def runtest(self) -> None:
        from ._errors import VramscopeError
        from ._estimate import estimate

        marker = self.get_closest_marker("vramscope")
        assert marker is not None
        folder = _estimates_folder(self.config)
        trace = folder / f"{_name(self)}.vtrace"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", self.nodeid]
        os.environ[_ESTIMATING] = "1"
        try:
            found = estimate(
                command, gpu=str(marker.kwargs["device"]), output=trace, force=True, cwd=self.config.rootpath
            )
        except VramscopeError as error:
            output = error.stderr.rstrip()
            if error.exit_status == 2 and "no estimate" in str(error):
                # The test's own pytest failed: its report says why.
                why = f"the test failed on the emulated {marker.kwargs['device']}; its run said:\n{output[-4000:]}"
            else:
                why = f"the test could not be estimated on {marker.kwargs['device']}: {error}\n{output[-4000:]}"
            raise pytest.fail.Exception(why, pytrace=False) from None
        finally:
            del os.environ[_ESTIMATING]
        _check(self, marker, trace, found)


_FOLDER = pytest.StashKey[Path]()


def _estimates_folder(config: pytest.Config) -> Path:
    """Where this session keeps its estimates' traces: under --basetemp when given, else a new
    temporary folder (kept, as pytest keeps its own)."""
    folder = config.stash.get(_FOLDER, None)
    if folder is None:
        import tempfile

        base = config.getoption("basetemp", None)
        if base:
            folder = Path(base) / "vramscope-estimates"
            folder.mkdir(parents=True, exist_ok=True)
        else:
            folder = Path(tempfile.mkdtemp(prefix="vramscope-estimates-"))
        config.stash[_FOLDER] = folder
    return folder


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
    if marker is None or os.environ.get(_ESTIMATING) or isinstance(item, EstimatedTest):
        # Not marked; run under `vramscope estimate`, which records it; or the item that starts it.
        return (yield)
    from . import record

    folder = item.stash.get(_TRACES, None)
    if folder is None:  # not a test function, which fixtures (the one above) are for
        raise pytest.fail.Exception(
            f"vramscope records test functions only, not {type(item).__name__} items", pytrace=False
        )
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
    _check(item, marker, trace, None)
    return result


def _check(item: pytest.Item, marker: pytest.Mark, trace: Path, estimated: Estimate | None) -> None:
    """Fails `item` when its trace passes the marker's limit, its baseline's gates, or (an
    estimate) the GPU's memory; stores the baseline when there is none."""
    from . import _diff, format_bytes

    config = item.config
    limit: int | None = None
    if marker.kwargs.get("max_peak") is not None:
        limit = parse_size(marker.kwargs["max_peak"])
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
    if estimated is not None:
        # What the GPU's own counter would say (blocks as the allocator sizes them).
        peak = estimated.peak_allocated_bytes
        if not estimated.fits:
            short = [d for d in estimated["devices"] if not d["fits"]]
            raise pytest.fail.Exception(
                f"it would not fit on {estimated['target']['name']}: {short[0]['verdict']}; "
                f"the estimate's trace: {trace}",
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
