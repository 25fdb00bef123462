"""The token counts a response reports (``usage``)."""

from __future__ import annotations

import msgspec


class PromptTokensDetails(msgspec.Struct, kw_only=True):
    cached_tokens: int = 0
    # Prompt tokens computed and written to the prefix cache (vLLM's).
    created_cache_tokens: int = 0


class CompletionTokensDetails(msgspec.Struct, kw_only=True):
    # Output tokens of the model's reasoning (a server with a reasoning parser; vLLM's).
    reasoning_tokens: int = 0


class UsageInfo(msgspec.Struct, kw_only=True):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    prompt_tokens_details: PromptTokensDetails | None = None
    completion_tokens_details: CompletionTokensDetails | None = None
