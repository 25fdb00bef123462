"""``POST /inference/v1/generate``: token ids in, token ids out (vLLM's token-in/token-out).

The request goes through ``AsyncEngine.generate`` like any chat or completion (the ledger
holds it, a crashed step replays it), with the sampling parameters read from vLLM's wire
(``vllm_sampling``). ``output_mode`` tokens answers ids and id-keyed logprobs; text also
the detokenized text and OpenAI-style logprobs. Streamed, each output of each choice is
one chunk; ``stream_options.include_usage`` adds a usage chunk, then ``[DONE]``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import msgspec
from starlette.responses import Response

from actorllm.core.logprob_types import Logprob
from actorllm.core.outputs import CompletionOutput, RequestOutput
from actorllm.core.sampling_params import RequestOutputKind, SamplingParams
from actorllm.engine.api.request_fields import check_priority
from actorllm.entrypoints.openai.errors import APIError, bad_request
from actorllm.entrypoints.openai.logprobs import TokenText, chat_logprobs
from actorllm.entrypoints.openai.lora_models import lora_options, resolve_model
from actorllm.entrypoints.openai.preprocess import check_vocabulary, fit_max_tokens
from actorllm.entrypoints.openai.protocol.usage import UsageInfo
from actorllm.entrypoints.openai.sampling import check_generative
from actorllm.entrypoints.openai.serving_common import ServingContext, json_response, usage_options
from actorllm.entrypoints.openai.sse import Emit, SSEResponse
from actorllm.entrypoints.openai.streams import PrimedStream, prime_all, pump, unless_disconnected
from actorllm.entrypoints.openai.structured_request import client_error
from actorllm.entrypoints.routed_experts import routed_experts_b64
from actorllm.entrypoints.scale_out.protocol import (
    GenerateChoice,
    GenerateLogProb,
    GenerateLogProbs,
    GenerateLogProbsContent,
    GenerateRequest,
    GenerateResponse,
    GenerateStreamChoice,
    GenerateTextChoice,
    GenerateTextResponse,
    GenerateTextStreamChoice,
)
from actorllm.entrypoints.scale_out.vllm_sampling import from_wire

_FLOOR = -9999.0  # vLLM's logprob for a token with none (and -inf clamped)


def _tokens_only(req: GenerateRequest, params: SamplingParams) -> None:
    """vLLM's --tokens-only: no detokenization, so nothing that needs text."""
    if params.stop:
        raise bad_request(
            "stop strings are not supported on a --tokens-only server because "
            "detokenization is disabled. Check stop strings on the coordinator, or use "
            "stop_token_ids.",
            "sampling_params.stop",
        )
    if req.output_mode != "tokens":
        raise bad_request(
            f"output_mode={req.output_mode!r} requires a tokenizer, but this server does not "
            "detokenize (--tokens-only). Send the request to a server that does, or use "
            "output_mode='tokens'.",
            "output_mode",
        )
    params.detokenize = False


def refuse_multimodal(req: GenerateRequest) -> None:
    """Text models only: the multimodal and encoder-cache fields are refused by name."""
    for name in ("features", "content_parts", "ec_transfer_params", "kv_transfer_params"):
        if getattr(req, name):
            raise bad_request(
                f"{name} is not supported: this server runs text prompts only (no "
                "multimodal inputs, no KV or encoder-cache transfer).",
                name,
            )


def engine_params(ctx: ServingContext, req: GenerateRequest) -> SamplingParams:
    """The request's sampling parameters as the engine runs them: ``max_tokens`` left out
    is the room the prompt leaves (capped by the generation config's), the output kind
    follows ``stream``. Raises APIError (400) for what does not fit."""
    engine = ctx.engine
    params, given = from_wire(req.sampling_params)
    if params.n > engine.config.max_num_seqs:
        raise bad_request(
            f"sampling_params.n must be at most the server's max_num_seqs "
            f"({engine.config.max_num_seqs}), got {params.n}.",
            "sampling_params.n",
        )
    if req.stream and params.prompt_logprob_token_ids is not None:
        raise bad_request(
            "prompt_logprob_token_ids are not available when stream=true.",
            "sampling_params.prompt_logprob_token_ids",
        )
    if params.stop and not params.detokenize:
        raise bad_request(
            "stop strings are only supported when detokenize is True.", "sampling_params.stop"
        )
    if req.output_mode != "tokens" and not params.detokenize:
        raise bad_request(
            f"output_mode={req.output_mode!r} requires sampling_params.detokenize to be true",
            "output_mode",
        )
    prompt_len = len(req.token_ids)
    asked = params.max_tokens if "max_tokens" in given else None
    max_tokens = fit_max_tokens(prompt_len, asked, engine.max_model_len, "token_ids")
    if asked is None and "max_tokens" in ctx.defaults.sampling:
        max_tokens = min(max_tokens, int(ctx.defaults.sampling["max_tokens"]))
    if params.min_tokens > max_tokens:
        raise bad_request(
            f"min_tokens must be less than or equal to max_tokens={max_tokens}, got "
            f"{params.min_tokens}.",
            "sampling_params.min_tokens",
        )
    params.max_tokens = max_tokens
    params.output_kind = RequestOutputKind.DELTA if req.stream else RequestOutputKind.FINAL_ONLY
    return params.verify_logprobs(engine.config.max_logprobs, engine.vocab_size)


