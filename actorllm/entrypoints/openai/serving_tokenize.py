"""POST /tokenize and /detokenize (vLLM's extensions): the served model's tokenizer."""

from __future__ import annotations

import msgspec

from actorllm.entrypoints.openai.errors import bad_request
from actorllm.entrypoints.openai.lora_models import resolve_model
from actorllm.entrypoints.openai.preprocess import check_vocabulary, encode, render_chat
from actorllm.entrypoints.openai.protocol.tokenize import (
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeRequest,
    TokenizeResponse,
)
from actorllm.entrypoints.openai.serving_common import ServingContext


def tokenize(ctx: ServingContext, req: TokenizeRequest) -> TokenizeResponse:
    """Exactly one of ``prompt`` / ``messages``; raises APIError(400/404) otherwise."""
    engine = ctx.engine
    resolve_model(req.model, engine)  # the base model or an adapter: one tokenizer
    tok = engine.tokenizer
    if isinstance(req.messages, msgspec.UnsetType) == isinstance(req.prompt, msgspec.UnsetType):
        raise bad_request("Give exactly one of `prompt` and `messages`.", "prompt")
    if not isinstance(req.messages, msgspec.UnsetType):
        text = render_chat(
            tok,
            req.messages,
            add_generation_prompt=req.add_generation_prompt,
            continue_final_message=req.continue_final_message,
            documents=req.documents,
            chat_template_kwargs=ctx.defaults.template_kwargs(req.chat_template_kwargs),
            chat_template=ctx.defaults.request_chat_template(req.chat_template),
            tools=msgspec.to_builtins(req.tools) if req.tools else None,
        )
        ids = encode(tok, text, add_special_tokens=bool(req.add_special_tokens))
    else:
        assert isinstance(req.prompt, str)
        special = True if req.add_special_tokens is None else req.add_special_tokens
        ids = encode(tok, req.prompt, add_special_tokens=special)
    strs = list(tok.convert_ids_to_tokens(ids)) if req.return_token_strs else None
    return TokenizeResponse(
        count=len(ids), max_model_len=engine.max_model_len, tokens=ids, token_strs=strs
    )


def detokenize(ctx: ServingContext, req: DetokenizeRequest) -> DetokenizeResponse:
    engine = ctx.engine
    resolve_model(req.model, engine)  # the base model or an adapter: one tokenizer
    check_vocabulary(req.tokens, engine.vocab_size, "tokens")
    return DetokenizeResponse(prompt=str(engine.tokenizer.decode(req.tokens)))
