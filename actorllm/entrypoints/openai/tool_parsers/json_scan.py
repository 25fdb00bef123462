"""Finding JSON values inside model text, complete or still being generated.

Tool-call formats embed JSON in free text (``<tool_call>{...}</tool_call>``,
``[TOOL_CALLS][...]``). :func:`scan_value` finds where one JSON value ends without parsing
it, so a parser can cut the text into calls; while a call is still streaming it reports
None (incomplete).

    >>> scan_value('{"a": "}"} tail', 0)
    10
    >>> scan_value('{"a": [1, 2', 0) is None
    True
"""

from __future__ import annotations

import json
import re
from typing import Any

_WS = re.compile(r"\s*")
_SCALAR = re.compile(r"-?\d+(\.\d+)?([eE][-+]?\d+)?|true|false|null")


def skip_ws(text: str, pos: int) -> int:
    m = _WS.match(text, pos)
    return m.end() if m else pos


def scan_value(text: str, start: int) -> int | None:
    """End index (exclusive) of the JSON value at ``text[start:]`` (after whitespace), or
    None if it is cut short. Malformed text ends the value where it stops making sense."""
    pos = skip_ws(text, start)
    if pos >= len(text):
        return None
    c = text[pos]
    if c == '"':
        return _scan_string(text, pos)
    if c in "{[":
        depth = 0
        i = pos
        while i < len(text):
            ch = text[i]
            if ch == '"':
                end = _scan_string(text, i)
                if end is None:
                    return None
                i = end
                continue
            if ch in "{[":
                depth += 1
            elif ch in "}]":
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
        return None
    m = _SCALAR.match(text, pos)
    if m is None or m.end() == len(text):  # a number may still be growing
        return None
    return m.end()


def _scan_string(text: str, pos: int) -> int | None:
    i = pos + 1
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == '"':
            return i + 1
        i += 1
    return None


def loads_object(text: str) -> dict[str, Any] | None:
    """``json.loads`` that returns a dict or None (never raises)."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def string_field(text: str, key: str) -> str | None:
    """The value of ``"key": "<string>"`` once its closing quote is there, else None."""
    m = re.search(r'"' + re.escape(key) + r'"\s*:\s*"', text)
    if m is None:
        return None
    end = _scan_string(text, m.end() - 1)
    if end is None:
        return None
    try:
        value = json.loads(text[m.end() - 1 : end])
    except ValueError:
        return None
    return value if isinstance(value, str) else None


def value_start(text: str, key: str) -> int | None:
    """Index where the value of ``"key":`` starts (after whitespace), or None."""
    m = re.search(r'"' + re.escape(key) + r'"\s*:\s*', text)
    return None if m is None or m.end() >= len(text) else m.end()
