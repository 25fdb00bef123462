"""What bounds a scored pair, with vLLM 0.32's rules and words (``/score``, ``/rerank``):

* ``max_tokens_per_query`` / ``max_tokens_per_doc``: each query / document is cut to its
  first N content tokens before pairing (0: no cut); a negative N, or one not below the
  context length, is refused by name.
* The context length: a pair (cross-encoder) or a text (bi-encoder) longer than the
  model's context is refused, unless ``truncate_prompt_tokens`` cuts it.
"""

from __future__ import annotations

from typing import Any

from actorllm.core.errors import InvalidRequestError, RequestTooLongError


def check_token_limit(value: int, name: str, max_model_len: int) -> None:
    """vLLM's ``_validate_token_limit`` (its messages; a 400 naming ``name``)."""
    if value < 0:
        raise InvalidRequestError(f"{name} must be a non-negative integer", param=name)
    if value >= max_model_len:
        raise InvalidRequestError(
            f"{name} ({value}) must be less than max_model_len ({max_model_len}).", param=name
        )


def truncate_text(text: str, tokenizer: Any, max_tokens: int) -> str:
    """``text`` cut at the character where its first ``max_tokens`` content tokens end
    (0: unchanged). The cut is taken from the offsets, not by decoding the kept ids, so
    the text keeps its own spelling (vLLM's ``truncate_text_to_tokens``)."""
    if max_tokens <= 0:
        return text
    while text:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        offsets = enc["offset_mapping"]
        if len(enc["input_ids"]) <= max_tokens:
            break
        # where the last kept token ends, or the next begins if that is earlier (a
        # byte-level token may overlap the next); cut again if the shorter text still
        # tokenizes longer
        end = min(offsets[max_tokens - 1][1], offsets[max_tokens][0])
        text = text[: min(end, len(text) - 1)]
    return text


def check_length(num_tokens: int, max_model_len: int, param: str) -> None:
    """vLLM's renderer check for a scored input (``_token_len_check``)."""
    if num_tokens > max_model_len:
        raise RequestTooLongError(
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"prompt contains {num_tokens} input tokens, which exceeds this limit even "
            "without any output tokens. Please reduce the length of the input prompt.",
            param=param,
        )
