"""Byte sizes as users write them (``512MiB``, ``2GiB``, ``4GB``) for the ``*_bytes`` settings."""

from __future__ import annotations

import re

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?i?B?)?\s*$", re.IGNORECASE)
_UNITS = {
    "": 1,
    "B": 1,
    "K": 10**3,
    "KB": 10**3,
    "KIB": 2**10,
    "M": 10**6,
    "MB": 10**6,
    "MIB": 2**20,
    "G": 10**9,
    "GB": 10**9,
    "GIB": 2**30,
    "T": 10**12,
    "TB": 10**12,
    "TIB": 2**40,
}


def parse_size(text: str | int) -> int:
    """``"512MiB"`` -> 536870912; plain integers are bytes."""
    if isinstance(text, int):
        return text
    m = _SIZE.match(text)
    unit = (m.group(2) or "").upper() if m else None
    if m is None or unit not in _UNITS:
        raise ValueError(f"not a size: {text!r} (try 512MiB or 2GiB)")
    return int(float(m.group(1)) * _UNITS[unit])
