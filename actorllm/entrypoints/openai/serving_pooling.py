"""The pooling endpoints: ``/v1/embeddings``, ``/pooling``, ``/classify``, ``/score``,
``/rerank`` (vLLM 0.32's shapes, see protocol/pooling.py).

Prompts are tokenized here (as the generation routes do), every prompt of a request runs
as one engine pooling request, concurrently (the scheduler batches them), and the response
lists them in input order with the usage of all of them. Over HTTP a route the model does
not serve is a 404 before it gets here (``app/served_routes.py``); called directly (run-batch)
a generative model answers 400 naming ``model``. A task the model lacks, ``dimensions`` on a
model without matryoshka embeddings and an input longer than the context (``input``) are
400s naming the field; ``/pooling`` serves the model's one pooling task (vLLM's rule: another
task it has is a 400 that says how to switch).
"""

from __future__ import annotations

import time
from typing import Any

import msgspec
from starlette.responses import Response

from actorllm.core.pooling_params import PoolingParams
from actorllm.engine.api.pooling_outputs import PoolingOutput, PoolingRequestOutput
from actorllm.engine.api.pooling_requests import check_front_door_task
from actorllm.engine.api.request_fields import check_priority
from actorllm.engine.api.scoring import encode_many, pair_up, score
from actorllm.entrypoints.openai import embed_chunks
from actorllm.entrypoints.openai.errors import bad_request
from actorllm.entrypoints.openai.input_work import prompt_chars, run_input_work
from actorllm.entrypoints.openai.pooling_encoding import bytes_response, json_value
from actorllm.entrypoints.openai.preprocess import (
    Prompt,
    completion_prompts,
    encode,
    render_chat,
    reserved_template_kwargs,
)
from actorllm.entrypoints.openai.protocol import pooling as pp
from actorllm.entrypoints.openai.protocol.usage import UsageInfo
from actorllm.entrypoints.openai.sampling import check_model, new_request_id
from actorllm.entrypoints.openai.serving_common import ServingContext, json_response

Results = list[PoolingRequestOutput[PoolingOutput]]


def served_pooling_model(ctx: ServingContext) -> Any:
    """The served pooling model, or the 400 a generative one answers."""
    engine = ctx.engine
    pm = engine.pooling_model
    if pm is None:
        raise bad_request(
            f"The model `{engine.model_name}` is a text-generation model: it does not serve "
            "pooling requests (embeddings, classification, scores).",
            "model",
        )
    return pm


async def _prompts(ctx: ServingContext, req: pp._InputFields) -> list[Prompt]:
    """The request's prompts: its ``input`` forms, or its ``messages`` rendered."""
    engine = ctx.engine
    reserved = sorted(set(req.chat_template_kwargs or {}) & reserved_template_kwargs())
    if reserved:  # refused with input too, as the document states
        raise bad_request(
            f"chat_template_kwargs may not set {reserved[0]!r} (the template renderer's own).",
            "chat_template_kwargs",
        )
    template = ctx.defaults.request_chat_template(req.chat_template)  # refused with input too
    has_input = not isinstance(req.input, msgspec.UnsetType)
    if has_input == (not isinstance(req.messages, msgspec.UnsetType)):
        raise bad_request("Give exactly one of `input` and `messages`.", "input")
    if has_input:
        special = True if req.add_special_tokens is None else req.add_special_tokens
        return await run_input_work(
            lambda: completion_prompts(
                req.input, engine.tokenizer, add_special_tokens=special,
                vocab_size=engine.vocab_size,
            ),
            prompt_chars(req.input),
            ctx.input_limiter,
        )  # fmt: skip
    assert not isinstance(req.messages, msgspec.UnsetType)
    messages = req.messages
    text = render_chat(
        engine.tokenizer,
        messages,
        add_generation_prompt=req.add_generation_prompt,
        continue_final_message=req.continue_final_message,
        documents=None,
        chat_template_kwargs=ctx.defaults.template_kwargs(req.chat_template_kwargs),
        chat_template=template,
        tools=None,
    )
    special = bool(req.add_special_tokens)  # the template holds the special tokens it wants
    return [Prompt(text=text, token_ids=encode(engine.tokenizer, text, add_special_tokens=special))]


