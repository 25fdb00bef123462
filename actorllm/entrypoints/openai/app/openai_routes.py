"""The OpenAI (and vLLM) API routes: generation, models, tokenizer."""

from __future__ import annotations

import time
import uuid

import msgspec
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from actorllm.entrypoints.generative_scoring.protocol import GenerativeScoringRequest
from actorllm.entrypoints.generative_scoring.serving import create_generative_scoring
from actorllm.entrypoints.openai import serving_pooling as pooling
from actorllm.entrypoints.openai.app.endpoint import S, decode_body
from actorllm.entrypoints.openai.app.orca_header import FORMAT_HEADER, load_report
from actorllm.entrypoints.openai.app.sagemaker_routes import with_adapter_id
from actorllm.entrypoints.openai.app.state import AppState
from actorllm.entrypoints.openai.errors import bad_request
from actorllm.entrypoints.openai.lora_models import (
    LoadLoRAAdapterRequest,
    UnloadLoRAAdapterRequest,
    adapter_cards,
    load_adapter,
    unload_adapter,
)
from actorllm.entrypoints.openai.middleware import request_id_of
from actorllm.entrypoints.openai.protocol import pooling as pp
from actorllm.entrypoints.openai.protocol.chat_request import ChatCompletionRequest
from actorllm.entrypoints.openai.protocol.cohere_embed import CohereEmbedRequest
from actorllm.entrypoints.openai.protocol.completion import CompletionRequest
from actorllm.entrypoints.openai.protocol.server_info import (
    ModelCard,
    ModelList,
    ModelPermission,
)
from actorllm.entrypoints.openai.protocol.tokenize import DetokenizeRequest, TokenizeRequest
from actorllm.entrypoints.openai.sagemaker_sessions import SESSION_HEADER
from actorllm.entrypoints.openai.serving_chat import create_chat_completion
from actorllm.entrypoints.openai.serving_chat_batch import (
    BatchChatCompletionRequest,
    create_batch_chat_completion,
)
from actorllm.entrypoints.openai.serving_cohere_embed import create_cohere_embedding
from actorllm.entrypoints.openai.serving_common import json_response
from actorllm.entrypoints.openai.serving_completion import create_completion
from actorllm.entrypoints.openai.serving_tokenize import detokenize, tokenize


def _with_header_id(request: Request, req: S) -> S:
    """``X-Request-Id``, when sent, is the request's id (over the body's ``request_id``)."""
    given = request_id_of(request.scope)
    return msgspec.structs.replace(req, request_id=given) if given else req


async def completions(state: AppState, request: Request) -> Response:
    req = _with_header_id(request, await decode_body(request, CompletionRequest))
    response = await create_completion(state.serving, req, request.receive)
    return await _with_load_report(state, request, response, req.stream)


async def chat_completions(state: AppState, request: Request) -> Response:
    req = _with_header_id(request, await decode_body(request, ChatCompletionRequest))
    response = await create_chat_completion(state.serving, req, request.receive)
    return await _with_load_report(state, request, response, req.stream)


async def _with_load_report(
    state: AppState, request: Request, response: Response, stream: bool | None
) -> Response:
    """vLLM's ORCA ``endpoint-load-metrics`` header on a non-streamed answer that asked."""
    if not stream:
        report = await load_report(state.serving.engine, request.headers.get(FORMAT_HEADER, ""))
        response.headers.update(report or {})
    return response


async def chat_completions_batch(state: AppState, request: Request) -> Response:
    """vLLM's ``/v1/chat/completions/batch``: one choice per conversation."""
    req = _with_header_id(request, await decode_body(request, BatchChatCompletionRequest))
    return await create_batch_chat_completion(state.serving, req, request.receive)


async def generative_scoring(state: AppState, request: Request) -> Response:
    """vLLM's ``/generative_scoring``: label-token probabilities after query+item prompts."""
    req = _with_header_id(request, await decode_body(request, GenerativeScoringRequest))
    return await create_generative_scoring(state.serving, req, request.receive)


async def invocations(state: AppState, request: Request) -> Response:
    """SageMaker's (and vLLM's) ``POST /invocations``, routed by the body's shape among the
    routes the model serves, in vLLM's order: a generative model takes a chat request
    (``messages``) or a completion (``prompt``); a pooling model a rerank (``query`` and
    ``documents``), a score (``text_1``, ``queries`` or ``data_1``), or ``input`` /
    ``messages`` for its own task (embeddings, classification, or /pooling for a per-token
    task)."""
    try:
        raw = msgspec.json.decode(await request.body())
    except msgspec.DecodeError:
        raw = None
    # SageMaker's session requests, answered here; any other request's session is checked
    session = state.sagemaker_sessions.handle(raw, request.headers.get(SESSION_HEADER))
    if session is not None:
        return PlainTextResponse(session.text, headers=session.headers)
    # SageMaker's adapter header names the LoRA adapter the request runs on
    request = with_adapter_id(request, raw)
    keys = set(raw) if isinstance(raw, dict) else set()
    pm = state.serving.engine.pooling_model
    if pm is None:
        if "messages" in keys:
            return await chat_completions(state, request)
        if "prompt" in keys:
            return await completions(state, request)
        expected = "a chat request (messages) or a completion (prompt)"
    else:
        route = pooling_invocation(keys, pm.default_task)
        if route is not None:
            return await _POOLING_ROUTES[route](state, request)
        expected = "an embedding or classification (input or messages), a score or a rerank"
    raise bad_request(f"Cannot find suitable handler for request. Expected {expected}.")


