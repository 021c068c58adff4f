"""The pytest plugin (entry point pytest11, from the installed wheel) in real pytest runs
(pytester, each in its own process) on CPU PyTorch: a test under its limit passes, one over it
fails with the peak, the limit and the trace; a baseline is stored, then growth past the gates
fails with diff's sentence, and an update of the baseline passes."""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = """
import pytest
import torch


def train(width):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, width), torch.nn.ReLU(), torch.nn.Linear(width, 10))
    optimizer = torch.optim.Adam(model.parameters())
    for _ in range(2):
        loss = torch.nn.functional.cross_entropy(model(torch.randn(32, 64)), torch.randint(0, 10, (32,)))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


@pytest.mark.vramscope(max_peak="64 MiB")
def test_small():
    train(WIDTH)


@pytest.mark.vramscope(max_peak=100_000)
def test_over_its_limit():
    train(256)


def test_not_marked():
    assert True
"""


def write(pytester: pytest.Pytester, width: int) -> None:
    pytester.makepyfile(test_model=TESTS.replace("WIDTH", str(width)))


def test_a_limit_fails_only_the_test_over_it(pytester: pytest.Pytester) -> None:
    write(pytester, 256)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        ["*test_over_its_limit*", "*peak allocated memory * passed the limit 97.7 KiB (100,000 bytes)*"]
    )
    result.stdout.no_fnmatch_line("*test_small*passed the limit*")


TENSORS_ONLY = """
import pytest
import torch


@pytest.mark.vramscope(max_peak="8 MiB")
def test_holds_64_mib():
    # No model, no operator but the factories: 4 tensors of exactly 16 MiB each.
    kept = [torch.ones(1024, 1024, 4) for _ in range(4)]
    assert sum(t.numel() * t.element_size() for t in kept) == 64 << 20


@pytest.mark.vramscope(max_peak="8 MiB")
def test_allocates_nothing():
    assert 1 + 1 == 2
"""


def test_a_gate_sees_tensors_made_without_a_model_and_fails_on_nothing(pytester: pytest.Pytester) -> None:
    # A block that only creates tensors is recorded (its 64 MiB pass the 8 MiB limit), and a
    # block that allocated nothing does not pass a gate it gave no evidence for.
    pytester.makepyfile(test_tensors=TENSORS_ONLY)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        ["*test_holds_64_mib*", "*peak allocated memory 64.0 MiB (67,108,864 bytes) passed the limit 8.00 MiB*"]
    )
    result.stdout.fnmatch_lines(["*test_allocates_nothing*", "*vramscope recorded no allocations in this test*"])


def test_a_baseline_is_stored_then_holds_growth_to_the_gates(pytester: pytest.Pytester) -> None:
    baseline = pytester.path / "baseline"
    write(pytester, 256)
    first = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-k", "small", f"--vramscope-baseline={baseline}")
    first.assert_outcomes(passed=1, deselected=2)
    stored = list(baseline.glob("*.vtrace"))
    assert len(stored) == 1, stored

    # The model twice as wide: its peak grows far past 5%.
    write(pytester, 512)
    grown = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-k", "small", f"--vramscope-baseline={baseline}")
    grown.assert_outcomes(failed=1, deselected=2)
    grown.stdout.fnmatch_lines(
        ["*memory grew past the baseline*", "*B's peak is * higher*", "*gate peak_allocated_bytes: grew*FAILED*"]
    )

    # A gate wide enough passes; so does updating the baseline, which then holds.
    wide = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "-k",
        "small",
        f"--vramscope-baseline={baseline}",
        "--vramscope-fail-if-peak-grows=1000",
    )
    wide.assert_outcomes(passed=1, deselected=2)
    update = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-k", "small", f"--vramscope-baseline={baseline}", "--vramscope-update-baseline"
    )
    update.assert_outcomes(passed=1, deselected=2)
    again = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-k", "small", f"--vramscope-baseline={baseline}")
    again.assert_outcomes(passed=1, deselected=2)


def test_sizes_read_as_people_write_them() -> None:
    from vramscope._sizes import parse_size

    assert parse_size("512 MiB") == 512 << 20
    assert parse_size(4096) == 4096
    with pytest.raises(ValueError, match="not a size"):
        parse_size("lots")
    # The command's own list of cases (trace-format/src/size_cases.txt): one reading everywhere.
    cases = Path(__file__).resolve().parents[2] / "trace-format" / "src" / "size_cases.txt"
    checked = 0
    for line in cases.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        text, expected = line.split("\t", 1)
        if expected == "error":
            with pytest.raises(ValueError, match="not a size"):
                parse_size(text)
        else:
            assert parse_size(text) == int(expected), text
        checked += 1
    assert checked >= 30


ON_A_GPU = """
import pytest
import torch


@pytest.fixture
def model():
    # Set up in the emulated run, where CUDA is there.
    return torch.nn.Linear(1024, 1024).cuda()


# 4 MiB of weights, 1 MiB of input and output each, the gradients, and cuBLAS's workspaces: 32
# MiB for each thread that multiplies (the forward's and the autograd engine's) and 1 MiB of
# cuBLASLt's, as on an H100.
@pytest.mark.vramscope(max_peak="80 MiB", device="h100")
def test_fits(model):
    assert torch.cuda.get_device_name() == "NVIDIA H100 80GB HBM3"
    model(torch.randn(256, 1024, device="cuda")).sum().backward()


@pytest.mark.vramscope(max_peak="1 MiB", device="h100")
def test_over_its_limit(model):
    model(torch.randn(256, 1024, device="cuda")).sum().backward()


@pytest.mark.vramscope(device="t4")
def test_too_big_for_the_gpu():
    kept = torch.empty(20 << 30, dtype=torch.uint8, device="cuda")
    assert kept.numel() == 20 << 30


@pytest.mark.vramscope(device="h100")
def test_that_fails_on_the_gpu():
    assert torch.cuda.device_count() == 8, "one GPU here"
"""


def test_a_device_runs_the_test_on_that_gpu_emulated_and_gates_its_memory(pytester: pytest.Pytester) -> None:
    """No GPU here: each test runs on the emulated GPU its marker names (its fixture on CUDA too)."""
    pytester.makepyfile(test_gpu=ON_A_GPU)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=3)
    result.stdout.fnmatch_lines(
        [
            "*test_over_its_limit*",
            "*peak allocated memory * passed the limit 1.00 MiB*",
            "*test_too_big_for_the_gpu*",
            "*would not fit on Tesla T4: needs 20.* GiB with the CUDA context, of 14.8 GiB: does NOT fit*",
            "*test_that_fails_on_the_gpu*",
            "*the test failed on the emulated h100; its run said:*",
            "*AssertionError: one GPU here*",
        ]
    )
