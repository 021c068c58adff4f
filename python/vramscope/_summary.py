"""What vramscope says about a trace, as a dict that shows itself in notebooks."""

from __future__ import annotations

import base64
import html
import json
import os
import subprocess
import tempfile
from typing import TYPE_CHECKING, Any, cast

from ._binary import binary
from ._documents import AdviceDocument, BlockOut, InfoDocument, ReportDocument, RunDocument

if TYPE_CHECKING:
    from IPython.lib.pretty import RepresentationPrinter

__all__ = ["Summary", "format_bytes"]

# The app's colours and names for the categories (app/src/colors.rs), so that a category looks
# the same in a notebook as in the window and the report image.
_CATEGORIES = {
    "parameter": ("#4e79a7", "parameter"),
    "gradient": ("#f28e2b", "gradient"),
    "optimizer_state": ("#b07aa1", "optimizer state"),
    "activation": ("#59a14f", "activation"),
    "temporary": ("#edc948", "temporary"),
    "input": ("#76b7b2", "input"),
    "allocator_cache": ("#bab0ac", "allocator cache"),
    "non_framework": ("#9c755f", "non-framework"),
    "autograd_detail": ("#ff9da7", "autograd detail"),
    "unknown": ("#8c8f99", "unknown"),
}


def format_bytes(value: int) -> str:
    """Bytes as vramscope prints them: ``1.80 MiB``, ``664 KiB``, ``512 B``."""
    if value < 1024:
        return f"{value} B"
    amount = float(value)
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        amount /= 1024
        if amount < 1024 or unit == "EiB":
            break
    if amount >= 100:
        return f"{amount:.0f} {unit}"
    if amount >= 10:
        return f"{amount:.1f} {unit}"
    return f"{amount:.2f} {unit}"


class Summary(dict[str, Any]):
    """What ``vramscope info --json`` says about a trace: a dict (``devices``, ``notes``, ...)
    that also draws itself in Jupyter: the timeline by category (the ``report`` image), the peak,
    what was alive then by category and by allocation site, growth, and the remedies that would
    lower the peak most (``advise``). Drawing it runs the command once (``vramscope report
    --json``), the first time it is shown.

    Its keys are those of an :class:`~vramscope.InfoDocument` (one trace) or a
    :class:`~vramscope.RunDocument` (a run of several ranks); :attr:`document` is the same dict,
    typed as such.

    Attributes:
        path: the trace it describes.

    >>> facts = vramscope.summary("run.vtrace")  # doctest: +SKIP
    >>> facts                                    # in a notebook cell: the picture and the tables
    """

    def __init__(self, path: str, facts: InfoDocument | RunDocument) -> None:
        super().__init__(facts)
        self.path = path
        self._report: tuple[bytes | None, ReportDocument | None] | None = None

    @property
    def document(self) -> InfoDocument | RunDocument:
        """This summary, typed: an :class:`~vramscope.InfoDocument`, or a
        :class:`~vramscope.RunDocument` when it has a ``run`` key."""
        return cast("InfoDocument | RunDocument", self)

    def _drawn(self) -> tuple[bytes | None, ReportDocument | None]:
        """The report's image and what it shows, from one run of the command (kept)."""
        if self._report is None:
            with tempfile.TemporaryDirectory(prefix="vramscope-") as directory:
                image = os.path.join(directory, "report.png")
                done = subprocess.run(
                    [binary(), "report", self.path, "-o", image, "--json", "--blocks", "8"],
                    capture_output=True,
                    text=True,
                    check=False,
                )
                png: bytes | None = None
                shown: ReportDocument | None = None
                if done.returncode == 0 and os.path.exists(image):
                    with open(image, "rb") as file:
                        png = file.read()
                    try:
                        shown = json.loads(done.stdout)
                    except ValueError:
                        shown = None
                self._report = (png, shown)
        return self._report

    def _repr_png_(self) -> bytes | None:
        """The timeline by category and the breakdown at the peak (``vramscope report``)."""
        return self._drawn()[0]

    def _repr_html_(self) -> str:
        parts: list[str] = [f"<div class='vramscope-summary'><h4>vramscope: {html.escape(self.path)}</h4>"]
        png, shown = self._drawn()
        if png is not None:
            encoded = base64.b64encode(png).decode("ascii")
            parts.append(
                f"<img alt='timeline by category' style='max-width:100%' src='data:image/png;base64,{encoded}'/>"
            )
        drawn = shown["runs"][0] if shown and shown["runs"] else None
        largest: dict[int, list[BlockOut]] = {}
        if drawn is not None:
            blocks = drawn["info"].get("largest_blocks")
            largest = {d["device"]: d["blocks"] for d in blocks["devices"]} if blocks else {}
        for device in self.get("devices", []):
            parts.append(_device_html(device, largest.get(device.get("device"), [])))
        advice = drawn["advice"] if drawn is not None else None
        if advice and advice["remedies"]:
            parts.append(_remedies_html(advice))
        for note in self.get("notes", []):
            parts.append(f"<p><i>{html.escape(note)}</i></p>")
        parts.append("</div>")
        return "\n".join(parts)

    def __repr__(self) -> str:
        lines = [f"vramscope summary of {self.path}"]
        for device in self.get("devices", []):
            lines.append(
                f"  {device.get('label', device.get('device'))}: peak allocated "
                f"{format_bytes(device.get('peak_allocated_bytes', 0))}, reserved "
                f"{format_bytes(device.get('peak_reserved_bytes', 0))}"
            )
        return "\n".join(lines)

    def _repr_pretty_(self, printer: RepresentationPrinter, cycle: bool) -> None:
        printer.text(repr(self))


