"""``return_token_offsets`` on the render routes: each rendered token's ``(start, end)``
character span in the text it was tokenized from (the completion's prompt; a chat's
templated prompt), vLLM's ``token_offsets``.

The text is tokenized again asking for offsets, and the spans kept are those of the ids
the render answers: all of them, or after ``truncate_prompt_tokens`` the kept ones (the
last, or with ``truncation_side="right"`` the first). Special tokens have ``(0, 0)``, as
the tokenizer gives them. None where offsets cannot be had, as vLLM's: a tokenizer without
offsets (not a fast one), a prompt given as token ids, or ids the text does not tokenize
to (a prompt reused from ``kv_transfer_params``, ``prompt_embeds`` parts).
"""

from __future__ import annotations

from typing import Any

Span = tuple[int, int]


def token_offsets(
    tokenizer: Any,
    text: str | None,
    token_ids: list[int],
    *,
    add_special_tokens: bool,
    truncation_side: str | None,
) -> list[Span] | None:
    if not text:
        return None
    try:
        encoded = tokenizer(
            text, add_special_tokens=add_special_tokens, return_offsets_mapping=True
        )
    except (NotImplementedError, TypeError):  # python tokenizers have no offsets
        return None
    if "offset_mapping" not in encoded:
        return None
    ids = [int(t) for t in encoded["input_ids"]]
    spans = encoded["offset_mapping"]
    n = len(token_ids)
    kept = slice(0, n) if truncation_side == "right" else slice(len(ids) - n, len(ids))
    if n > len(ids) or ids[kept] != list(token_ids):
        return None
    return [(int(s), int(e)) for s, e in spans[kept]]
