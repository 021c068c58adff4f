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
