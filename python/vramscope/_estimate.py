"""``vramscope.estimate``: a program's GPU memory on a GPU this machine does not have."""

from __future__ import annotations

import html
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from ._binary import binary
from ._documents import EstimateDocument
from ._errors import VramscopeError
from ._summary import format_bytes

if TYPE_CHECKING:
    from IPython.lib.pretty import RepresentationPrinter

__all__ = ["Estimate", "estimate"]

# Exit statuses of `vramscope estimate`: it fits, it does not (both answer with the document).
_ANSWERED = (0, 1)


class Estimate(dict[str, Any]):
    """What ``vramscope estimate --json`` says: a dict with the keys of an
    :class:`~vramscope.EstimateDocument` (``target``, ``fits``, ``devices`` with each one's
    ``peak_allocated_bytes`` and ``peak_reserved_bytes``, ``rests_on``, ``standins``, ...) that
    shows itself in Jupyter as a table, and in a console as a few lines."""

    def __init__(self, document: EstimateDocument, output: str = "") -> None:
        super().__init__(document)
        #: What the program printed (its standard output and error) while it ran.
        self.output = output

    @property
    def document(self) -> EstimateDocument:
        """The document itself, typed."""
        return cast("EstimateDocument", self)

    @property
    def fits(self) -> bool:
        """Whether every device's need (peak reserved and the CUDA context) fits its memory."""
        return bool(self["fits"])

    @property
    def peak_allocated_bytes(self) -> int:
        """The highest peak allocated of any device."""
        return max((d["peak_allocated_bytes"] for d in self["devices"]), default=0)

    @property
    def peak_reserved_bytes(self) -> int:
        """The highest peak reserved of any device."""
        return max((d["peak_reserved_bytes"] for d in self["devices"]), default=0)

    def _lines(self) -> list[str]:
        target = self["target"]
        lines = [f"on {target['name']} ({format_bytes(target['total_memory_bytes'])}), emulated"]
        for d in self["devices"]:
            lines.append(
                f"cuda:{d['device']}: peak allocated {format_bytes(d['peak_allocated_bytes'])}, "
                f"peak reserved {format_bytes(d['peak_reserved_bytes'])}; {d['verdict']}"
            )
        if self.get("smallest_change_that_fits"):
            lines.append(str(self["smallest_change_that_fits"]))
        return lines

    def __str__(self) -> str:
        return "\n".join(self._lines())

    def _repr_pretty_(self, printer: RepresentationPrinter, cycle: bool) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str:
        target = self["target"]
        rows = []
        for d in self["devices"]:
            verdict = (
                "<b style='color:#2e7d32'>fits</b>"
                if d["fits"]
                else f"<b style='color:#c62828'>{html.escape(format_bytes(-d['headroom_bytes']))} short</b>"
            )
            categories = ", ".join(
                f"{html.escape(name)} {html.escape(format_bytes(value))}"
                for name, value in sorted(d["categories_at_peak"].items(), key=lambda kv: -kv[1])
                if value
            )
            rows.append(
                f"<tr><td>cuda:{d['device']}</td><td>{format_bytes(d['peak_allocated_bytes'])}</td>"
                f"<td>{format_bytes(d['peak_reserved_bytes'])}</td><td>{format_bytes(d['needed_bytes'])}</td>"
                f"<td>{verdict}</td><td>{html.escape(d.get('phase_at_peak') or '')}</td><td>{categories}</td></tr>"
            )
        rests = "".join(
            f"<li>{html.escape(r['what'])}"
            + (f": {html.escape(format_bytes(r['bytes']))}" if r.get("bytes") is not None else "")
            + f" <span style='color:#666'>({html.escape(r['detail'])})</span></li>"
            for r in self["rests_on"]
        )
        change = self.get("smallest_change_that_fits")
        places = ", ".join(f"{p['file']}:{p['line']}" for p in (self.get("standins") or [])[:5])
        return (
            f"<div><b>vramscope estimate</b> on {html.escape(target['name'])} "
            f"({html.escape(format_bytes(target['total_memory_bytes']))}), emulated"
            "<table><tr><th>device</th><th>peak allocated</th><th>peak reserved</th><th>needs</th>"
            "<th></th><th>peak in</th><th>at the peak</th></tr>"
            + "".join(rows)
            + "</table>"
            + (f"<p>{html.escape(str(change))}</p>" if change else "")
            + f"<details><summary>what the estimate rests on</summary><ul>{rests}</ul></details>"
            + (
                f"<p style='color:#666'>the program read values it was given 0 for, at {html.escape(places)}</p>"
                if places
                else ""
            )
            + "</div>"
        )


