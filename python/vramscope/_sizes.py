"""Sizes as people type them (``"512 MiB"``, ``"40GB"``, ``"2G"``): the reading every face of
vramscope shares with the command's own (``trace-format/src/size.rs`` in the project).

A lone letter and the ``iB`` units are binary (``2G`` and ``2GiB`` are 2**31 bytes), the SI units
with a ``B`` decimal (``40GB`` is 40 * 10**9 bytes); a fraction is allowed and the result is
rounded down to whole bytes, computed exactly (no floating point).
"""

from __future__ import annotations

import re

from ._errors import VramscopeUsageError

__all__ = ["parse_size"]

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gib": 1 << 30,
    "t": 1 << 40,
    "tib": 1 << 40,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
}
_LARGEST = (1 << 64) - 1
_SIZE = re.compile(r"([0-9]*)(?:\.([0-9]*))?\s*([A-Za-z]*)")


def parse_size(value: int | float | str) -> int:
    """``"512 MiB"`` -> 536870912, ``"40GB"`` -> 40000000000, ``"2G"`` -> 2147483648; a number
    is bytes (a float rounded down). Raises :class:`~vramscope.VramscopeUsageError` (a
    ``ValueError``) naming what is wrong."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise VramscopeUsageError(
            f"not a size: {value!r} (give bytes as a number, or text such as '512 MiB' or '40GB')"
        )
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise VramscopeUsageError(f"not a size: {value!r}")
        value = int(value)
    if isinstance(value, int):
        if not 0 <= value <= _LARGEST:
            raise VramscopeUsageError(f"not a size: {value!r} (bytes from 0 to 2**64 - 1)")
        return value
    text = value.strip()
    match = _SIZE.fullmatch(text)
    if not match or (not match.group(1) and not match.group(2)):
        raise VramscopeUsageError(f"not a size: {value!r} (give bytes, or a size such as '512 MiB', '40GB' or '2G')")
    whole, fraction, unit = match.group(1), match.group(2) or "", match.group(3).lower()
    if unit not in _UNITS:
        raise VramscopeUsageError(
            f"not a size: {value!r}: unknown unit {unit!r} (use B, K or KiB, M or MiB, G or GiB, "
            "T or TiB, or the decimal KB, MB, GB, TB)"
        )
    scale = _UNITS[unit]
    fraction = fraction[:19]
    size = int(whole or "0") * scale + (int(fraction) * scale // 10 ** len(fraction) if fraction else 0)
    if size > _LARGEST:
        raise VramscopeUsageError(f"not a size: {value!r} is too large (at most 16 EiB)")
    return size
