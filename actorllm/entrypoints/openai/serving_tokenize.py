"""POST /tokenize and /detokenize (vLLM's extensions): the served model's tokenizer."""

from __future__ import annotations

from typing import Any

from actorllm.entrypoints.openai.errors import bad_request
from actorllm.entrypoints.openai.protocol import (
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeRequest,
    TokenizeResponse,
)
from actorllm.entrypoints.openai.sampling import check_model
from actorllm.entrypoints.openai.serving_chat import messages_for_template
from actorllm.entrypoints.openai.serving_common import ServingContext


def _ids(encoded: Any) -> list[int]:
    """Token ids from what a tokenizer returns (a list, or a BatchEncoding in transformers 5)."""
    if isinstance(encoded, list):
        return [int(t) for t in encoded]
    ids = encoded["input_ids"]
    if ids and isinstance(ids[0], list):
        ids = ids[0]
    return [int(t) for t in ids]


def tokenize(ctx: ServingContext, req: TokenizeRequest) -> TokenizeResponse:
    """Exactly one of ``prompt`` / ``messages``; raises APIError(400/404) otherwise."""
    engine = ctx.engine
    check_model(req.model, engine.model_name)
    if (req.prompt is None) == (req.messages is None):
        raise bad_request("Give exactly one of `prompt` and `messages`.", "prompt")
    tok = engine.tokenizer
    if req.messages is not None:
        ids = _ids(
            tok.apply_chat_template(
                messages_for_template(req.messages),
                tokenize=True,
                add_generation_prompt=req.add_generation_prompt,
            )
        )
    else:
        assert req.prompt is not None
        ids = _ids(tok.encode(req.prompt, add_special_tokens=req.add_special_tokens))
    return TokenizeResponse(count=len(ids), max_model_len=engine.max_model_len, tokens=ids)


def detokenize(ctx: ServingContext, req: DetokenizeRequest) -> DetokenizeResponse:
    engine = ctx.engine
    check_model(req.model, engine.model_name)
    vocab = len(engine.tokenizer)
    bad = [t for t in req.tokens if t >= vocab]
    if bad:
        raise bad_request(f"token ids {bad[:5]} are out of vocabulary (size {vocab}).", "tokens")
    return DetokenizeResponse(prompt=str(engine.tokenizer.decode(req.tokens)))
