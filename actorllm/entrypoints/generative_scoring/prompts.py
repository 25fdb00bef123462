"""One token prompt per item: the query's tokens and the item's, in the request's order,
cut to leave the context room for the one token each prompt generates."""

from __future__ import annotations

from typing import Any

from actorllm.entrypoints.generative_scoring.protocol import GenerativeScoringRequest
from actorllm.entrypoints.openai.errors import bad_request
from actorllm.entrypoints.openai.preprocess import check_vocabulary, encode


def item_prompts(
    req: GenerativeScoringRequest, tokenizer: Any, *, vocab_size: int, max_model_len: int
) -> list[list[int]]:
    """The prompt of each item, in order. Texts are tokenized here: the query with special
    tokens as ``add_special_tokens`` says, items without (no second BOS in the middle).
    Token ids outside the vocabulary are a 400 naming ``query`` or ``items``, an empty
    prompt a 400 (vLLM's engine's words). A prompt longer than ``max_model_len - 1`` keeps
    its first tokens (vLLM's cut)."""
    if isinstance(req.query, str):
        query = encode(tokenizer, req.query, add_special_tokens=req.add_special_tokens)
    else:
        check_vocabulary(req.query, vocab_size, "query")
        query = list(req.query)
    room = max_model_len - 1
    prompts = []
    for item in req.items:
        if isinstance(item, str):
            ids = encode(tokenizer, item, add_special_tokens=False)
        else:
            check_vocabulary(item, vocab_size, "items")
            ids = list(item)
        prompt = ids + query if req.item_first else query + ids
        if not prompt:
            raise bad_request("The decoder prompt cannot be empty", "prompt")
        prompts.append(prompt[:room])
    return prompts


def text_chars(req: GenerativeScoringRequest) -> int:
    """Characters the tokenizer reads for this request (token ids: none)."""
    texts = [req.query, *req.items]
    return sum(len(t) for t in texts if isinstance(t, str))
