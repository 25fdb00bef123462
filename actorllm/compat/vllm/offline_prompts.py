"""The prompt forms the synchronous facades accept, as vLLM's ``LLM.generate`` does.

A prompt is a string, ``{"prompt": str}`` (a :class:`TextPrompt`),
``{"prompt_token_ids": [int, ...]}`` (a :class:`TokensPrompt`; both keys together: the ids
are used and the text is reported back) or ``{"prompt_embeds": tensor}`` (vLLM's
``EmbedsPrompt``, with ``--enable-prompt-embeds``); any of them may carry ``cache_salt``.
``generate`` takes one prompt or a list mixing those forms. Anything else (a bare list of
ints, a key this engine does not support such as ``multi_modal_data``) is refused with an
``InvalidRequestError`` naming ``prompt``, before any request starts.

    >>> as_prompt_list(["a", {"prompt_token_ids": [1, 2]}])
    ['a', {'prompt_token_ids': [1, 2]}]
    >>> as_prompt_list("one")
    ['one']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NotRequired, TypedDict, TypeVar

from actorllm.core.errors import InvalidRequestError


class TextPrompt(TypedDict):
    """vLLM's text prompt: ``{"prompt": str}`` (vLLM's other keys, such as
    ``multi_modal_data``, are refused)."""

    prompt: str


class TokensPrompt(TypedDict):
    """vLLM's tokenized prompt: ``{"prompt_token_ids": [...]}``, with the text they came
    from in ``prompt`` when known (reported back as the output's prompt)."""

    prompt_token_ids: list[int]
    prompt: NotRequired[str]


class EmbedsPrompt(TypedDict):
    """vLLM's prompt of token embeddings: ``{"prompt_embeds": tensor}`` (``[num_tokens,
    hidden_size]``), for an engine started with ``enable_prompt_embeds=True``."""

    prompt_embeds: Any
    prompt: NotRequired[str]


Prompt = str | Mapping[str, Any]  # vLLM's PromptType and SingletonPrompt (decoder-only)
SUPPORTED_KEYS = frozenset(
    {"prompt", "prompt_token_ids", "prompt_embeds", "prompt_is_token_ids", "cache_salt"}
)

T = TypeVar("T")


def check_prompt(prompt: object) -> Prompt:
    """``prompt`` itself when it is a supported form; raises ``InvalidRequestError``."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Mapping):
        unknown = sorted(str(k) for k in prompt if k not in SUPPORTED_KEYS)
        if unknown:
            raise InvalidRequestError(
                f"prompt keys {unknown} are not supported (only 'prompt', 'prompt_token_ids', "
                "'prompt_embeds', 'prompt_is_token_ids' and 'cache_salt').",
                param="prompt",
            )
        if (
            "prompt_token_ids" not in prompt
            and "prompt_embeds" not in prompt
            and not isinstance(prompt.get("prompt"), str)
        ):
            raise InvalidRequestError(
                "a prompt dict needs 'prompt' (a string), 'prompt_token_ids' or 'prompt_embeds'.",
                param="prompt",
            )
        return prompt
    if isinstance(prompt, int):
        raise InvalidRequestError(
            "a prompt must be a string or a dict; pass token ids as {'prompt_token_ids': [...]}.",
            param="prompt",
        )
    raise InvalidRequestError(
        f"a prompt must be a string or a dict, got {type(prompt).__name__}.", param="prompt"
    )


def as_prompt_list(prompts: Prompt | Sequence[Prompt]) -> list[Prompt]:
    """One prompt or a sequence of them, as a checked list."""
    if isinstance(prompts, str | Mapping):
        return [check_prompt(prompts)]
    if not isinstance(prompts, Sequence):
        raise InvalidRequestError(
            f"prompts must be a prompt or a list of prompts, got {type(prompts).__name__}.",
            param="prompt",
        )
    return [check_prompt(p) for p in prompts]


def per_prompt(value: T | Sequence[T] | None, count: int, default: T, name: str) -> list[T]:
    """A value given once for all prompts, or once per prompt, as a list of ``count``.

    ``value`` is a single item when it is not a list or tuple (a ``SamplingParams`` is a
    single item). A list of the wrong length raises ``ValueError`` naming ``name``.
    """
    if value is None:
        return [default] * count
    if not isinstance(value, list | tuple):
        return [value] * count  # type: ignore[list-item]
    if len(value) != count:
        raise ValueError(f"got {len(value)} {name} for {count} prompts.")
    return list(value)
