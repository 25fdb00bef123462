"""A chat request's ``kv_transfer_params``: what this server does with vLLM's field.

In vLLM's disaggregated serving a router forwards the prefill stage's prompt token ids to
the decode stage as ``kv_transfer_params["prompt_token_ids"]``, so the decode stage skips
templating and tokenization; the other keys drive a KV connector (``do_remote_prefill``,
``remote_block_ids``, ...). This server honours the ids as vLLM 0.32 does (the prompt is
those ids, used verbatim; with ``echo``, or messages with ``prompt_embeds`` parts, the
messages are rendered instead, as vLLM renders them) and refuses every other key by name:
it has no KV connector that moves a prefill between servers.

    >>> reused_prompt_ids({"prompt_token_ids": [1, 2]}, echo=False, has_embeds=False,
    ...                   vocab_size=10)
    [1, 2]
    >>> reused_prompt_ids(None, echo=False, has_embeds=False, vocab_size=10) is None
    True
"""

from __future__ import annotations

from typing import Any

from actorllm.entrypoints.openai.errors import bad_request
from actorllm.entrypoints.openai.preprocess import check_vocabulary

FIELD = "kv_transfer_params"
IDS = "prompt_token_ids"


def reused_prompt_ids(
    params: dict[str, Any] | None, *, echo: bool, has_embeds: bool, vocab_size: int
) -> list[int] | None:
    """The forwarded prompt ids to use as the prompt, or None (render the messages).
    Raises a 400 naming the field for a key other than ``prompt_token_ids`` and for ids
    that are not a non-empty list of in-vocabulary token ids."""
    if not params:
        return None
    for key in params:
        if key != IDS:
            raise bad_request(
                f"`{FIELD}['{key}']` is not supported: it drives a KV connector for "
                "disaggregated prefill, which this server does not have (only "
                f"`{FIELD}['{IDS}']`, the prefill's prompt ids, is used).",
                FIELD,
            )
    ids = params.get(IDS)
    if ids is None:
        return None
    # (bool is an int subclass: true and false are not token ids)
    if not isinstance(ids, list) or not ids or any(type(t) is not int or t < 0 for t in ids):
        raise bad_request(
            f"`{FIELD}['{IDS}']` must be a non-empty list of non-negative integers.",
            f"{FIELD}.{IDS}",
        )
    check_vocabulary(ids, vocab_size, f"{FIELD}.{IDS}")
    return None if echo or has_embeds else ids