async def serve_generate(
    ctx: ServingContext,
    req: GenerateRequest,
    request_id: str,
    receive: Any,
    tokens_only: bool = False,
) -> Response:
    """Run one rendered request; ``request_id``: the caller's id (the engine request is
    ``generate-tokens-<id>``, vLLM's); ``tokens_only``: --tokens-only (never detokenize).
    Raises APIError for bad input (400/404)."""
    engine = ctx.engine
    refuse_multimodal(req)
    lora = resolve_model(req.model, engine)
    check_generative(engine)
    check_priority(req.priority, engine.config)
    check_vocabulary(req.token_ids, engine.vocab_size, "token_ids")
    params = engine_params(ctx, req)
    if tokens_only:
        _tokens_only(req, params)
    engine.check_admission(params.n)
    rid = f"generate-tokens-{request_id}"
    prompt: dict[str, Any] = {"prompt_token_ids": list(req.token_ids)}
    if req.cache_salt is not None:
        prompt["cache_salt"] = req.cache_salt
    it = engine.generate(
        prompt, params, request_id=rid, priority=req.priority,
        reasoning_ended=req.reasoning_ended, **lora_options(lora),
    )  # fmt: skip
    with client_error("sampling_params.structured_outputs"):
        streams = await unless_disconnected(receive, lambda: prime_all([it]))
    model = engine.model_name if lora is None else lora.lora_name
    writer = _Writer(ctx, req, params, rid)
    if req.stream:
        return SSEResponse(lambda emit: writer.stream(streams, emit), is_dead=ctx.is_dead)
    final: list[RequestOutput] = []

    async def keep(_i: int, out: RequestOutput) -> None:
        final.append(out)

    await unless_disconnected(receive, lambda: pump(streams, keep))
    return json_response(writer.whole(final, model))


def _clamp(x: float) -> float:
    return _FLOOR if math.isnan(x) or x < _FLOOR else x


def token_logprobs(
    ids: Sequence[int], entries: Sequence[dict[int, Logprob] | None], k: int
) -> GenerateLogProbs:
    """vLLM's id-keyed logprobs: the sampled token (its rank, None for rank 0) and the
    first ``max(k, 1)`` entries of the engine's map (all with -1), in the engine's order."""
    content: list[GenerateLogProbsContent] = []
    for i, tid in enumerate(ids):
        step = entries[i] if i < len(entries) else None
        lp = None if step is None else step.get(tid)
        if step is None or lp is None:
            content.append(GenerateLogProbsContent(token_id=tid, logprob=_FLOOR))
            continue
        tops = list(step.items()) if k == -1 else list(step.items())[: max(k, 1)]
        content.append(
            GenerateLogProbsContent(
                token_id=tid,
                logprob=_clamp(lp.logprob),
                rank=lp.rank or None,
                top_logprobs=[
                    GenerateLogProb(token_id=t, logprob=_clamp(e.logprob), rank=e.rank or None)
                    for t, e in tops
                ],
            )
        )
    return GenerateLogProbs(content=content)


def _prompt_logprobs(out: RequestOutput) -> list[dict[str, Any] | None] | None:
    if out.prompt_logprobs is None:
        return None
    return [
        None
        if pos is None
        else {
            str(t): {"logprob": _clamp(e.logprob), "rank": e.rank, "decoded_token": e.decoded_token}
            for t, e in pos.items()
        }
        for pos in out.prompt_logprobs
    ]