def _bytes_cell(value: int) -> str:
    # The exact count travels with the rounded one: the numbers are info --json's.
    return f"<td style='text-align:right' data-bytes='{value}' title='{value:,} bytes'>{format_bytes(value)}</td>"


def _device_html(device: dict[str, Any], blocks: list[BlockOut]) -> str:
    label = html.escape(str(device.get("label", device.get("device"))))
    peak = device.get("peak_allocated_bytes", 0)
    rows = [
        (
            f"<h5>{label}: peak allocated <span data-bytes='{peak}'>{format_bytes(peak)}</span>, "
            f"reserved <span data-bytes='{device.get('peak_reserved_bytes', 0)}'>"
            f"{format_bytes(device.get('peak_reserved_bytes', 0))}</span>"
            f"{'' if device.get('reserved_recorded', True) else ' (not recorded)'}</h5>"
        ),
        "<table><tr><th>at the peak</th><th>bytes</th><th>share</th><th></th></tr>",
    ]
    categories = sorted(device.get("categories_at_peak", {}).items(), key=lambda kv: -kv[1])
    for name, value in categories:
        colour, words = _CATEGORIES.get(name, ("#8c8f99", name.replace("_", " ")))
        share = 100.0 * value / peak if peak else 0.0
        bar = f"<div style='background:{colour};height:0.8em;width:{max(share, 0.5):.1f}%'></div>"
        rows.append(
            f"<tr data-category='{html.escape(name)}'><td><span style='color:{colour}'>&#9632;</span> "
            f"{html.escape(words)}</td>{_bytes_cell(value)}<td style='text-align:right'>{share:.1f}%</td>"
            f"<td style='width:12em'>{bar}</td></tr>"
        )
    rows.append("</table>")
    if blocks:
        rows.append("<table><tr><th>largest alive at the peak</th><th>bytes</th><th>category</th><th>why</th></tr>")
        for block in blocks:
            words = _CATEGORIES.get(block["category"], ("", block["category"]))[1]
            rows.append(
                f"<tr><td><code>{html.escape(block['site'])}</code></td>"
                f"{_bytes_cell(block['size_bytes'])}<td>{html.escape(words)}</td>"
                f"<td>{html.escape(block['why'])}</td></tr>"
            )
        rows.append("</table>")
    growth = device.get("growth")
    if growth and growth.get("grows"):
        rows.append(
            f"<p style='color:#e15759'><b>Memory grows</b> {format_bytes(growth.get('bytes_per_iteration', 0))} "
            f"per iteration over {growth.get('count', 0)} iterations.</p>"
        )
    return "\n".join(rows)


def _remedies_html(advice: AdviceDocument) -> str:
    rows = ["<table><tr><th>remedy (projected by replaying the run)</th><th>peak</th><th>saves</th></tr>"]
    # The advice's own order: lowest projected peak first (a fine-tune's LoRA first, where it fits).
    for remedy in advice["remedies"][:3]:
        name = html.escape(remedy["name"])
        rows.append(
            f"<tr><td><b>{name}</b>: {html.escape(remedy['change'])}</td>"
            f"{_bytes_cell(remedy['projected_peak_allocated_bytes'])}"
            f"{_bytes_cell(remedy['saving_bytes'])}</tr>"
        )
    rows.append("</table>")
    return "\n".join(rows)
