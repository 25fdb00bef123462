"""A chat's ``prompt_embeds`` content parts (vLLM 0.32, ``--enable-prompt-embeds``): embeddings
spliced into the rendered chat template where each part stands.

Each part renders as one placeholder (``<prompt_embeds>``) in its message's text; the
template's output is cut at the placeholders, each piece tokenized on its own (as vLLM's
special placeholder token splits it), and each part's rows take its place. The engine gets a
mixed prompt: the token ids with a mask of the positions read from the rows
(``PromptEmbeds.is_token``). Every error is a 400 with vLLM's words, naming
``prompt_embeds`` (a part) or ``messages`` (the text around it); the splice itself is
``engine/api/chat_embeds.py``'s, shared with ``LLM.chat``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from actorllm.core.prompt_embeds import PromptEmbeds
from actorllm.engine.api.chat_embeds import MISSING_DATA, RESERVED, splice_rendered_chat
from actorllm.engine.api.prompt_embeds import CHAT_PLACEHOLDER, ENABLE_HINT, decode_prompt_embeds
from actorllm.entrypoints.openai.errors import bad_request
from actorllm.entrypoints.openai.preprocess import Prompt, encode
from actorllm.entrypoints.openai.protocol.chat_request import (
    ChatMessage,
    PromptEmbedsContentPart,
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
    mixed = splice_rendered_chat(
        text, embeds, lambda piece, special: encode(tokenizer, piece, add_special_tokens=special),
        add_special_tokens=add_special_tokens,
    )  # fmt: skip
    return Prompt(text=text, token_ids=mixed.placeholder_ids(), embeds=mixed)
