"""vLLM's ``reasoning_config`` (``--reasoning-config JSON``, ``LLM(reasoning_config={...})``):
the markers a request's ``thinking_token_budget`` counts between and forces.

==========================  ==========================================================
``reasoning_start_str``     the text that opens reasoning (default: the reasoning
                            parser's start marker, ``<think>`` for qwen3)
``reasoning_end_str``       the text forced once the budget is spent; it may carry a
                            transition phrase before the end marker (default: the
                            parser's end marker, ``</think>``)
``reasoning_parser``        the same as ``--reasoning-parser`` (must agree with it)
==========================  ==========================================================

``--reasoning-parser qwen3`` alone makes budgets available with ``<think>``/``</think>``,
as in vLLM. Both strings are tokenized once, at start, without special tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from actorllm.core.thinking_budget import ThinkingMarkers
from actorllm.engine.config.errors import EngineConfigError

FIELD = "reasoning_config"
_KEYS = ("reasoning_start_str", "reasoning_end_str", "reasoning_parser")


class _Tokenizer(Protocol):
    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...


def check_reasoning_config(value: Mapping[str, Any] | None, parser: str | None) -> str | None:
    """Why ``value`` (with ``--reasoning-parser`` ``parser``) is not a reasoning config, in
    a sentence naming the key; None: it is one."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        return f"must be a JSON object, got {value!r}."
    for key, item in value.items():
        if key not in _KEYS:
            return f"{key} is not a reasoning config setting (one of {', '.join(_KEYS)})."
        if not isinstance(item, str):
            return f"{key} must be a string, got {item!r}."
    named = value.get("reasoning_parser") or None
    if named is not None and parser is not None and named != parser:
        return f"reasoning_parser {named!r} differs from --reasoning-parser {parser!r}."
    return None


def thinking_markers(
    value: Mapping[str, Any] | None, parser: str | None, tokenizer: _Tokenizer
) -> ThinkingMarkers | None:
    """The markers' token ids (None: neither the config nor the parser names both strings,
    and thinking_token_budget is refused). Raises ``EngineConfigError`` when a string
    tokenizes to nothing."""
    from actorllm.reasoning import get_reasoning_parser

    value = value or {}
    parser = parser or value.get("reasoning_parser") or None
    start = value.get("reasoning_start_str") or ""
    end = value.get("reasoning_end_str") or ""
    cls = None if parser is None else get_reasoning_parser(parser)
    if cls is not None and cls.budget_markers:
        start = start or cls.start_marker or ""
        end = end or cls.end_marker or ""
    if not start or not end:
        return None
    start_ids = tuple(tokenizer.encode(start, add_special_tokens=False))
    end_ids = tuple(tokenizer.encode(end, add_special_tokens=False))
    if not start_ids or not end_ids:
        raise EngineConfigError(FIELD, f"the strings {start!r} / {end!r} tokenize to nothing.")
    return ThinkingMarkers(start=start_ids, end=end_ids)
