"""Cohere's ``POST /v2/embed`` (vLLM 0.32's): each text (or input) becomes an embedding
request of ``/v1/embeddings`` (serving_pooling.py): one for all plain texts, or one per
text rendered through the chat template (those run side by side), and the vectors come
back in every requested ``embedding_types`` form.

vLLM's rules, kept: ``input_type`` names a prefix from the model's task instructions (a
name the model lacks is a 400 listing the ones it has); with a chat template the prefix is
a system message before the text, else it is prepended to the text. ``truncate`` END cuts
the input's end, START its start (to ``max_tokens``, else to the context), NONE cuts nothing
and refuses an input over ``max_tokens``. ``binary`` / ``ubinary`` pack the signs eight to a
byte (most significant bit first; ``binary`` as signed bytes), ``base64`` is little-endian
float32. Images (``images``, ``image_url`` parts) are refused: this server serves text
models.

    >>> pack_signs([[1.0, -1.0, 0.5, -0.5, 2.0, 0.0, -3.0, 1.0]], signed=False)
    [[173]]
    >>> pack_signs([[1.0, -1.0, 0.5, -0.5, 2.0, 0.0, -3.0, 1.0]], signed=True)
    [[45]]
"""

from __future__ import annotations

from typing import Any

import anyio
import msgspec
import numpy as np
import torch
from starlette.responses import Response

from actorllm.core.errors import InvalidRequestError
from actorllm.entrypoints.openai import serving_pooling
from actorllm.entrypoints.openai.errors import APIError, bad_request
from actorllm.entrypoints.openai.pooling_encoding import json_value
from actorllm.entrypoints.openai.protocol import cohere_embed as ce
from actorllm.entrypoints.openai.protocol import pooling as pp
from actorllm.entrypoints.openai.protocol.usage import UsageInfo
from actorllm.entrypoints.openai.sampling import new_request_id
from actorllm.entrypoints.openai.serving_common import ServingContext, json_response

_TEXT_ONLY = "images are not supported: this server serves text models."


def pack_signs(vectors: list[list[float]], *, signed: bool) -> list[list[int]]:
    """Cohere's binary embeddings: 1 for each value >= 0, eight bits to a byte (MSB first);
    ``signed`` shifts each byte by -128. The width must be a multiple of 8."""
    if vectors and len(vectors[0]) % 8:
        raise bad_request(
            "Embedding dimension must be a multiple of 8 for binary embedding types, but "
            f"got {len(vectors[0])}.",
            "embedding_types",
        )
    packed = np.packbits(np.asarray(vectors, dtype=np.float64) >= 0, axis=-1).astype(np.int16)
    return (packed - 128 if signed else packed).tolist()


def _typed(outputs: list[torch.Tensor], kinds: list[str]) -> ce.CohereEmbeddings:
    """outputs: each [D] -> every requested kind of them."""
    floats = [o.tolist() for o in outputs]
    out = ce.CohereEmbeddings()
    for kind in kinds:
        if kind == "float":
            out.float = floats
        elif kind in ("binary", "ubinary"):
            setattr(out, kind, pack_signs(floats, signed=kind == "binary"))
        else:  # little-endian float32 (vLLM's), as /v1/embeddings' base64 writes it
            out.base64 = [json_value(o, "base64", "float32", "little") for o in outputs]
    return out


async def _run_all(
    ctx: ServingContext, requests: list[pp.EmbeddingRequest]
) -> list[tuple[serving_pooling.Results, UsageInfo]]:
    """Each request's outputs and usage, in order. Several (one per templated text) run
    side by side, so the engine batches them as it would one request's texts; when some
    fail, the first failing one's error is raised, as a sequential run would raise it."""
    if len(requests) == 1:
        return [await serving_pooling.run_embed(ctx, requests[0])]
    results: list[tuple[serving_pooling.Results, UsageInfo] | Exception | None]
    results = [None] * len(requests)

    async def one(i: int) -> None:
        try:
            results[i] = await serving_pooling.run_embed(ctx, requests[i])
        except Exception as exc:  # re-raised below, in input order
            results[i] = exc

    async with anyio.create_task_group() as tg:
        for i in range(len(requests)):
            tg.start_soon(one, i)
    done = []
    for result in results:
        if isinstance(result, Exception):
            raise result
        assert result is not None  # every task ran to its end
        done.append(result)
    return done


