"""The one chat-template renderer: the HTTP server (chat completions, ``/tokenize``),
``LLM.chat`` and ``AsyncEngine.chat`` all turn a conversation into prompt text here, so the
same messages always make the same prompt.

Plain synchronous code over a Hugging Face tokenizer. Every error a caller can cause is an
:class:`InvalidRequestError` (HTTP 400) naming the field at fault.

    text = render_chat(tokenizer, [{"role": "user", "content": "Hi"}])
"""

from __future__ import annotations

import contextlib
import inspect
import json
from collections.abc import Mapping, Sequence
from typing import Any

from actorllm.core.errors import InvalidRequestError


def messages_for_template(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Messages as chat templates expect them: an assistant's tool call arguments as
    objects (templates ``tojson`` them), not the JSON strings OpenAI sends."""
    out = []
    for m in messages:
        msg = dict(m)
        calls = msg.get("tool_calls")
        if calls:
            msg["tool_calls"] = [_call_for_template(c) for c in calls]
        out.append(msg)
    return out


def _call_for_template(call: Mapping[str, Any]) -> dict[str, Any]:
    call = dict(call)
    fn = dict(call.get("function") or {})
    args = fn.get("arguments")
    if isinstance(args, str):
        with contextlib.suppress(ValueError):  # a template may still render the string
            fn["arguments"] = json.loads(args)
    call["function"] = fn
    return call


def reserved_template_kwargs(tokenizer: Any) -> frozenset[str]:
    """Names ``chat_template_kwargs`` may not use: ``apply_chat_template``'s own parameters
    and the variables it sets itself (they would clash, or change what it returns)."""
    params = inspect.signature(type(tokenizer).apply_chat_template).parameters
    return frozenset(params) - {"self", "kwargs"} | {"messages"}


def renders_tools(template: Any) -> bool:
    """Whether a chat template reads the ``tools`` variable (a model shown no tools can
    still be forced to call one by a grammar: ``tool_choice`` required or named)."""
    return template is not None and "tools" in str(template)


def render_chat_options(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    *,
    add_generation_prompt: bool = True,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> str:
    """:func:`render_chat` with ``LLM.chat``'s ``continue_final_message``, ``chat_template``
    and ``documents`` passed inside ``chat_template_kwargs`` (taken out and given by name)."""
    options = dict(chat_template_kwargs or {})
    return render_chat(
        tokenizer,
        messages,
        add_generation_prompt=add_generation_prompt,
        continue_final_message=bool(options.pop("continue_final_message", False)),
        chat_template=options.pop("chat_template", None),
        documents=options.pop("documents", None),
        chat_template_kwargs=options,
        tools=tools,
    )


def render_chat(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    *,
    add_generation_prompt: bool = True,
    continue_final_message: bool = False,
    chat_template: str | None = None,
    documents: list[dict[str, str]] | None = None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> str:
    """The prompt text the chat template (``chat_template``, else the tokenizer's) makes of
    ``messages``. ``tools`` (OpenAI function tools) and ``documents`` go to the template,
    which must render tools; ``chat_template_kwargs`` are extra template variables."""
    if not messages:
        raise InvalidRequestError("messages must not be empty.", param="messages")
    if any(
        isinstance(part, Mapping) and part.get("type") == "prompt_embeds"
        for m in messages
        if isinstance(m.get("content"), list)
        for part in m["content"]
    ):
        raise InvalidRequestError(
            "prompt_embeds content parts are taken by /v1/chat/completions and the engines' "
            "chat (LLM.chat, AsyncEngine.chat), not here.",
            param="messages",
        )
    if continue_final_message and add_generation_prompt:
        raise InvalidRequestError(
            "Cannot set both `continue_final_message` and `add_generation_prompt` to true.",
            param="continue_final_message",
        )
    template = chat_template or getattr(tokenizer, "chat_template", None)
    if template is None:
        raise InvalidRequestError(
            "This model's tokenizer has no chat template; use /v1/completions instead.",
            param="messages",
        )
    options: dict[str, Any] = dict(chat_template_kwargs or {})
    clash = sorted(set(options) & reserved_template_kwargs(tokenizer))
    if clash:
        raise InvalidRequestError(
            f"chat_template_kwargs may not set {', '.join(clash)} (request fields or "
            "tokenizer options, not template variables).",
            param="chat_template_kwargs",
        )
    if documents is not None:
        options["documents"] = documents
    if tools:
        if not renders_tools(template):
            raise InvalidRequestError(
                "This model's chat template does not render tools; it cannot be offered tools.",
                param="tools",
            )
        options["tools"] = [dict(t) for t in tools]
    if chat_template is not None:
        options["chat_template"] = chat_template
    try:
        text = tokenizer.apply_chat_template(
            messages_for_template(messages),
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message,
            **options,
        )
    except Exception as exc:  # jinja errors and template rules are the caller's to fix
        raise InvalidRequestError(
            f"Cannot apply the chat template: {exc}", param="messages"
        ) from None
    return str(text)
