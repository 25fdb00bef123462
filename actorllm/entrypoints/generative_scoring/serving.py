"""``POST /generative_scoring``: each item's prompt runs one generated step through the
engine (the supervised request path: a crash mid-step replays it from the ledger), asking
for the label tokens' logprobs at that step; the first label's probability is the score.

The checks come in vLLM's order, with its words: the model (404), a dead engine (503), the
queue limits (503), then the labels and the items (400); the engine's own refusals (the
labels past ``--max-logprobs``, a priority without the priority policy, an empty prompt)
are 400s too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from starlette.responses import Response

from actorllm.core.lora import LoRARequest
from actorllm.core.outputs import RequestOutput
from actorllm.core.sampling_params import RequestOutputKind, SamplingParams
from actorllm.engine.api.request_fields import check_priority
from actorllm.engine.errors import EngineDeadError
from actorllm.entrypoints.generative_scoring.probabilities import label_probabilities
from actorllm.entrypoints.generative_scoring.prompts import item_prompts, text_chars
from actorllm.entrypoints.generative_scoring.protocol import (
    GenerativeScoringItemResult,
    GenerativeScoringRequest,
    GenerativeScoringResponse,
)
from actorllm.entrypoints.openai.errors import bad_request
from actorllm.entrypoints.openai.input_work import run_input_work
from actorllm.entrypoints.openai.lora_models import lora_options, resolve_model
from actorllm.entrypoints.openai.protocol.usage import UsageInfo
from actorllm.entrypoints.openai.sampling import new_request_id
from actorllm.entrypoints.openai.serving_common import ServingContext, json_response
from actorllm.entrypoints.openai.streams import prime_all, pump, unless_disconnected


async def create_generative_scoring(
    ctx: ServingContext, req: GenerativeScoringRequest, receive: Any
) -> Response:
    """Score every item. Raises APIError (and the engine's request errors) for what the
    client got wrong, ClientDisconnected if the client leaves first (its requests are
    aborted)."""
    engine = ctx.engine
    lora = resolve_model(req.model, engine)  # 404 for a name not served
    if engine.is_dead:
        raise EngineDeadError("the engine is dead")
    engine.check_admission(len(req.items))  # vLLM's queue limits: a 503 up front
    if engine.tokenizer is None:
        raise bad_request("Tokenizer not available. Cannot process generative scoring request.")
    _check_request(req, engine.vocab_size)
    check_priority(req.priority, engine.config)
    prompts = await run_input_work(
        lambda: item_prompts(
            req, engine.tokenizer, vocab_size=engine.vocab_size, max_model_len=engine.max_model_len
        ),
        text_chars(req),
        ctx.input_limiter,
    )
    params = label_read_params(req.label_token_ids, engine.config.max_logprobs, engine.vocab_size)
    rid = new_request_id("generative-scoring", req.request_id)
    outputs = await unless_disconnected(
        receive, lambda: _run(engine, prompts, params, rid, req, lora)
    )
    data = [
        GenerativeScoringItemResult(index=i, score=_score(i, out, req))
        for i, out in enumerate(outputs)
    ]
    prompt_tokens = sum(len(p) for p in prompts)
    completion_tokens = sum(len(out.outputs[0].token_ids) for out in outputs)
    usage = UsageInfo(
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        total_tokens=prompt_tokens + completion_tokens,
    )
    model = engine.model_name if lora is None else lora.lora_name
    return json_response(GenerativeScoringResponse(id=rid, model=model, data=data, usage=usage))


def _check_request(req: GenerativeScoringRequest, vocab_size: int) -> None:
    """vLLM's checks of the labels and items, in its order and words."""
    for t in req.label_token_ids:
        if not 0 <= t < vocab_size:
            raise bad_request(
                f"label_token_id {t} is out of vocabulary range [0, {vocab_size}). "
                "Please provide valid token IDs."
            )
    if not req.label_token_ids:
        raise bad_request("label_token_ids must contain at least one token ID.")
    if not req.items:
        raise bad_request("items must contain at least one item.")


def label_read_params(labels: list[int], max_logprobs: int, vocab_size: int) -> SamplingParams:
    """One generated token, with the labels' full-vocabulary logprobs at it (vLLM's
    ``logprobs=len(labels)`` beside ``logprob_token_ids``, so more labels than
    ``--max-logprobs`` are refused with the engine's words)."""
    counted = SamplingParams(max_tokens=1, logprobs=len(labels)).verify_logprobs(
        max_logprobs, vocab_size
    )
    return counted.clone(
        logprob_token_ids=list(labels),
        watermarking=False,
        output_kind=RequestOutputKind.FINAL_ONLY,
    )


async def _run(
    engine: Any,
    prompts: Sequence[list[int]],
    params: SamplingParams,
    rid: str,
    req: GenerativeScoringRequest,
    lora: LoRARequest | None,
) -> list[RequestOutput]:
    """Every item's request at once (``{rid}-{i}``); their final outputs, in order."""
    iters: list[AsyncIterator[RequestOutput]] = []
    for i, ids in enumerate(prompts):
        prompt: dict[str, Any] = {"prompt_token_ids": ids}
        if req.cache_salt is not None:
            prompt["cache_salt"] = req.cache_salt
        iters.append(
            engine.generate(
                prompt, params, request_id=f"{rid}-{i}", priority=req.priority,
                **lora_options(lora),
            )
        )  # fmt: skip
    finals: list[RequestOutput | None] = [None] * len(iters)

    async def keep(i: int, out: RequestOutput) -> None:
        finals[i] = out

    await pump(await prime_all(iters), keep)
    if any(out is None for out in finals):
        raise bad_request(f"Failed to generate result for item {finals.index(None)}")
    return [out for out in finals if out is not None]


def _score(i: int, out: RequestOutput, req: GenerativeScoringRequest) -> float:
    """Item ``i``'s score: the first label's probability at the generated position."""
    if not out.outputs:
        raise bad_request(f"No output generated for item {i}")
    co = out.outputs[0]
    if co.finish_reason == "error":
        raise bad_request(f"Generation error for item {i}")
    if not co.logprobs:
        raise bad_request(f"No logprobs available for item {i}.")
    at = co.logprobs[0]
    missing = [t for t in req.label_token_ids if t not in at]
    if missing:
        raise bad_request(f"Token IDs {missing} not found in logprobs for item {i}.")
    logprobs = {t: at[t].logprob for t in req.label_token_ids}
    probs = label_probabilities(logprobs, apply_softmax=req.apply_softmax)
    return probs[req.label_token_ids[0]]
