"""Jupyter: ``%load_ext vramscope``, then ``%%vramscope`` records a cell and shows what it did."""

from __future__ import annotations

import argparse
import os
import shlex
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

__all__ = ["load_ipython_extension"]


def _free_name(stem: str) -> str:
    """``stem.vtrace``, or ``stem-2.vtrace``... : never a file the user has."""
    candidate = f"{stem}.vtrace"
    n = 2
    while os.path.exists(candidate):
        candidate = f"{stem}-{n}.vtrace"
        n += 1
    return candidate


def load_ipython_extension(ipython: InteractiveShell) -> None:
    """Registers the ``%%vramscope`` cell magic (``%load_ext vramscope``).

    ``%%vramscope`` records the PyTorch memory of the cell it heads (in this kernel, as
    :func:`vramscope.record` does) and shows, under it, the timeline by category, the peak and
    what was alive then by category and by allocation site, growth, and the remedies that would
    lower the peak most. The trace is kept (``vramscope-cell<N>.vtrace`` in the working folder, or
    ``-o FILE``) for opening in the app.

    ``%%vramscope --estimate H100`` runs the cell on an emulated H100 instead (no GPU needed, as
    :func:`vramscope.estimate`): as a script of its own, so it sees none of the kernel's
    variables; it shows what the cell would need there, whether it fits, and the trace.

    Example (in a notebook)::

        %load_ext vramscope

        %%vramscope
        loss = model(batch).sum()
        loss.backward()
    """
    from IPython.core.magic import Magics, cell_magic, magics_class
    from IPython.display import display

    from . import summary
    from ._record import record

    parser = argparse.ArgumentParser(prog="%%vramscope", add_help=True)
    parser.add_argument("-o", "--output", help="the .vtrace to write (default: vramscope-cell<N>.vtrace)")
    parser.add_argument("--force", action="store_true", help="replace OUTPUT if it exists")
    parser.add_argument(
        "--estimate",
        metavar="GPU",
        help="run the cell on this GPU, emulated (h100, a100, l4, ...), as a script of its own: it sees none of "
        "the kernel's variables, so it imports and builds what it needs",
    )
    parser.add_argument("--device-memory", help="with --estimate: the GPU's memory instead (24GiB)")
    parser.add_argument(
        "--source",
        choices=["auto", "cuda", "cpu"],
        default="auto",
        help="where tensors live: CUDA when available, else the CPU",
    )

    @magics_class
    class VramscopeMagics(Magics):
        @cell_magic
        def vramscope(self, line: str, cell: str) -> None:
            try:
                options = parser.parse_args(shlex.split(line))
            except SystemExit:
                return
            path = options.output or _free_name(f"vramscope-cell{ipython.execution_count}")
            if options.estimate:
                self.estimate(options, cell, path)
                return
            with record(path, source=options.source, force=options.force):
                result = ipython.run_cell(cell)
            if os.path.exists(path):
                display(summary(path))
            if result is not None and result.error_in_exec is not None:
                raise result.error_in_exec

        def estimate(self, options: argparse.Namespace, cell: str, path: str) -> None:
            import sys
            import tempfile

            from ._errors import VramscopeError
            from ._estimate import estimate

            with tempfile.TemporaryDirectory(prefix="vramscope-cell-") as folder:
                script = os.path.join(folder, f"cell{ipython.execution_count}.py")
                with open(script, "w", encoding="utf-8") as f:
                    f.write(cell)
                try:
                    found = estimate(
                        [sys.executable, script],
                        gpu=options.estimate,
                        device_memory=options.device_memory,
                        output=path,
                        force=options.force,
                    )
                except VramscopeError as error:
                    print(error.stderr, file=sys.stderr)
                    raise
            if found.output:
                print(found.output, end="", file=sys.stderr)
            display(found)
            if os.path.exists(path):
                display(summary(path))

    ipython.register_magics(VramscopeMagics)
