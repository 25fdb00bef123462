"""Schemathesis hooks for the pooling routes (test_server_pooling.py): the rules between
fields that JSON Schema cannot state and the document states in words (each pooling
operation's description): every prompt fits the context unless truncated, the two sides of
a score pair up 1:1, 1:N or N:N, and /invocations answers as the route its body's shape
picks. Bodies that break them are not generated; everything else the schema allows is, and
must be accepted.

Loaded by the schemathesis CLI through ``SCHEMATHESIS_HOOKS``; the served model's directory
comes in ``ACTORLLM_POOLING_MODEL``, its context length in ``ACTORLLM_MAX_MODEL_LEN``.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import msgspec
import schemathesis

from actorllm.entrypoints.openai.app.openai_routes import pooling_invocation
from actorllm.entrypoints.openai.fields import decode_request
from actorllm.entrypoints.openai.preprocess import encode, render_chat
from actorllm.entrypoints.openai.protocol import cohere_embed as ce
from actorllm.entrypoints.openai.protocol import pooling as pp
from actorllm.entrypoints.openai.protocol.completion import prompt_batch

MAX_MODEL_LEN = int(os.environ.get("ACTORLLM_MAX_MODEL_LEN", "0"))
INPUTS: dict[str, type[pp._InputFields]] = {
    "/v1/embeddings": pp.EmbeddingRequest,
    "/pooling": pp.PoolingRequest,
    "/classify": pp.ClassificationRequest,
}
SCORES = {"/score", "/v1/score", "/rerank", "/v1/rerank", "/v2/rerank"}


@functools.cache
def _tokenizer() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(os.environ["ACTORLLM_POOLING_MODEL"])


def _length(prompt: str | list[int]) -> int:
    if isinstance(prompt, str):
        return len(encode(_tokenizer(), prompt, add_special_tokens=True))
    return len(prompt)


def _fits(lengths: list[int], keep: int | None) -> bool:
    """Every prompt within the context once ``truncate_prompt_tokens`` cut it."""
    if keep is not None:
        lengths = [min(n, MAX_MODEL_LEN if keep == -1 else keep) for n in lengths]
    return all(0 < n <= MAX_MODEL_LEN for n in lengths)


def _input_case(kind: type[pp._InputFields], body: dict[str, Any]) -> bool:
    try:
        req = decode_request(msgspec.json.encode(body), kind)
    except Exception:
        return True  # a negative case: the server must refuse it
    if isinstance(req.input, msgspec.UnsetType):
        # messages: rendered with the request's chat_template (the model has none here);
        # one that does not render them (continue_final_message with a template that
        # drops the last message, ...) is the server's semantic 400, not generated
        if req.chat_template is None or isinstance(req.messages, msgspec.UnsetType):
            return False
        try:
            text = render_chat(
                _tokenizer(),
                req.messages,
                add_generation_prompt=req.add_generation_prompt,
                continue_final_message=req.continue_final_message,
                documents=None,
                chat_template_kwargs=req.chat_template_kwargs,
                chat_template=req.chat_template,
            )
        except Exception:
            return False
        ids = encode(_tokenizer(), text, add_special_tokens=bool(req.add_special_tokens))
        return _fits([len(ids)], req.truncate_prompt_tokens)
    try:
        batch = prompt_batch(req.input)
    except ValueError:
        return True  # (an empty id list: the server refuses it)
    return _fits([_length(p) for p in batch], req.truncate_prompt_tokens)


def _score_case(path: str, body: dict[str, Any]) -> bool:
    kind = pp.RerankRequest if "rerank" in path else pp.ScoreRequest
    try:
        req = decode_request(msgspec.json.encode(body), kind)
    except Exception:
        return True
    if max(req.max_tokens_per_query, req.max_tokens_per_doc) >= MAX_MODEL_LEN:
        return False  # below the context length (the description says so)
    if isinstance(req, pp.RerankRequest):
        sides = [[req.query], list(req.documents)]
    else:
        given = [(getattr(req, a), getattr(req, b)) for a, b in pp.SCORE_PAIRS
                 if not isinstance(getattr(req, a), msgspec.UnsetType)
                 and not isinstance(getattr(req, b), msgspec.UnsetType)]  # fmt: skip
        if len(given) != 1:
            return True
        sides = [[s] if isinstance(s, str) else list(s) for s in given[0]]
        if not (len(sides[0]) == 1 or len(sides[0]) == len(sides[1])):
            return False  # 1:1, 1:N or N:N (the description says so)
    # a bi-encoder here: each text is embedded alone
    return all(sides) and _fits([_length(t) for s in sides for t in s], req.truncate_prompt_tokens)


def _cohere_case(body: dict[str, Any]) -> bool:
    try:
        req = decode_request(msgspec.json.encode(body), ce.CohereEmbedRequest)
    except Exception:
        return True
    if not req.texts:
        return True
    if req.max_tokens is not None and req.truncate != "NONE" and req.max_tokens > MAX_MODEL_LEN:
        return False  # a truncation longer than the context (the embeddings' rule)
    lengths = [_length(t) for t in req.texts]
    if req.truncate != "NONE":
        return _fits(lengths, req.max_tokens or -1)
    return _fits(lengths, None) and all(n <= (req.max_tokens or n) for n in lengths)


@schemathesis.hook
def filter_case(context: Any, case: Any) -> bool:
    path, body = case.operation.path, case.body
    if not isinstance(body, dict):
        return True
    if path == "/invocations":  # routed by the body: generated only as that route's body
        path = pooling_invocation(set(body), "embed") or "/v1/embeddings"
        kind: type[msgspec.Struct] = INPUTS.get(path) or (
            pp.RerankRequest if path == "/rerank" else pp.ScoreRequest
        )
        try:
            decode_request(msgspec.json.encode(body), kind)
        except Exception:
            return False
    if path in INPUTS:
        return _input_case(INPUTS[path], body)
    if path in SCORES:
        return _score_case(path, body)
    if path == "/v2/embed":
        return _cohere_case(body)
    return True