class _Writer:
    """Turns one request's outputs into generate's answers (whole or chunks)."""

    def __init__(
        self, ctx: ServingContext, req: GenerateRequest, params: SamplingParams, rid: str
    ) -> None:
        self.req, self.params, self.rid = req, params, rid
        self.text_mode = req.output_mode == "text"
        as_ids = ctx.defaults.return_tokens_as_token_ids
        self.text = TokenText(ctx.engine.tokenizer, as_ids=as_ids) if self.text_mode else None

    def _logprobs(self, co: CompletionOutput, ids: list[int]) -> Any:
        k = self.params.logprobs
        if k is None:
            return None
        entries = list(co.logprobs or [])
        if self.text is not None:
            return chat_logprobs(ids, [e or {} for e in entries], max(k, 1) if k != -1 else -1,
                                 self.text)  # fmt: skip
        return token_logprobs(ids, entries, k)

    def _check(self, co: CompletionOutput, out: RequestOutput) -> None:
        if co.finish_reason == "error":
            message = out.error or "the engine failed this request"
            raise APIError(500, message, kind="InternalServerError")

    def whole(self, outs: list[RequestOutput], model: str) -> GenerateResponse:
        last = outs[-1]
        choices: list[Any] = []
        completion = 0
        for co in sorted(last.outputs, key=lambda c: c.index):
            self._check(co, last)
            ids = list(co.token_ids)
            fields: dict[str, Any] = dict(
                index=co.index, finish_reason=co.finish_reason or "stop",
                stop_reason=co.stop_reason, token_ids=ids,
                weight_versions=co.weight_versions, logprobs=self._logprobs(co, ids),
                sampling_mask=_mask(co),
                routed_experts=routed_experts_b64(co.routed_experts),
            )  # fmt: skip
            choices.append(
                GenerateTextChoice(text=co.text, **fields)
                if self.text_mode
                else GenerateChoice(**fields)
            )
            completion += len(ids)
        prompt = len(last.prompt_token_ids)
        kind = GenerateTextResponse if self.text_mode else GenerateResponse
        return kind(
            request_id=self.rid,
            model=model,
            created=int(time.time()),
            usage=UsageInfo(
                prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
            ),
            prompt_logprobs=_prompt_logprobs(last),
            prompt_token_ids=last.prompt_token_ids if self.req.return_token_ids else None,
            choices=choices,
        )

    async def stream(self, streams: list[PrimedStream], emit: Emit) -> None:
        final_usage, every_chunk = usage_options(self.req.stream_options)
        generated = [0] * self.params.n
        prompt_len = 0
        first = True
        ids_once: list[int] | None = None

        async def on_output(_i: int, out: RequestOutput) -> None:
            nonlocal first, prompt_len, ids_once
            if first:
                prompt_len = len(out.prompt_token_ids)
                ids_once = out.prompt_token_ids if self.req.return_token_ids else None
                first = False
            for co in out.outputs:
                self._check(co, out)
                ids = list(co.token_ids)
                generated[co.index] += len(ids)
                if not (ids or co.finish_reason is not None or (self.text_mode and co.text)):
                    continue
                fields: dict[str, Any] = dict(
                    index=co.index, finish_reason=co.finish_reason, stop_reason=co.stop_reason,
                    token_ids=ids, weight_versions=co.weight_versions,
                    logprobs=self._logprobs(co, ids), sampling_mask=_mask(co),
                    routed_experts=routed_experts_b64(co.routed_experts),
                )  # fmt: skip
                chunk: dict[str, Any] = {"request_id": self.rid}
                if every_chunk:
                    n = generated[co.index]
                    chunk["usage"] = UsageInfo(
                        prompt_tokens=prompt_len, completion_tokens=n, total_tokens=prompt_len + n
                    )
                else:
                    chunk["usage"] = None
                if ids_once is not None:
                    chunk["prompt_token_ids"], ids_once = ids_once, None
                if self.text_mode:
                    chunk["output_mode"] = "text"
                    chunk["choices"] = [GenerateTextStreamChoice(text=co.text, **fields)]
                else:
                    chunk["output_mode"] = "tokens"
                    chunk["choices"] = [GenerateStreamChoice(**fields)]
                await emit(chunk)

        await pump(streams, on_output)
        if final_usage:  # vLLM's last chunk: usage only (its Nones left out)
            total = sum(generated)
            usage = UsageInfo(
                prompt_tokens=prompt_len, completion_tokens=total, total_tokens=prompt_len + total
            )
            mode = "text" if self.text_mode else "tokens"
            last = {
                "request_id": self.rid,
                "usage": msgspec.to_builtins(usage),
                "output_mode": mode,
            }
            for name in ("prompt_tokens_details", "completion_tokens_details"):
                if last["usage"][name] is None:
                    del last["usage"][name]
            await emit({**last, "choices": []})


def _mask(co: CompletionOutput) -> list[list[int]] | None:
    """vLLM's ``sampling_mask``: one id list per token of ``co`` (--return-sampling-mask;
    a streamed chunk's, its own tokens'), else None."""
    return co.sampling_mask.token_ids if co.sampling_mask is not None else None
