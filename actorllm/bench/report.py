"""Plain-text tables for the terminal (the JSON carries the full figures)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

Column = tuple[str, str, str]  # (key in the row, header, format spec)


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[Column]) -> str:
    cells = [[h for _, h, _ in columns]]
    for row in rows:
        cells.append([_cell(row.get(key), spec) for key, _, spec in columns])
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _cell(value: Any, spec: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, str):
        return value
    return format(value, spec)
