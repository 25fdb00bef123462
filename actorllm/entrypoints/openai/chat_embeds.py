"""A chat's ``prompt_embeds`` content parts (vLLM 0.32, ``--enable-prompt-embeds``): embeddings
spliced into the rendered chat template where each part stands.

Each part renders as one placeholder (``<prompt_embeds>``) in its message's text; the
template's output is cut at the placeholders, each piece tokenized on its own (as vLLM's
special placeholder token splits it), and each part's rows take its place. The engine gets a
mixed prompt: the token ids with a mask of the positions read from the rows
(``PromptEmbeds.is_token``). Every error is a 400 with vLLM's words, naming
``prompt_embeds`` (a part) or ``messages`` (the text around it).

    >>> cut_at_placeholders("<a><prompt_embeds>b<prompt_embeds>", 2)
    ['<a>', 'b', '']
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from actorllm.core.prompt_embeds import PromptEmbeds
from actorllm.engine.api.prompt_embeds import (
    CHAT_PLACEHOLDER,
    ENABLE_HINT,
    decode_prompt_embeds,
    splice_prompt_embeds,
)
from actorllm.entrypoints.openai.errors import bad_request
from actorllm.entrypoints.openai.preprocess import Prompt, encode
from actorllm.entrypoints.openai.protocol.chat_request import (
    ChatMessage,
    PromptEmbedsContentPart,
)

MISSING_DATA = (
    "prompt_embeds content part requires a non-empty `data` field with base64-encoded tensor bytes."
)
RESERVED = (
    f"Text content may not contain the reserved placeholder {CHAT_PLACEHOLDER!r}. This "
    "placeholder is used internally to mark `prompt_embeds` splice positions in the "
    "tokenized prompt."
)


def embeds_parts(
    messages: Sequence[ChatMessage], spec: tuple[int, Any] | None
) -> list[PromptEmbedsContentPart]:
    """The messages' ``prompt_embeds`` parts, in order, after the checks that need no
    decoding: the flag is on, each has data, and no text holds the placeholder."""
    parts: list[PromptEmbedsContentPart] = []
    for msg in messages:
        content = msg.content
        if not isinstance(content, list):
            if spec is not None and content is not None and CHAT_PLACEHOLDER in content:
                raise bad_request(RESERVED, "messages")
            continue
        for part in content:
            if isinstance(part, PromptEmbedsContentPart):
                if spec is None:
                    raise bad_request(ENABLE_HINT, "prompt_embeds")
                if not part.data:
                    raise bad_request(MISSING_DATA, "prompt_embeds")
                parts.append(part)
            elif spec is not None and CHAT_PLACEHOLDER in part.text:
                raise bad_request(RESERVED, "messages")
    return parts


def cut_at_placeholders(text: str, expected: int) -> list[str]:
    """The rendered template split at its placeholders: ``expected + 1`` pieces, or a 400
    when the template dropped or repeated a part."""
    pieces = text.split(CHAT_PLACEHOLDER)
    if len(pieces) != expected + 1:
        raise bad_request(
            f"Expected {expected} prompt_embeds placeholder tokens in the rendered prompt, "
            f"found {len(pieces) - 1}.",
            "messages",
        )
    return pieces


def spliced_prompt(
    text: str,
    parts: list[PromptEmbedsContentPart],
    spec: tuple[int, Any] | None,
    tokenizer: Any,
    *,
    add_special_tokens: bool,
) -> Prompt:
    """The rendered chat ``text`` with each part's rows in place of its placeholder.
    ``add_special_tokens`` applies to the first piece, where the tokenizer would put them."""
    embeds: list[PromptEmbeds] = []
    for part in parts:
        assert part.data is not None  # embeds_parts checked it
        embeds.append(decode_prompt_embeds(part.data, spec))
    pieces = cut_at_placeholders(text, len(parts))
    segments = [
        encode(tokenizer, piece, add_special_tokens=add_special_tokens and i == 0)
        if piece or (add_special_tokens and i == 0)
        else []
        for i, piece in enumerate(pieces)
    ]
    mixed = splice_prompt_embeds(segments, embeds)
    return Prompt(text=text, token_ids=mixed.placeholder_ids(), embeds=mixed)
