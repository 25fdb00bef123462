"""The bodies of ``POST /generative_scoring``, with vLLM 0.32's fields and defaults.

The struct types what decodes; the rules vLLM words itself (label ids in the vocabulary,
at least one label and one item) are the serving layer's, with vLLM's messages. Items are
all texts or all token-id lists, never a mix (vLLM's union of two list types).
"""

from __future__ import annotations

import time
from typing import Annotated

import msgspec

from actorllm.entrypoints.openai.protocol.bounds import MAX_I32
from actorllm.entrypoints.openai.protocol.usage import UsageInfo

# Prompt token ids: the vocabulary bounds them (the serving layer; the document states it).
PromptTokenId = Annotated[
    int, msgspec.Meta(ge=0, le=MAX_I32, extra_json_schema={"x-served": "token"})
]
# vLLM's cache_salt rule (checked with its words below; the document states it)
_SALT_MAX = 128
_SALT_FORBIDDEN = frozenset("@/\\\x00")
CacheSalt = Annotated[
    str,
    msgspec.Meta(
        extra_json_schema={"minLength": 1, "maxLength": _SALT_MAX, "pattern": "^[^@/\\\\\\x00]+$"}
    ),
]
Priority = Annotated[
    int, msgspec.Meta(ge=-(2**63), le=2**63 - 1, extra_json_schema={"x-served": "priority"})
]


class GenerativeScoringRequest(msgspec.Struct, kw_only=True):
    """``query`` and each item, texts or token ids, make one prompt per item (the item
    after the query, or before it with ``item_first``). Each item's score is the
    probability of ``label_token_ids[0]`` next: over the labels alone
    (``apply_softmax``, the default) or over the whole vocabulary."""

    query: str | list[PromptTokenId]
    items: list[str | list[PromptTokenId]]
    label_token_ids: list[int]
    model: str | None = None
    apply_softmax: bool = True
    item_first: bool = False
    add_special_tokens: bool = True  # for the query's text; items' texts never get them
    cache_salt: CacheSalt | None = None
    priority: Priority = 0
    request_id: str | None = None  # X-Request-Id wins; neither: a fresh one

    def __post_init__(self) -> None:
        if len({isinstance(item, str) for item in self.items}) > 1:
            raise ValueError("items must be all strings or all lists of token ids, not a mix")
        salt = self.cache_salt
        if salt is not None and not salt:
            raise ValueError("Parameter 'cache_salt' must be a non-empty string if provided.")
        if salt is not None and (len(salt) > _SALT_MAX or not _SALT_FORBIDDEN.isdisjoint(salt)):
            raise ValueError(
                "Parameter 'cache_salt' must be at most 128 characters and must not contain "
                "'@', '/', '\\\\', or NUL."
            )


class GenerativeScoringItemResult(msgspec.Struct, kw_only=True):
    index: int
    object: str = "score"
    score: float


def _now() -> int:
    return int(time.time())


class GenerativeScoringResponse(msgspec.Struct, kw_only=True):
    id: str
    object: str = "list"
    created: int = msgspec.field(default_factory=_now)
    model: str
    data: list[GenerativeScoringItemResult]
    usage: UsageInfo