def _truncated(prompt: Prompt, req: pp._PoolingFields, max_len: int) -> Prompt:
    """``truncate_prompt_tokens`` (-1: the context length) from ``truncation_side``
    (default left: the last tokens are kept, vLLM's default)."""
    k = req.truncate_prompt_tokens
    if k is None:
        return prompt
    if k == 0:
        raise bad_request(
            "truncate_prompt_tokens must be -1 or at least 1.", "truncate_prompt_tokens"
        )
    if k > max_len:  # vLLM's 400 (its serving layer's words), even for a short prompt
        raise bad_request(
            "truncate_prompt_tokens value is greater than max_model_len. "
            "Please request a smaller truncation size.",
            "truncate_prompt_tokens",
        )
    keep = max_len if k == -1 else k
    if len(prompt.token_ids) <= keep:
        return prompt
    ids = prompt.token_ids[:keep] if req.truncation_side == "right" else prompt.token_ids[-keep:]
    return Prompt(text=None, token_ids=ids)


def _padded(prompts: list[Prompt], tokenizer: Any, length: int) -> list[Prompt]:
    """``padding: max_length``: each prompt's ids (after truncation) filled up to the
    context length with the tokenizer's pad token, as vLLM's renderer does; the pad
    tokens are attended and counted in the usage."""
    pad = getattr(tokenizer, "pad_token_id", None)
    if pad is None:
        raise bad_request(
            "padding 'max_length' needs a tokenizer with a pad token; this one has none.",
            "padding",
        )
    return [
        Prompt(text=None, token_ids=[*p.token_ids, *[pad] * (length - len(p.token_ids))])
        for p in prompts
    ]


async def _run(
    ctx: ServingContext, req: pp._InputFields, params: PoolingParams, *, embed: bool = False
) -> tuple[Results, UsageInfo]:
    """``embed``: an embedding request, which --pooler-config's ``max_embed_len`` and
    ``enable_chunked_processing`` apply to (vLLM's)."""
    engine = ctx.engine
    check_model(req.model, engine.model_names)
    spec = served_pooling_model(ctx).spec
    check_priority(req.priority, engine.config)
    prompts = [_truncated(p, req, engine.max_model_len) for p in await _prompts(ctx, req)]
    for p in prompts:
        if not p.token_ids:
            raise bad_request("The input must not be empty.", "input")
    chunked = embed and spec.enable_chunked_processing
    limit = spec.max_embed_len if embed else None
    if limit is not None:
        _check_embed_len(prompts, limit)
    if req.padding == "max_length":
        prompts = _padded(
            prompts, engine.tokenizer, min(engine.max_model_len, limit or engine.max_model_len)
        )
    if chunked:
        outs = await _encode_chunked(ctx, req, params, spec.default_use_activation, prompts)
    else:
        jobs = [(p.engine_input(req.cache_salt), params) for p in prompts]
        outs = await encode_many(engine, jobs, priority=req.priority)
    tokens = sum(len(o.prompt_token_ids) for o in outs)
    return outs, UsageInfo(prompt_tokens=tokens, total_tokens=tokens)


def _check_embed_len(prompts: list[Prompt], limit: int) -> None:
    for p in prompts:
        if len(p.token_ids) > limit:
            raise bad_request(
                f"This model's maximum input length for embeddings is {limit} tokens "
                f"(--pooler-config max_embed_len); the input has {len(p.token_ids)} tokens. "
                "Please reduce the length of the input.",
                "input",
            )


