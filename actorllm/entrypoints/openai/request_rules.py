"""vLLM's checks that look at the raw body before its fields are typed, with vLLM's messages
(its pydantic ``model_validator(mode="before")`` rules and ``SamplingParams`` conversions),
so a client matching on vLLM's error text sees the same words here.

    >>> check_raw_body({"prompt": "hi", "logit_bias": {"a": 1}}, CompletionRequest)
    Traceback (most recent call last):
    ...
    actorllm.entrypoints.openai.errors.APIError: logit_bias contains key(s) that cannot ...
"""

from __future__ import annotations

import re
from typing import Any

from actorllm.entrypoints.openai.errors import bad_request
from actorllm.entrypoints.openai.protocol.chat_request import ChatCompletionRequest
from actorllm.entrypoints.openai.protocol.completion import CompletionRequest
from actorllm.entrypoints.openai.protocol.pooling import PoolingInputRequest
from actorllm.entrypoints.openai.removed_pooling_fields import reject_removed_pooling_fields

# What the protocol's TokenIdKey accepts: a token id written as a JSON object key.
_TOKEN_KEY = re.compile(r"^[0-9]{1,10}$")


def check_raw_body(raw: dict[str, Any], kind: type) -> None:
    """400 for what vLLM refuses before typing the fields of a ``kind`` request (each
    route's own rules: the completion prompt, chat's tools, the removed pooling fields)."""
    # vLLM (completion/protocol.py, chat_completion/protocol.py: validate_stream_options):
    # a truthy stream_options without stream is a client mistake, not something to ignore.
    if raw.get("stream_options") and not raw.get("stream"):
        raise bad_request(
            "Stream options can only be defined when `stream=True`.", "stream_options"
        )
    if issubclass(kind, CompletionRequest):
        _check_prompt(raw)
    if issubclass(kind, PoolingInputRequest):  # /v1/embeddings, /pooling, /classify
        reject_removed_pooling_fields(raw)
    # vLLM (chat_completion/protocol.py: check_tool_usage), as OpenAI: an empty tools list
    # is a mistake (a client that built no tools), not "no tools"; omit the field instead.
    if issubclass(kind, ChatCompletionRequest) and raw.get("tools") == []:
        raise bad_request(
            "`tools` must not be an empty array. "
            "Either provide at least one tool or omit the field entirely.",
            "tools",
        )
    bias = raw.get("logit_bias")
    if isinstance(bias, dict):
        _check_logit_bias_keys(bias)


def _check_prompt(raw: dict[str, Any]) -> None:
    # vLLM's validate_prompt_and_prompt_embeds: an absent or "" prompt with no (or empty)
    # prompt_embeds. Other empty forms ([], [[]]) are refused by the prompt's own rules.
    prompt, embeds = raw.get("prompt"), raw.get("prompt_embeds")
    if prompt in (None, "") and embeds in (None, []):
        raise bad_request(
            "Either prompt or prompt_embeds must be provided and non-empty.", "prompt"
        )
    if prompt == "":
        del raw["prompt"]  # beside prompt_embeds "" is no prompt (vLLM's clients send it)


def _check_logit_bias_keys(bias: dict[str, Any]) -> None:
    """Name the keys that are no token id, in vLLM's words (sampling_params.py)."""
    not_int: list[str] = []
    out_of_range: list[int] = []
    for key in bias:
        if _TOKEN_KEY.match(key):
            continue
        try:
            out_of_range.append(int(key))
        except ValueError:
            not_int.append(key)
    if not_int:
        raise bad_request(
            "logit_bias contains key(s) that cannot be converted to integer token IDs: "
            f"{not_int!r}",
            "logit_bias",
        )
    if out_of_range:
        raise bad_request(
            f"token_id(s) {out_of_range} in logit_bias contain out-of-vocab token ids.",
            "logit_bias",
        )
