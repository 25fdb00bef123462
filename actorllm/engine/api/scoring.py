"""Scoring (query, document) pairs with a pooling model: vLLM's ``score`` semantics, shared by
``LLM.score`` and the server's ``/score`` and ``/rerank``.

* A cross-encoder (a classifier with one label) reads each pair as one sequence
  (``[CLS] q [SEP] d [SEP]``, token types marking the document) and its probability is the
  score.
* An embedding model (a bi-encoder) embeds every text once and scores a pair with the
  cosine similarity of the two embeddings; the pair's ``prompt_token_ids`` are the query's,
  the tokenizer's pad token and the document's, as vLLM's (and so is the usage counted).
* A model whose pooling task is token_embed (a ColBERT-style late-interaction model) embeds
  every text's tokens once and scores a pair with MaxSim: for each query token its largest
  dot product with a document token, summed (vLLM's ``compute_maxsim_score``, float32).

The pooling task decides which (``PoolingModel.score_type``, vLLM's SCORE_TYPE_MAP).

Inputs pair up ``1 -> 1``, ``1 -> N`` (the one query against every document) or ``N -> N``.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Protocol

import anyio

from actorllm.core.errors import InvalidRequestError
from actorllm.core.pooling_params import PoolingParams
from actorllm.engine.api.pooling_outputs import (
    PoolingOutput,
    PoolingRequestOutput,
    ScoringOutput,
    ScoringRequestOutput,
)
from actorllm.engine.api.pooling_requests import pair_prompt
from actorllm.engine.api.score_limits import check_length, check_token_limit, truncate_text
from actorllm.engine.config.pooling_model import PoolingModel


class PoolingEngine(Protocol):
    """What scoring needs from an engine (``AsyncEngine``, the server's engine client)."""

    @property
    def model_name(self) -> str: ...

    @property
    def pooling_model(self) -> PoolingModel | None: ...

    @property
    def tokenizer(self) -> Any: ...

    @property
    def max_model_len(self) -> int: ...

    def encode(
        self,
        prompt: Any,
        pooling_params: PoolingParams | None = None,
        request_id: str | None = None,
        priority: int = 0,
        *,
        truncate_prompt_tokens: int | None = None,
    ) -> AsyncIterator[PoolingRequestOutput[PoolingOutput]]: ...


def pair_up(data_1: Sequence[Any], data_2: Sequence[Any]) -> list[tuple[Any, Any]]:
    """vLLM's pairing: 1:1, 1:N or N:N; anything else is the caller's 400."""
    if not data_1 or not data_2:
        raise InvalidRequestError("score inputs must not be empty.", param="text_1")
    if len(data_1) == 1:
        return [(data_1[0], d) for d in data_2]
    if len(data_1) != len(data_2):
        raise InvalidRequestError("Input lengths must be either 1:1, 1:N or N:N", param="text_2")
    return list(zip(data_1, data_2, strict=True))


def check_scoring_model(engine: PoolingEngine) -> str:
    """ "cross", "bi" or "late": how this model scores; a refusal for the others."""
    pm = engine.pooling_model
    name = engine.model_name
    if pm is None:
        raise InvalidRequestError(
            f"The model {name!r} is a text-generation model: it does not score.", param="model"
        )
    kind = pm.score_type
    if kind is not None:
        return kind
    if pm.default_task == "classify":
        raise InvalidRequestError(
            f"Score API is only enabled for num_labels == 1 (the model {name!r} has "
            f"{pm.num_labels} labels; use /classify).",
            param="model",
        )
    raise InvalidRequestError(
        f"The model {name!r} does not score: its pooling task is {pm.default_task} (scores "
        "come from embed, token_embed or a one-label classify).",
        param="model",
    )


async def encode_one(
    engine: PoolingEngine, prompt: Any, params: PoolingParams, **kw: Any
) -> PoolingRequestOutput[PoolingOutput]:
    """``engine.encode``'s one result."""
    result = None
    async for out in engine.encode(prompt, params, **kw):
        result = out
    assert result is not None
    return result


async def encode_many(
    engine: PoolingEngine,
    jobs: Sequence[tuple[Any, PoolingParams]],
    *,
    on_done: Callable[[], object] | None = None,
    **kw: Any,
) -> list[PoolingRequestOutput[PoolingOutput]]:
    """Every (prompt, params) concurrently (the scheduler batches them); results in job
    order. The first error is raised once the others are done. ``on_done``: called as
    each job ends (an offline progress bar's update)."""
    results: list[Any] = [None] * len(jobs)
    errors: list[BaseException] = []

    async def one(i: int) -> None:
        try:
            results[i] = await encode_one(engine, jobs[i][0], jobs[i][1], **kw)
        except Exception as exc:
            errors.append(exc)
        if on_done is not None:
            on_done()

    async with anyio.create_task_group() as tg:
        for i in range(len(jobs)):
            tg.start_soon(one, i)
    if errors:
        raise errors[0]
    return results


def _cut_sides(
    engine: PoolingEngine, pairs: list[tuple[str, str]], per_query: int, per_doc: int
) -> list[tuple[str, str]]:
    """Each query cut to ``per_query`` tokens, each document to ``per_doc`` (0: uncut)."""
    for value, name in ((per_query, "max_tokens_per_query"), (per_doc, "max_tokens_per_doc")):
        if value != 0:
            check_token_limit(value, name, engine.max_model_len)
    if not (per_query or per_doc):
        return pairs
    tok = engine.tokenizer
    return [(truncate_text(a, tok, per_query), truncate_text(b, tok, per_doc)) for a, b in pairs]


async def score(
    engine: PoolingEngine,
    data_1: Sequence[str],
    data_2: Sequence[str],
    *,
    use_activation: bool | None = None,
    truncate_prompt_tokens: int | None = None,
    request_id: str | None = None,
    cache_salt: str | None = None,
    max_tokens_per_query: int = 0,
    max_tokens_per_doc: int = 0,
    skip_reading_prefix_cache: bool | None = None,
    on_done: Callable[[], object] | None = None,
) -> list[ScoringRequestOutput]:
    """One score per pair (see the module's docstring), in pair order; ``cache_salt``
    salts every prompt's prefix-cache hashes (the request's, vLLM's field);
    ``max_tokens_per_query`` / ``_doc``: each side's texts cut to that many tokens first
    (``score_limits``); ``skip_reading_prefix_cache``: every prompt's (``PoolingParams``');
    ``on_done``: called as each of the engine requests ends (a progress bar)."""
    kind = check_scoring_model(engine)
    pairs = pair_up(data_1, data_2)
    for a, b in pairs:
        if not isinstance(a, str) or not isinstance(b, str):
            raise InvalidRequestError(
                "score inputs must be strings (multimodal score inputs and prompt dicts are "
                "not supported).",
                param="text_1",
            )
    pairs = _cut_sides(engine, pairs, max_tokens_per_query, max_tokens_per_doc)
    # vLLM's length check runs on what the engine would get: after truncate_prompt_tokens
    checked = truncate_prompt_tokens is None
    rid = request_id or uuid.uuid4().hex
    if kind == "cross":
        jobs = []
        for a, b in pairs:
            prompt, start = pair_prompt(engine.tokenizer, a, b)
            if checked:
                check_length(len(prompt["prompt_token_ids"]), engine.max_model_len, "text_1")
            if cache_salt is not None:
                prompt["cache_salt"] = cache_salt
            params = PoolingParams(
                task="classify",
                use_activation=use_activation,
                token_type_start=start,
                skip_reading_prefix_cache=skip_reading_prefix_cache,
            )
            jobs.append((prompt, params))
        outs = await encode_many(
            engine, jobs, on_done=on_done, truncate_prompt_tokens=truncate_prompt_tokens
        )
        return [
            ScoringRequestOutput(
                request_id=f"{rid}-{i}",
                outputs=ScoringOutput.from_base(o.outputs),
                prompt_token_ids=o.prompt_token_ids,
                num_cached_tokens=o.num_cached_tokens,
                finished=True,
            )
            for i, o in enumerate(outs)
        ]
    texts = list(dict.fromkeys([t for pair in pairs for t in pair]))
    if checked:
        for t in texts:
            check_length(len(engine.tokenizer(t)["input_ids"]), engine.max_model_len, "text_1")
    params = PoolingParams(
        task="embed" if kind == "bi" else "token_embed",
        use_activation=use_activation,
        skip_reading_prefix_cache=skip_reading_prefix_cache,
    )
    prompts = [t if cache_salt is None else {"prompt": t, "cache_salt": cache_salt} for t in texts]
    embs = await encode_many(
        engine,
        [(p, params) for p in prompts],
        on_done=on_done,
        truncate_prompt_tokens=truncate_prompt_tokens,
    )
    by_text: dict[str, PoolingRequestOutput[PoolingOutput]] = dict(zip(texts, embs, strict=True))
    import torch.nn.functional as F  # (loaded already: the pooled tensors are torch's)

    # vLLM reports a pair's tokens as the query's, the pad token, the document's.
    pad = getattr(engine.tokenizer, "pad_token_id", None)
    padding = [] if pad is None else [pad]

    results = []
    for i, (a, b) in enumerate(pairs):
        ea, eb = by_text[a], by_text[b]
        qa, db = ea.outputs.data.float(), eb.outputs.data.float()
        if kind == "bi":
            value = F.cosine_similarity(qa, db, dim=0)  # [dim], [dim] -> []
        else:  # MaxSim: [q_len, dim] @ [dim, d_len] -> [q_len, d_len] -> max, sum
            value = (qa @ db.T).amax(dim=-1).sum()
        results.append(
            ScoringRequestOutput(
                request_id=f"{rid}-{i}",
                outputs=ScoringOutput(float(value.item())),
                prompt_token_ids=ea.prompt_token_ids + padding + eb.prompt_token_ids,
                num_cached_tokens=ea.num_cached_tokens + eb.num_cached_tokens,
                finished=True,
            )
        )
    return results
