"""vLLM's ``chat_template_content_format``: how ``LLM.chat`` hands message content to the
chat template.

* ``"auto"`` (the default): as given, a string or a list of OpenAI content parts, as the
  server's ``--chat-template-content-format auto`` (vLLM's "auto" instead guesses from the
  template which of the two forms below it reads).
* ``"string"``: a list of text parts becomes one string, the texts joined by newlines,
  as ``/v1/chat/completions`` renders parts (``entrypoints/openai/preprocess.py``).
* ``"openai"``: a string becomes ``[{"type": "text", "text": ...}]``.

    >>> with_content_format([{"role": "user", "content": [{"type": "text", "text": "a"},
    ...     {"type": "text", "text": "b"}]}], "string")
    [{'role': 'user', 'content': 'a\\nb'}]
    >>> with_content_format([{"role": "user", "content": "hi"}], "openai")
    [{'role': 'user', 'content': [{'type': 'text', 'text': 'hi'}]}]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

CONTENT_FORMATS = ("auto", "string", "openai")


def check_content_format(content_format: object) -> str:
    """``content_format`` itself when it is one of :data:`CONTENT_FORMATS`; else a
    ``ValueError`` naming the option."""
    if content_format not in CONTENT_FORMATS:
        raise ValueError(
            f"chat_template_content_format must be one of {', '.join(CONTENT_FORMATS)}; "
            f"got {content_format!r}."
        )
    return str(content_format)


def with_content_format(
    messages: Sequence[Mapping[str, Any]], content_format: str
) -> list[Mapping[str, Any]]:
    """``messages`` with their content in ``content_format`` (copies; ``"auto"``: as they
    are). Content that is neither a string nor text parts (a ``prompt_embeds`` part) is
    left as it is: the engine renders those parts itself."""
    if content_format == "auto":
        return list(messages)
    return [_message(m, content_format) for m in messages]


def _message(message: Mapping[str, Any], content_format: str) -> Mapping[str, Any]:
    content: Any = message.get("content")
    if content_format == "openai" and isinstance(content, str):
        return {**message, "content": [{"type": "text", "text": content}]}
    if content_format == "string" and _text_parts(content):
        return {**message, "content": "\n".join(part["text"] for part in content)}
    return message


def _text_parts(content: object) -> bool:
    return isinstance(content, list) and all(_is_text_part(part) for part in content)


def _is_text_part(part: object) -> bool:
    return (
        isinstance(part, Mapping)
        and part.get("type") == "text"
        and isinstance(part.get("text"), str)
    )
