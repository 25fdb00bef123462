"""A pooling output's wire encodings, as vLLM 0.32 writes them (``encoding_format``,
``embed_dtype``, ``endianness`` of /v1/embeddings and /pooling).

* ``float``: a JSON list of the values (``embed_dtype`` does not apply).
* ``base64``: the values converted to ``embed_dtype``, their raw bytes in ``endianness``
  order, base64 in the JSON body. bfloat16 travels as its 16 bits (read them as float16
  and view as bfloat16), fp8 as one byte each.
* ``bytes`` / ``bytes_only``: the raw bytes of every output, one after another, as an
  ``application/octet-stream`` body; ``bytes`` adds a ``metadata`` header (JSON: id,
  created, model, usage, and per output its index, dtype, endianness, byte range and
  shape), ``bytes_only`` sends the body alone.

    >>> x = torch.tensor([1.0, -2.0])
    >>> raw(x, "float16", "big").hex()
    '3c00c000'
    >>> raw(x, "bfloat16", "little").hex()
    '803f00c0'
"""

from __future__ import annotations

import base64
import json
import sys
from typing import Any

import torch
from starlette.responses import Response

# embed_dtype -> (the values' dtype, the dtype its bits are read as for byte order)
_DTYPES: dict[str, tuple[torch.dtype, torch.dtype]] = {
    "float32": (torch.float32, torch.float32),
    "float16": (torch.float16, torch.float16),
    "bfloat16": (torch.bfloat16, torch.int16),
    "fp8_e4m3": (torch.float8_e4m3fn, torch.uint8),
    "fp8_e5m2": (torch.float8_e5m2, torch.uint8),
}


def raw(data: torch.Tensor, embed_dtype: str, endianness: str) -> bytes:
    """data: any shape -> its values in ``embed_dtype``, flattened, in ``endianness``
    byte order (``native``: this machine's)."""
    dtype, view = _DTYPES[embed_dtype]
    array = data.detach().to("cpu", dtype).flatten().contiguous().view(view).numpy()
    if endianness not in ("native", sys.byteorder):
        array = array.byteswap()
    return array.tobytes()


def json_value(data: torch.Tensor, fmt: str, embed_dtype: str, endianness: str) -> Any:
    """One output's value in a JSON body: a list of floats, or base64 of :func:`raw`."""
    if fmt == "base64":
        return base64.b64encode(raw(data, embed_dtype, endianness)).decode("ascii")
    return data.tolist()


def bytes_response(
    outputs: list[torch.Tensor],
    fmt: str,
    embed_dtype: str,
    endianness: str,
    *,
    request_id: str,
    created: int,
    model: str,
    usage: dict[str, int],
) -> Response:
    """``bytes`` / ``bytes_only``: every output's :func:`raw` bytes in one body."""
    chunks: list[bytes] = []
    items: list[dict[str, Any]] = []
    offset = 0
    for index, data in enumerate(outputs):
        chunk = raw(data, embed_dtype, endianness)
        items.append(
            {
                "index": index,
                "embed_dtype": embed_dtype,
                "endianness": endianness,
                "start": offset,
                "end": offset + len(chunk),
                "shape": list(data.shape),
            }
        )
        chunks.append(chunk)
        offset += len(chunk)
    headers = None
    if fmt == "bytes":
        metadata = {"id": request_id, "created": created, "model": model, "data": items}
        headers = {"metadata": json.dumps({**metadata, "usage": usage})}
    return Response(b"".join(chunks), media_type="application/octet-stream", headers=headers)
