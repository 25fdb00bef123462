"""A chat rendered with ``prompt_embeds`` content parts (vLLM 0.32, ``--enable-prompt-embeds``):
the template's text cut at each part's placeholder, the pieces tokenized on their own, and
each part's rows spliced in where it stood. Shared by ``/v1/chat/completions``
(``entrypoints/openai/chat_embeds.py``) and the engines' chat (``LLM.chat``,
``AsyncEngine.chat``: :func:`chat_embeds_prompt`); every error is an
``InvalidRequestError`` in vLLM's words.

    >>> cut_at_placeholders("<a><prompt_embeds>b<prompt_embeds>", 2)
    ['<a>', 'b', '']
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from actorllm.core.chat_template import render_chat_options
from actorllm.core.errors import InvalidRequestError
from actorllm.core.prompt_embeds import PromptEmbeds
from actorllm.engine.api.prompt_embeds import (
    CHAT_PLACEHOLDER,
    ENABLE_HINT,
    decode_prompt_embeds,
    splice_prompt_embeds,
)

MISSING_DATA = (
    "prompt_embeds content part requires a non-empty `data` field with base64-encoded tensor bytes."
)
RESERVED = (
    f"Text content may not contain the reserved placeholder {CHAT_PLACEHOLDER!r}. This "
    "placeholder is used internally to mark `prompt_embeds` splice positions in the "
    "tokenized prompt."
)

# encode(text, add_special_tokens) -> token ids
Encode = Callable[[str, bool], list[int]]


def cut_at_placeholders(text: str, expected: int) -> list[str]:
    """The rendered template split at its placeholders: ``expected + 1`` pieces, or an
    error when the template dropped or repeated a part."""
    pieces = text.split(CHAT_PLACEHOLDER)
    if len(pieces) != expected + 1:
        raise InvalidRequestError(
            f"Expected {expected} prompt_embeds placeholder tokens in the rendered prompt, "
            f"found {len(pieces) - 1}.",
            param="messages",
        )
    return pieces


def splice_rendered_chat(
    text: str, embeds: list[PromptEmbeds], encode: Encode, *, add_special_tokens: bool
) -> PromptEmbeds:
    """The rendered chat ``text`` with ``embeds[i]``'s rows in place of its ``i``-th
    placeholder: a mixed prompt. ``add_special_tokens`` applies to the first piece, where
    the tokenizer would put them."""
    pieces = cut_at_placeholders(text, len(embeds))
    segments = [
        encode(piece, add_special_tokens and i == 0)
        if piece or (add_special_tokens and i == 0)
        else []
        for i, piece in enumerate(pieces)
    ]
    return splice_prompt_embeds(segments, embeds)


def has_embeds_parts(messages: Any, spec: tuple[int, Any] | None) -> bool:
    """Whether a conversation (message mappings) goes through :func:`chat_embeds_prompt`:
    it holds a ``prompt_embeds`` content part, or (``spec``: the flag is on) text with the
    reserved placeholder, which that refuses."""
    if not isinstance(messages, Sequence) or isinstance(messages, str):
        return False
    for msg in messages:
        content = msg.get("content") if isinstance(msg, Mapping) else None
        if isinstance(content, str):
            if spec is not None and CHAT_PLACEHOLDER in content:
                return True
            continue
        for part in content if isinstance(content, list) else ():
            if not isinstance(part, Mapping):
                continue
            if part.get("type") == "prompt_embeds":
                return True
            text = part.get("text")
            if spec is not None and isinstance(text, str) and CHAT_PLACEHOLDER in text:
                return True
    return False


def chat_embeds_prompt(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    spec: tuple[int, Any] | None,
    *,
    add_generation_prompt: bool,
    chat_template_kwargs: Mapping[str, Any] | None,
    tools: Sequence[Mapping[str, Any]] | None,
) -> dict[str, PromptEmbeds]:
    """``LLM.chat`` / ``AsyncEngine.chat`` of a conversation with ``prompt_embeds`` parts
    (``{"type": "prompt_embeds", "data": <base64 of torch.save(tensor)>}``, as vLLM's chat
    parser takes them offline too): the mixed prompt to generate from. Blocks (base64,
    torch.load, the template): run it off the event loop."""
    if spec is None:
        raise InvalidRequestError(ENABLE_HINT, param="prompt_embeds")
    embeds: list[PromptEmbeds] = []
    rendered: list[dict[str, Any]] = []
    for msg in messages:
        content = msg.get("content")
        if isinstance(content, str) and CHAT_PLACEHOLDER in content:
            raise InvalidRequestError(RESERVED, param="messages")
        if not isinstance(content, list):
            rendered.append(dict(msg))
            continue
        texts: list[str] = []
        for part in content:
            kind = part.get("type", "text") if isinstance(part, Mapping) else None
            if kind == "prompt_embeds":
                data = part.get("data")
                if not data:
                    raise InvalidRequestError(MISSING_DATA, param="prompt_embeds")
                embeds.append(decode_prompt_embeds(data, spec))
                texts.append(CHAT_PLACEHOLDER)
                continue
            text = part.get("text") if isinstance(part, Mapping) else part
            if kind != "text" or not isinstance(text, str):
                raise InvalidRequestError(
                    f"content parts beside prompt_embeds must be text, not {kind!r}.",
                    param="messages",
                )
            if CHAT_PLACEHOLDER in text:
                raise InvalidRequestError(RESERVED, param="messages")
            texts.append(text)
        # vLLM's "string" content format, as /v1/chat/completions renders parts.
        rendered.append({**msg, "content": "\n".join(texts)})
    text = render_chat_options(
        tokenizer, rendered, add_generation_prompt=add_generation_prompt,
        chat_template_kwargs=chat_template_kwargs, tools=tools,
    )  # fmt: skip

    def encode(piece: str, special: bool) -> list[int]:
        return list(tokenizer.encode(piece, add_special_tokens=special))

    # The template holds the special tokens it wants (the engines' chat path adds none).
    return {"prompt_embeds": splice_rendered_chat(text, embeds, encode, add_special_tokens=False)}