async def _encode_chunked(
    ctx: ServingContext,
    req: pp._InputFields,
    params: PoolingParams,
    default_activation: bool,
    prompts: list[Prompt],
) -> Results:
    """Every prompt in context-sized pieces, one engine request each, recombined
    (embed_chunks.py); a prompt that fits is one piece, its embedding unchanged."""
    engine = ctx.engine
    pieces = [embed_chunks.split(p.token_ids, engine.max_model_len) for p in prompts]
    jobs = [
        (Prompt(text=None, token_ids=ids).engine_input(req.cache_salt), params)
        for prompt_pieces in pieces
        for ids in prompt_pieces
    ]
    outs = iter(await encode_many(engine, jobs, priority=req.priority))
    activation = default_activation if params.use_activation is None else params.use_activation
    results: Results = []
    for prompt, prompt_pieces in zip(prompts, pieces, strict=True):
        got = [next(outs) for _ in prompt_pieces]
        data = got[0].outputs.data
        if len(got) > 1:
            lengths = [len(ids) for ids in prompt_pieces]
            data = embed_chunks.combine([o.outputs.data for o in got], lengths, activation)
        results.append(
            PoolingRequestOutput(
                request_id=got[0].request_id,
                outputs=PoolingOutput(data=data),
                prompt_token_ids=prompt.token_ids,
                num_cached_tokens=0,
                finished=True,
            )
        )
    return results


async def run_embed(ctx: ServingContext, req: pp.EmbeddingRequest) -> tuple[Results, UsageInfo]:
    """An embedding request's outputs (input order) and usage."""
    params = PoolingParams(
        task="embed", dimensions=req.dimensions, use_activation=req.use_activation
    )
    return await _run(ctx, req, params, embed=True)


async def create_embedding(ctx: ServingContext, req: pp.EmbeddingRequest) -> Response:
    outs, usage = await run_embed(ctx, req)
    rid = new_request_id("embd", req.request_id)
    if req.encoding_format in ("bytes", "bytes_only"):
        return _bytes(ctx, req, outs, usage, rid)
    fmt, dtype, order = req.encoding_format, req.embed_dtype, req.endianness
    data = [
        pp.EmbeddingResponseData(index=i, embedding=json_value(o.outputs.data, fmt, dtype, order))
        for i, o in enumerate(outs)
    ]
    return json_response(
        pp.EmbeddingResponse(id=rid, model=ctx.engine.model_name, data=data, usage=usage)
    )


async def create_pooling(ctx: ServingContext, req: pp.PoolingRequest) -> Response:
    if req.task == "plugin":  # vLLM's IOProcessor plugins (e.g. geospatial models)
        raise bad_request("No IOProcessor plugin installed.", "task")
    check_front_door_task(served_pooling_model(ctx), req.task, ctx.engine.model_name)
    params = PoolingParams(
        task=req.task, dimensions=req.dimensions, use_activation=req.use_activation,
        step_tag_id=req.step_tag_id, returned_token_ids=req.returned_token_ids,
    )  # fmt: skip
    outs, usage = await _run(ctx, req, params)
    rid = new_request_id("pool", req.request_id)
    if req.encoding_format in ("bytes", "bytes_only"):
        return _bytes(ctx, req, outs, usage, rid)
    fmt, dtype, order = req.encoding_format, req.embed_dtype, req.endianness
    data = [
        pp.PoolingResponseData(index=i, data=json_value(o.outputs.data, fmt, dtype, order))
        for i, o in enumerate(outs)
    ]
    return json_response(
        pp.PoolingResponse(id=rid, model=ctx.engine.model_name, data=data, usage=usage)
    )


def _bytes(
    ctx: ServingContext, req: pp.EmbeddingRequest, outs: Results, usage: UsageInfo, rid: str
) -> Response:
    return bytes_response(
        [o.outputs.data for o in outs],
        req.encoding_format,
        req.embed_dtype,
        req.endianness,
        request_id=rid,
        created=int(time.time()),
        model=ctx.engine.model_name,
        usage={"prompt_tokens": usage.prompt_tokens, "total_tokens": usage.total_tokens},
    )


