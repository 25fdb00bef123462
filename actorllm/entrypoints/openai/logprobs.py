"""Engine logprobs (``{token_id: Logprob}`` per position) in OpenAI's two wire formats.

Completions: parallel lists ``tokens`` / ``token_logprobs`` / ``top_logprobs`` (a dict of
the top ``k`` token strings, plus the sampled one) / ``text_offset``. Chat: one entry per
token with its string, logprob, UTF-8 bytes and a ranked ``top_logprobs`` list.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from actorllm.core.outputs import Logprob
from actorllm.entrypoints.openai.protocol import (
    ChatLogProbs,
    ChatTokenLogprob,
    ChatTopLogprob,
    CompletionLogProbs,
)

# JSON has no -inf: a token the model rules out reports this floor (as vLLM does).
_FLOOR = -9999.0


class TokenText:
    """Token id -> display string: the engine's ``decoded_token`` or the tokenizer's."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer

    def __call__(self, token_id: int, lp: Logprob | None = None) -> str:
        if lp is not None and lp.decoded_token is not None:
            return lp.decoded_token
        return self.decode([token_id])

    def decode(self, token_ids: Sequence[int]) -> str:
        return str(self._tokenizer.decode(list(token_ids)))


def _top(entries: dict[int, Logprob], k: int) -> list[tuple[int, Logprob]]:
    ranked = sorted(entries.items(), key=lambda kv: (kv[1].rank or 0, -kv[1].logprob))
    if all(lp.rank is None for _, lp in ranked):
        ranked = sorted(entries.items(), key=lambda kv: -kv[1].logprob)
    return ranked[:k]


def completion_logprobs(
    token_ids: Sequence[int],
    logprobs: Sequence[dict[int, Logprob] | None],
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
    logprobs: Sequence[dict[int, Logprob]],
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
