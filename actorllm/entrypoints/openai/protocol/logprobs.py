"""Logprobs as responses carry them: OpenAI's completion and chat shapes, and vLLM's
``prompt_logprobs`` (``logprobs.py`` fills them in)."""

from __future__ import annotations

import msgspec


class LogprobEntry(msgspec.Struct, kw_only=True):
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


# vLLM's prompt_logprobs: per prompt position {token id: entry}; the first position is null.
PromptLogprobsOut = list[dict[str, LogprobEntry] | None]


class CompletionLogProbs(msgspec.Struct, kw_only=True):
    text_offset: list[int] = msgspec.field(default_factory=list)
    token_logprobs: list[float | None] = msgspec.field(default_factory=list)
    tokens: list[str] = msgspec.field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = msgspec.field(default_factory=list)


class ChatTopLogprob(msgspec.Struct, kw_only=True):
    token: str
    logprob: float
    bytes: list[int] | None = None


class ChatTokenLogprob(ChatTopLogprob, kw_only=True):
    top_logprobs: list[ChatTopLogprob] = msgspec.field(default_factory=list)


class ChatLogProbs(msgspec.Struct, kw_only=True):
    content: list[ChatTokenLogprob] | None = None