def pooling_invocation(keys: set[str], task: str) -> str | None:
    """The route /invocations answers a pooling model's body as, by its fields (vLLM's
    order): a rerank, a score, else the model's own task (``task``: its default; a
    per-token one, as a reward model's, is /pooling's); None: none of them."""
    if {"query", "documents"} <= keys:
        return "/rerank"
    if any(a in keys for a, _ in pp.SCORE_PAIRS):
        return "/score"
    if keys & {"input", "messages"}:
        return {"embed": "/v1/embeddings", "classify": "/classify"}.get(task, "/pooling")
    return None


async def models(state: AppState, request: Request) -> Response:
    engine = state.serving.engine
    now = int(time.time())  # vLLM stamps every card (and its permission) with the time

    def permission() -> list[ModelPermission]:
        return [ModelPermission(id=f"modelperm-{uuid.uuid4().hex}", created=now)]

    # vLLM's root for the base model is the model as given (--model / LLM(model=...)),
    # not the served name.
    model = getattr(engine.config, "model", None)
    root = model if isinstance(model, str) and model else engine.model_name
    # One card per served name, as vLLM lists --served-model-name's aliases.
    cards = [
        ModelCard(id=name, created=now, root=root, max_model_len=engine.max_model_len,
                  permission=permission())
        for name in engine.model_names
    ]  # fmt: skip
    # Then the LoRA adapters, their parent the base model (vLLM's listing).
    cards += [
        ModelCard(created=now, permission=permission(), **card) for card in adapter_cards(engine)
    ]
    return json_response(ModelList(data=cards))


async def load_lora_adapter(state: AppState, request: Request) -> Response:
    """vLLM's runtime adapter loading (only with ACTORLLM_ALLOW_RUNTIME_LORA_UPDATING)."""
    req = msgspec.json.decode(await request.body(), type=LoadLoRAAdapterRequest)
    engine = state.serving.engine
    text = await load_adapter(
        engine, req.lora_name, req.lora_path,
        load_inplace=req.load_inplace, is_3d_lora_weight=req.is_3d_lora_weight,
    )  # fmt: skip
    return PlainTextResponse(text)


async def unload_lora_adapter(state: AppState, request: Request) -> Response:
    req = msgspec.json.decode(await request.body(), type=UnloadLoRAAdapterRequest)
    return PlainTextResponse(await unload_adapter(state.serving.engine, req.lora_name))


async def tokenize_route(state: AppState, request: Request) -> Response:
    return json_response(tokenize(state.serving, await decode_body(request, TokenizeRequest)))


async def tokenizer_info(state: AppState, request: Request) -> Response:
    """vLLM's /tokenizer_info: the tokenizer's class, its JSON-able settings, the template."""
    tok = state.serving.engine.tokenizer
    settings = {
        k: v
        for k, v in (getattr(tok, "init_kwargs", None) or {}).items()
        if isinstance(v, str | int | float | bool) or v is None
    }
    body = {
        **settings,
        "tokenizer_class": type(tok).__name__,
        "chat_template": getattr(tok, "chat_template", None),
    }
    return json_response(body)


async def detokenize_route(state: AppState, request: Request) -> Response:
    return json_response(detokenize(state.serving, await decode_body(request, DetokenizeRequest)))


async def embeddings(state: AppState, request: Request) -> Response:
    req = _with_header_id(request, await decode_body(request, pp.EmbeddingRequest))
    return await pooling.create_embedding(state.serving, req)


async def cohere_embed(state: AppState, request: Request) -> Response:
    """Cohere's ``/v2/embed`` (vLLM's)."""
    req = await decode_body(request, CohereEmbedRequest)
    return await create_cohere_embedding(state.serving, req)


async def pooling_route(state: AppState, request: Request) -> Response:
    req = _with_header_id(request, await decode_body(request, pp.PoolingRequest))
    return await pooling.create_pooling(state.serving, req)


async def classify(state: AppState, request: Request) -> Response:
    req = _with_header_id(request, await decode_body(request, pp.ClassificationRequest))
    return await pooling.create_classify(state.serving, req)


async def score(state: AppState, request: Request) -> Response:
    req = _with_header_id(request, await decode_body(request, pp.ScoreRequest))
    return await pooling.create_score(state.serving, req)


async def rerank(state: AppState, request: Request) -> Response:
    req = _with_header_id(request, await decode_body(request, pp.RerankRequest))
    return await pooling.create_rerank(state.serving, req)


# /invocations' pooling targets (pooling_invocation's answers)
_POOLING_ROUTES = {"/rerank": rerank, "/score": score, "/classify": classify,
                   "/v1/embeddings": embeddings, "/pooling": pooling_route}  # fmt: skip
