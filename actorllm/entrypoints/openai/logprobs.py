"""Engine logprobs (``{token_id: Logprob}`` per position) in OpenAI's two wire formats.

Completions: parallel lists ``tokens`` / ``token_logprobs`` / ``top_logprobs`` (a dict of
the top ``k`` token strings, plus the sampled one) / ``text_offset``. Chat: one entry per
token with its string, logprob, UTF-8 bytes and a ranked ``top_logprobs`` list.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from actorllm.core.outputs import Logprob, PromptLogprobs
from actorllm.entrypoints.openai.protocol.logprobs import (
    ChatLogProbs,
    ChatTokenLogprob,
    ChatTopLogprob,
    CompletionLogProbs,
    LogprobEntry,
)

# JSON has no -inf: a token the model rules out reports this floor (as vLLM does).
_FLOOR = -9999.0


class TokenText:
    """Token id -> display string: the engine's ``decoded_token`` or the tokenizer's, or
    ``"token_id:N"`` when the request set ``return_tokens_as_token_ids`` (vLLM's form, for
    clients that must tell apart tokens that decode to the same text)."""

    def __init__(self, tokenizer: Any, *, as_ids: bool = False) -> None:
        self._tokenizer = tokenizer
        self.as_ids = as_ids

    def __call__(self, token_id: int, lp: Logprob | None = None) -> str:
        if self.as_ids:
            return f"token_id:{token_id}"
        if lp is not None and lp.decoded_token is not None:
            return lp.decoded_token
        return self.decode([token_id])

    def decode(self, token_ids: Sequence[int]) -> str:
        return str(self._tokenizer.decode(list(token_ids)))


def _top(entries: dict[int, Logprob], k: int) -> list[tuple[int, Logprob]]:
    ranked = sorted(entries.items(), key=lambda kv: (kv[1].rank or 0, -kv[1].logprob))
    if all(lp.rank is None for _, lp in ranked):
        ranked = sorted(entries.items(), key=lambda kv: -kv[1].logprob)
    return ranked if k < 0 else ranked[:k]  # -1: every entry (the whole vocabulary)


def completion_logprobs(
    token_ids: Sequence[int],
    logprobs: Iterable[dict[int, Logprob] | None],
    k: int,
    text: TokenText,
    offset: int,
) -> tuple[CompletionLogProbs, int]:
    """Format ``logprobs[i]`` for ``token_ids[i]``; returns the block and the next text offset.

    A ``None`` position (the first prompt token when echoing) has no logprob.
    """
    out = CompletionLogProbs()
    for tid, entries in zip(token_ids, logprobs, strict=False):
        lp = entries.get(tid) if entries else None
        token = text(tid, lp)
        out.tokens.append(token)
        out.token_logprobs.append(None if lp is None else max(lp.logprob, _FLOOR))
        out.text_offset.append(offset)
        offset += len(token)
        if entries is None:
            out.top_logprobs.append(None)
            continue
        top = {text(t, e): max(e.logprob, _FLOOR) for t, e in _top(entries, k)}
        if lp is not None:
            top.setdefault(token, max(lp.logprob, _FLOOR))
        out.top_logprobs.append(top)
    return out, offset


def chat_logprobs(
    token_ids: Sequence[int],
    logprobs: Iterable[dict[int, Logprob]],
    k: int,
    text: TokenText,
) -> ChatLogProbs:
    content: list[ChatTokenLogprob] = []
    for tid, entries in zip(token_ids, logprobs, strict=False):
        lp = entries.get(tid)
        token = text(tid, lp)
        content.append(
            ChatTokenLogprob(
                token=token,
                logprob=_FLOOR if lp is None else max(lp.logprob, _FLOOR),
                bytes=list(token.encode("utf-8")),
                top_logprobs=[
                    ChatTopLogprob(
                        token=(s := text(t, e)),
                        logprob=max(e.logprob, _FLOOR),
                        bytes=list(s.encode("utf-8")),
                    )
                    for t, e in _top(entries, k)
                ],
            )
        )
    return ChatLogProbs(content=content)


def prompt_logprobs(
    entries: PromptLogprobs | None, text: TokenText
) -> list[dict[str, LogprobEntry] | None] | None:
    """vLLM's ``prompt_logprobs``: per prompt position ``{token id: logprob, rank, text}``
    (the first position has none)."""
    if entries is None:
        return None
    return [
        None
        if position is None
        else {
            str(tid): LogprobEntry(
                logprob=max(lp.logprob, _FLOOR), rank=lp.rank, decoded_token=text(tid, lp)
            )
            for tid, lp in position.items()
        }
        for position in entries
    ]
