"""Pooling parameters (vLLM's ``PoolingParams``) and the pooled result the core carries.

A pooling request is prefill-only: its prompt is run through the model once (in chunks
when the model is a decoder and chunked prefill is on) and, after its last chunk, the
runner returns one pooled vector (or one row per token, ``token_*`` tasks) instead of a
sampled token. The scheduler then finishes it and frees its KV blocks.

The core imports no torch or numpy: a pooled result travels as :class:`PooledData`,
little-endian float32 bytes and a shape, which the upper layers turn into a tensor.

    >>> PooledData.from_floats([0.5, -1.0]).tolist()
    [0.5, -1.0]
"""

from __future__ import annotations

import array
import sys
from typing import Literal

import msgspec

# vLLM 0.32's pooling tasks (``vllm.tasks.PoolingTask``, without "plugin").
PoolingTask = Literal["embed", "classify", "token_embed", "token_classify"]
POOLING_TASKS: tuple[str, ...] = ("embed", "classify", "token_embed", "token_classify")
# Tasks answered per token (one row each) rather than per prompt
TOKEN_TASKS: tuple[str, ...] = ("token_embed", "token_classify")


class PoolingParamsError(ValueError):
    """A pooling parameter the model cannot honour; ``param`` names the field."""

    def __init__(self, param: str, message: str) -> None:
        self.param = param
        super().__init__(message)


class PoolingParams(msgspec.Struct, kw_only=True):
    """What to pool. Field names follow vLLM's ``PoolingParams``.

    ``use_activation``: apply the pooler's activation (embed: normalize; classify:
    softmax / sigmoid); None: the model's default (True). ``dimensions``: keep the first
    ``dimensions`` entries of the embedding (matryoshka models only), renormalized.
    ``step_tag_id`` and ``returned_token_ids`` (models whose token pooling is STEP, as a
    process reward model's): keep only the rows of the prompt's ``step_tag_id`` tokens
    and only the ``returned_token_ids`` columns of each; None: ``--pooler-config``'s.
    """

    use_activation: bool | None = None
    dimensions: int | None = None
    step_tag_id: int | None = None
    returned_token_ids: list[int] | None = None
    task: PoolingTask | None = None
    skip_reading_prefix_cache: bool | None = None
    # Set by the engine, not the caller: where a (text, text_pair) prompt's second segment
    # starts (BERT token type 1 from there on); None: one segment.
    token_type_start: int | None = None

    def clone(self, **changes: object) -> PoolingParams:
        return msgspec.structs.replace(self, **changes)


class PooledData(msgspec.Struct, frozen=True, kw_only=True, array_like=True):
    """A pooled result: float32 values (little-endian bytes), row-major, with its shape
    (``[dim]`` for one vector, ``[num_tokens, dim]`` for ``token_*`` tasks)."""

    data: bytes
    shape: list[int]

    @classmethod
    def from_floats(cls, values: list[float], shape: list[int] | None = None) -> PooledData:
        arr = array.array("f", values)
        if sys.byteorder != "little":
            arr.byteswap()
        return cls(data=arr.tobytes(), shape=shape if shape is not None else [len(values)])

    def tolist(self) -> list[float]:
        """The values, flat (row-major)."""
        arr = array.array("f")
        arr.frombytes(self.data)
        if sys.byteorder != "little":
            arr.byteswap()
        return arr.tolist()
