"""The bounds a request field may take, as ``Annotated`` types: ``decode_request`` checks
them, and the OpenAPI document states them.

They keep a request from asking the engine for absurd work; finer checks live in
``SamplingParams`` and the engine.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

MAX_N = 128
MAX_I32 = 2**31 - 1

# ``x-served`` marks bounds that depend on the served model: openapi/served.py fills them in
# (vocabulary size, context length, scheduling policy), so the document states them.
TokenId = Annotated[int, msgspec.Meta(ge=0, le=MAX_I32, extra_json_schema={"x-served": "token"})]
MaxTokens = Annotated[
    int, msgspec.Meta(ge=1, le=MAX_I32, extra_json_schema={"x-served": "max_tokens"})
]
NumSamples = Annotated[int, msgspec.Meta(ge=1, le=MAX_N)]
# -1: the whole vocabulary; the engine's --max-logprobs bounds them (vLLM's message), and
# the OpenAPI document states that bound.
NumLogprobs = Annotated[
    int, msgspec.Meta(ge=-1, le=MAX_I32, extra_json_schema={"x-served": "logprobs"})
]
NonEmptyStr = Annotated[str, msgspec.Meta(min_length=1)]
Penalty = Annotated[float, msgspec.Meta(ge=-2.0, le=2.0)]
Seed = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
# logit_bias keys are token ids written as JSON object keys (strings of digits).
TokenIdKey = Annotated[
    str, msgspec.Meta(pattern="^[0-9]{1,10}$", extra_json_schema={"x-served": "token_key"})
]
Bias = Annotated[float, msgspec.Meta(ge=-100.0, le=100.0)]
