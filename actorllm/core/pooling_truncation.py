"""A pooling request's ``truncate_prompt_tokens`` checked against the context, as vLLM's
``TokenizeParams`` does: a value above what the model takes is the client's mistake, a 400
naming the field, even when the prompt is short enough not to be cut.

    >>> check_pooling_truncation(256, 256); check_pooling_truncation(-1, 256)
    >>> try:
    ...     check_pooling_truncation(257, 256)
    ... except ValueError as exc:
    ...     print(exc.param, str(exc).split(".")[0])
    truncate_prompt_tokens truncate_prompt_tokens=257 cannot be greater than max_model_len=256
"""

from __future__ import annotations

from actorllm.core.errors import InvalidRequestError


def check_pooling_truncation(truncate_prompt_tokens: int | None, max_model_len: int) -> None:
    """Refuse a pooling truncation longer than the context (a pooling request generates
    nothing, so the whole context is its input)."""
    k = truncate_prompt_tokens
    if k is not None and k > max_model_len:
        raise InvalidRequestError(
            f"truncate_prompt_tokens={k} cannot be greater than max_model_len={max_model_len}. "
            "Please request a smaller truncation size.",
            param="truncate_prompt_tokens",
        )
