"""``%load_ext vramscope`` and ``%%vramscope`` in a real notebook, run by nbclient on an
ipykernel of this environment: the cell's saved outputs hold the report image and the numbers
``info --json`` gives for the trace the cell wrote."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import nbformat
from nbclient import NotebookClient

import vramscope

SETUP = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
optimizer = torch.optim.Adam(model.parameters())
"""

TRAIN = """%%vramscope -o cell.vtrace
for _ in range(3):
    loss = torch.nn.functional.cross_entropy(model(torch.randn(32, 64)), torch.randint(0, 10, (32,)))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def test_a_recorded_cell_shows_the_image_and_info_s_numbers(tmp_path: Path) -> None:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell("%load_ext vramscope"),
        nbformat.v4.new_code_cell(SETUP),
        nbformat.v4.new_code_cell(TRAIN),
        nbformat.v4.new_code_cell(
            "vramscope_summary = __import__('vramscope').summary('cell.vtrace')\nvramscope_summary"
        ),
    ]
    NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    nbformat.write(notebook, str(tmp_path / "ran.ipynb"))

    trace = tmp_path / "cell.vtrace"
    assert trace.exists()
    info = json.loads(
        subprocess.run([vramscope.binary(), "info", "--json", str(trace)], capture_output=True, check=True).stdout
    )
    device = info["devices"][0]
    expected = {device["peak_allocated_bytes"], *device["categories_at_peak"].values()}
    parameters = 4 * (64 * 256 + 256 + 256 * 10 + 10)
    assert device["categories_at_peak"]["parameter"] == parameters

    for cell in notebook.cells[2:]:
        shown = [o for o in cell.outputs if o.output_type in ("display_data", "execute_result")]
        assert shown, cell.outputs
        data = shown[-1]["data"]
        assert data["image/png"], "the report image is in the saved output"
        page = data["text/html"]
        numbers = {int(n) for n in re.findall(r"data-bytes='(\d+)'", page)}
        assert expected <= numbers, (expected, numbers)
        # The hand-computed parameters, shown by the notebook itself (not only by info).
        assert parameters in numbers, (parameters, numbers)
        assert "optimizer state" in page
        assert "largest alive at the peak" in page
        assert "Recorded inside the program" in page


ESTIMATED = """%%vramscope --estimate a100-40gb -o estimated.vtrace
import torch
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).cuda()
optimizer = torch.optim.AdamW(model.parameters())
for _ in range(2):
    loss = model(torch.randn(512, 1024, device="cuda")).square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
print("device", torch.cuda.get_device_name(), "max allocated", torch.cuda.max_memory_allocated())
"""


def test_an_estimated_cell_shows_what_it_needs_on_the_gpu(tmp_path: Path) -> None:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("%load_ext vramscope"), nbformat.v4.new_code_cell(ESTIMATED)]
    NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    outputs = notebook.cells[1].outputs
    printed = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    # The cell ran on the emulated A100, and said so itself.
    assert "device NVIDIA A100-SXM4-40GB max allocated" in printed, printed
    max_allocated = int(printed.split("max allocated")[1].split()[0])
    pages = [o["data"]["text/html"] for o in outputs if o.output_type == "display_data" and "text/html" in o["data"]]
    assert any("vramscope estimate" in page and "NVIDIA A100-SXM4-40GB" in page for page in pages), pages
    trace = tmp_path / "estimated.vtrace"
    info = json.loads(
        subprocess.run([vramscope.binary(), "info", "--json", str(trace)], capture_output=True, check=True).stdout
    )
    device = next(d for d in info["devices"] if d["device"] == 0)
    parameters = 4 * (1024 * 4096 + 4096 + 4096 * 1024 + 1024)
    assert device["categories_at_peak"]["parameter"] == parameters
    assert device["categories_at_peak"]["optimizer_state"] == 2 * parameters
    # What the program's own counter said is the estimate's peak.
    assert max_allocated >= device["peak_allocated_bytes"] > 4 * parameters