async def create_classify(ctx: ServingContext, req: pp.ClassificationRequest) -> Response:
    params = PoolingParams(task="classify", use_activation=req.use_activation)
    outs, usage = await _run(ctx, req, params)
    labels = served_pooling_model(ctx).id2label
    data = []
    for i, o in enumerate(outs):
        probs = o.outputs.data.tolist()
        best = max(range(len(probs)), key=probs.__getitem__)
        data.append(
            pp.ClassificationData(
                index=i, label=labels.get(best), probs=probs, num_classes=len(probs)
            )
        )
    rid = new_request_id("classify", req.request_id)
    return json_response(
        pp.ClassificationResponse(id=rid, model=ctx.engine.model_name, data=data, usage=usage)
    )


def _score_sides(req: pp.ScoreRequest) -> tuple[list[str], list[str]]:
    given = [
        (a, b)
        for a, b in pp.SCORE_PAIRS
        if not isinstance(getattr(req, a), msgspec.UnsetType)
        and not isinstance(getattr(req, b), msgspec.UnsetType)
    ]
    if len(given) != 1:
        raise bad_request(
            "Give one pair of score inputs: text_1 and text_2 (or queries and documents, "
            "queries and items, data_1 and data_2).",
            "text_1",
        )
    a, b = given[0]

    def side(v: str | list[str]) -> list[str]:
        return [v] if isinstance(v, str) else list(v)

    return side(getattr(req, a)), side(getattr(req, b))


async def _score(
    ctx: ServingContext, req: pp._ScoringFields, first: list[str], second: list[str]
) -> list[Any]:
    engine = ctx.engine
    check_model(req.model, engine.model_names)
    served_pooling_model(ctx)
    check_priority(req.priority, engine.config)
    pair_up(first, second)  # the pairing's 400 before any work
    return await score(
        engine,
        first,
        second,
        use_activation=req.use_activation,
        truncate_prompt_tokens=req.truncate_prompt_tokens,
        cache_salt=req.cache_salt,
        max_tokens_per_query=req.max_tokens_per_query,
        max_tokens_per_doc=req.max_tokens_per_doc,
    )


async def create_score(ctx: ServingContext, req: pp.ScoreRequest) -> Response:
    first, second = _score_sides(req)
    outs = await _score(ctx, req, first, second)
    tokens = sum(len(o.prompt_token_ids) for o in outs)
    data = [pp.ScoreResponseData(index=i, score=o.outputs.score) for i, o in enumerate(outs)]
    rid = new_request_id("score", req.request_id)
    usage = UsageInfo(prompt_tokens=tokens, total_tokens=tokens)
    return json_response(
        pp.ScoreResponse(id=rid, model=ctx.engine.model_name, data=data, usage=usage)
    )


async def create_rerank(ctx: ServingContext, req: pp.RerankRequest) -> Response:
    docs = [req.documents] if isinstance(req.documents, str) else list(req.documents)
    outs = await _score(ctx, req, [req.query], docs)
    tokens = sum(len(o.prompt_token_ids) for o in outs)
    results = [
        pp.RerankResult(
            index=i,
            document=pp.RerankDocument(text=docs[i]) if req.return_documents else None,
            relevance_score=o.outputs.score,
        )
        for i, o in enumerate(outs)
    ]
    results.sort(key=lambda r: r.relevance_score, reverse=True)
    if 0 < req.top_n < len(results):
        results = results[: req.top_n]
    rid = new_request_id("rerank", req.request_id)
    return json_response(
        pp.RerankResponse(
            id=rid,
            model=ctx.engine.model_name,
            usage=pp.RerankUsage(prompt_tokens=tokens, total_tokens=tokens),
            results=results,
        )
    )