def _requests(ctx: ServingContext, req: ce.CohereEmbedRequest) -> list[pp.EmbeddingRequest]:
    """The /v1/embeddings requests ``req`` stands for: one for all its texts, or one per
    text or input rendered through the chat template."""
    given = [f for f in (req.texts, req.images, req.inputs) if f is not None]
    if len(given) != 1 or not given[0]:
        raise bad_request(
            "Exactly one of texts, images, or inputs must be provided, and it must be non-empty",
            "texts",
        )
    if req.images is not None:
        raise bad_request(_TEXT_ONLY, "images")
    instructions = serving_pooling.served_pooling_model(ctx).task_instructions
    prefix = None
    if req.input_type is not None:
        if not instructions:
            raise bad_request(
                f"Unsupported input_type {req.input_type!r}. This model does not define "
                "any input_type task instructions.",
                "input_type",
            )
        if req.input_type not in instructions:
            raise bad_request(
                f"Unsupported input_type {req.input_type!r}. Supported values: "
                f"{', '.join(sorted(instructions))}",
                "input_type",
            )
        prefix = instructions[req.input_type] or None
    keep: int | None = None if req.truncate == "NONE" else (req.max_tokens or -1)
    common: dict[str, Any] = {
        "model": req.model,
        "dimensions": req.output_dimension,
        "priority": req.priority,
        "truncate_prompt_tokens": keep,
        "truncation_side": "left" if req.truncate == "START" else "right",
    }
    templated = getattr(ctx.engine.tokenizer, "chat_template", None) is not None
    if req.texts is not None and (prefix is None or not templated):
        texts = [prefix + t for t in req.texts] if prefix else req.texts
        return [msgspec.convert({**common, "input": texts}, pp.EmbeddingRequest)]
    inputs = req.inputs or [
        ce.CohereEmbedInput(content=[ce.CohereEmbedContent(type="text", text=t)])
        for t in req.texts or []
    ]
    out = []
    for item in inputs:
        if any(part.type == "image_url" for part in item.content):
            raise bad_request(_TEXT_ONLY, "inputs")
        parts = [{"type": "text", "text": part.text or ""} for part in item.content]
        messages: list[dict[str, Any]] = [{"role": "system", "content": prefix}] if prefix else []
        messages.append({"role": "user", "content": parts})
        out.append(msgspec.convert({**common, "messages": messages}, pp.EmbeddingRequest))
    return out


def _cohere_field(req: ce.CohereEmbedRequest, param: str | None) -> str | None:
    """The /v2/embed field a /v1/embeddings error names (it named its own)."""
    given = "texts" if req.texts is not None else "inputs"
    return {"input": given, "messages": given, "dimensions": "output_dimension"}.get(
        param or "", param
    )


async def create_cohere_embedding(ctx: ServingContext, req: ce.CohereEmbedRequest) -> Response:
    try:
        return await _embed(ctx, req)
    except msgspec.ValidationError as exc:  # (a text the embeddings' schema refuses)
        raise bad_request(str(exc), _cohere_field(req, "input")) from None
    except (APIError, InvalidRequestError) as exc:
        if isinstance(exc, APIError):
            exc.param = _cohere_field(req, exc.param)
            raise
        raise bad_request(str(exc), _cohere_field(req, exc.param)) from None


async def _embed(ctx: ServingContext, req: ce.CohereEmbedRequest) -> Response:
    vectors: list[torch.Tensor] = []  # each [D]
    tokens = 0
    limit = req.max_tokens if req.truncate == "NONE" else None  # (else truncated to it)
    for outs, usage in await _run_all(ctx, _requests(ctx, req)):
        tokens += usage.prompt_tokens
        for o in outs:
            if limit is not None and (n := len(o.prompt_token_ids)) > limit:
                raise bad_request(
                    f"Input of {n} tokens exceeds max_tokens={limit} with truncate=NONE. "
                    "Set truncate to END or START to allow truncation.",
                    "max_tokens",
                )
            vectors.append(o.outputs.data)
    response = ce.CohereEmbedResponse(
        id=new_request_id("embd", None),
        embeddings=_typed(vectors, list(req.embedding_types or ["float"])),
        response_type="embeddings_by_type",
        meta=ce.CohereMeta(billed_units=ce.CohereBilledUnits(input_tokens=tokens)),
        texts=req.texts,
    )
    return json_response(response)
