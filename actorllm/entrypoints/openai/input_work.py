"""A request's slow input work (chat template, tokenizer) off the event loop.

The serving layer renders a chat request's template and tokenizes a prompt in the
request's own task. For a prompt of a few hundred characters that takes tens of
microseconds, less than a hop to a thread and back; a long one (a RAG context of 100 kB)
takes milliseconds, and while it runs on the loop every stream of the server waits for
its next token. :func:`run_input_work` runs such work on one worker thread instead once
the input reaches :data:`OFF_LOOP_CHARS` characters. The HF tokenizers release the GIL
while they encode, so the loop streams meanwhile; a Jinja template holds the GIL, but the
interpreter's switch interval still gives the loop a turn every few milliseconds.

One thread at a time by default (the serving context's ``input_limiter``, sized by
``--renderer-num-workers``): a 2-core host has no second core to give it, and the
requests keep their order.

    ids = await run_input_work(
        lambda: encode(tok, text, add_special_tokens=True), len(text), ctx.input_limiter
    )
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from actorllm.entrypoints.openai.preprocess import content_text
from actorllm.entrypoints.openai.protocol.chat_request import ChatMessage

T = TypeVar("T")

# Characters of input from which the work leaves the loop: ~2k tokens, ~1 ms of
# tokenizing on one core (short prompts stay inline: the hop costs ~0.1 ms).
OFF_LOOP_CHARS = 8192


async def run_input_work(fn: Callable[[], T], size: int, limiter: anyio.CapacityLimiter) -> T:
    """``fn()``, inline when ``size`` (characters of input) is below
    :data:`OFF_LOOP_CHARS`, else on a worker thread under ``limiter`` (a checkpoint then;
    cancelling the caller abandons the result, not the work)."""
    if size < OFF_LOOP_CHARS:
        return fn()
    return await anyio.to_thread.run_sync(fn, limiter=limiter, abandon_on_cancel=True)


def prompt_chars(prompt: Any) -> int:
    """Characters a completion's ``prompt`` gives the tokenizer (token ids: none)."""
    if isinstance(prompt, str):
        return len(prompt)
    if isinstance(prompt, list):
        return sum(len(p) for p in prompt if isinstance(p, str))
    return 0


def embeds_chars(embeds: str | list[str] | None) -> int:
    """Characters of a completion's base64 ``prompt_embeds`` (decoded, loaded and hashed:
    the same order of work per character as tokenizing)."""
    if embeds is None:
        return 0
    return len(embeds) if isinstance(embeds, str) else sum(len(e) for e in embeds)


def messages_chars(messages: Sequence[ChatMessage]) -> int:
    """Characters of a chat's messages (what the template renders and the tokenizer reads)."""
    return sum(len(content_text(m.content)) for m in messages)
