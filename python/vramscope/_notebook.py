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
            with record(path, source=options.source, force=options.force):
                result = ipython.run_cell(cell)
            if os.path.exists(path):
                display(summary(path))
            if result is not None and result.error_in_exec is not None:
                raise result.error_in_exec

    ipython.register_magics(VramscopeMagics)
