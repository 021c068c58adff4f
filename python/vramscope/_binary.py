"""Where the ``vramscope`` command is: the one the wheel installed beside this package's
interpreter, or ``VRAMSCOPE_BIN``."""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path

from ._errors import VramscopeNotFound

__all__ = ["VramscopeNotFound", "binary"]


def _candidates() -> list[Path]:
    found: list[Path] = []
    schemes = [None, f"{os.name}_user"]
    for scheme in schemes:
        try:
            scripts = sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts")
        except KeyError:
            continue
        if scripts:
            found.append(Path(scripts) / "vramscope")
    # A venv whose interpreter was called by its full path without being activated.
    found.append(Path(sys.executable).parent / "vramscope")
    on_path = shutil.which("vramscope")
    if on_path:
        found.append(Path(on_path))
    return found


def binary() -> str:
    """The path of the ``vramscope`` command.

    ``VRAMSCOPE_BIN`` wins when set (a build of your own, for example); otherwise the command
    that ``pip install vramscope`` put in the environment's scripts folder, then the one on
    ``PATH``.

    >>> import vramscope
    >>> vramscope.binary()  # doctest: +SKIP
    '/home/me/venv/bin/vramscope'
    """
    override = os.environ.get("VRAMSCOPE_BIN")
    if override:
        if not os.access(override, os.X_OK):
            raise VramscopeNotFound(f"VRAMSCOPE_BIN is {override!r}, which is not an executable file")
        return override
    for candidate in _candidates():
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    raise VramscopeNotFound(
        "the vramscope command is not installed beside this Python package: reinstall it with "
        "`pip install --force-reinstall vramscope`, or set VRAMSCOPE_BIN to the command's path"
    )
