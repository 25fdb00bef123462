"""``bench serve``'s client: event-stream lines split where SSE splits them, nowhere else."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from actorllm.bench.serve import sse_lines

pytestmark = pytest.mark.anyio


async def _chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for p in parts:
        yield p


async def test_a_line_separator_inside_a_json_string_does_not_split_the_event() -> None:
    text = "a\u2028b\x85c\u2029d"  # str.splitlines (httpx's aiter_lines) splits at each
    event = b"data: " + json.dumps({"text": text}, ensure_ascii=False).encode() + b"\n\n"
    lines = [line async for line in sse_lines(_chunks(event[:9], event[9:20], event[20:]))]
    assert lines == [event[:-2], b""]
    assert json.loads(lines[0][5:])["text"] == text


async def test_crlf_cr_and_lf_all_end_lines_and_a_last_line_without_one_is_kept() -> None:
    stream = _chunks(b"data: 1\r\nda", b"ta: 2\rdata: 3\ndata: 4")
    lines = [line async for line in sse_lines(stream)]
    assert lines == [b"data: 1", b"data: 2", b"data: 3", b"data: 4"]