def estimate(
    command: str | Sequence[str],
    *,
    gpu: str | None = None,
    device_memory: int | str | None = None,
    gpus: int = 1,
    context: int | str | None = None,
    output: str | os.PathLike[str] | None = None,
    force: bool = False,
    cwd: str | os.PathLike[str] | None = None,
) -> Estimate:
    """Runs a PyTorch program on an emulated GPU and says how much memory it would need there,
    as ``vramscope estimate --json`` does. The program runs here, unchanged and without a GPU:
    its tensors have no storage, and every one on the GPU is allocated in a model of PyTorch's
    caching allocator; it takes seconds, whatever the model's size.

    Args:
        command: the program and its arguments (``["train.py", "--batch-size", "8"]``); a string
            is split as a shell would. A ``.py`` file first runs with this Python.
        gpu: the GPU: ``"h200"``, ``"h100"`` (the default), ``"a100"``, ``"a100-40gb"``,
            ``"l40s"``, ``"l4"``, ``"a10"``, ``"t4"``, ``"rtx5090"``, ``"rtx4090"``.
        device_memory: its memory instead (bytes, or ``"24 GiB"``).
        gpus: how many GPUs the program sees.
        context: the CUDA context counted against each GPU (default 512 MiB).
        output: also write the estimate as a trace (``vramscope.open`` and :func:`summary` read it).
        force: replace ``output`` if it exists.
        cwd: the folder to run the program in (default: this one).

    Returns:
        An :class:`Estimate`: ``fits``, ``devices`` (each one's ``peak_allocated_bytes``,
        ``peak_reserved_bytes``, ``needed_bytes``, ``headroom_bytes``, ``categories_at_peak``),
        ``rests_on``, ``standins``, and ``smallest_change_that_fits`` when it does not fit. Not
        fitting is an answer, not an error.

    Raises:
        VramscopeError: no estimate could be made (the program failed or put nothing on the GPU;
            the message says which, ``stderr`` has the program's own error).

    >>> e = vramscope.estimate(["train.py", "--batch-size", "16"], gpu="a100-40gb")  # doctest: +SKIP
    >>> e.fits, e.peak_allocated_bytes  # doctest: +SKIP
    (True, 31457280000)
    """
    parts = shlex.split(command) if isinstance(command, str) else [os.fspath(c) for c in command]
    if not parts:
        raise VramscopeError("nothing to estimate: give the program and its arguments", 2, "")
    if parts[0].endswith(".py"):
        parts = [sys.executable, *parts]
    args = [binary(), "estimate", "--json", "--gpus", str(gpus)]
    if gpu is not None:
        args += ["--gpu", gpu]
    if device_memory is not None:
        args += ["--device-memory", str(device_memory).replace(" ", "")]
    if context is not None:
        args += ["--context", str(context).replace(" ", "")]
    if output is not None:
        args += ["-o", os.fspath(output)]
    if force:
        args.append("--force")
    done = subprocess.run([*args, "--", *parts], capture_output=True, text=True, check=False, cwd=cwd)
    if done.returncode not in _ANSWERED or not done.stdout.strip():
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("error:")]
        message = (errors or lines or [f"vramscope exited with status {done.returncode}"])[-1]
        raise VramscopeError(message.removeprefix("error: "), done.returncode, done.stderr)
    document: EstimateDocument = json.loads(done.stdout)
    return Estimate(document, done.stderr)
