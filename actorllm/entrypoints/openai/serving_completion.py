"""POST /v1/completions: fan a prompt batch out to the engine, render OpenAI's response.

Prompt ``i``, sample ``j`` is choice ``i * n + j`` (OpenAI's order). Streaming uses DELTA
outputs and sends one chunk per choice fragment; non-streaming uses FINAL_ONLY.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.responses import Response

from actorllm.core.lora import LoRARequest
from actorllm.core.outputs import CompletionOutput, Logprob, RequestOutput
from actorllm.core.sampling_params import RequestOutputKind, SamplingParams
from actorllm.engine.api.request_fields import check_priority
from actorllm.entrypoints.openai.beam_request import beam_params
from actorllm.entrypoints.openai.errors import bad_request
from actorllm.entrypoints.openai.input_work import embeds_chars, prompt_chars, run_input_work
from actorllm.entrypoints.openai.logprobs import TokenText, completion_logprobs, prompt_logprobs
from actorllm.entrypoints.openai.lora_models import lora_options, resolve_model
from actorllm.entrypoints.openai.preprocess import (
    Prompt,
    completion_prompts,
    embeds_prompts,
    fit_max_tokens,
    refuse_beside_embeds,
    truncate,
)
from actorllm.entrypoints.openai.protocol.completion import (
    CompletionChoice,
    CompletionRequest,
    CompletionResponse,
)
from actorllm.entrypoints.openai.protocol.logprobs import CompletionLogProbs, PromptLogprobsOut
from actorllm.entrypoints.openai.sampling import (
    check_generative,
    completion_params,
    constraint_field,
    new_request_id,
)
from actorllm.entrypoints.openai.serving_common import (
    ServingContext,
    ServingDefaults,
    UsageTracker,
    json_response,
    usage_options,
)
from actorllm.entrypoints.openai.sse import Emit, SSEResponse
from actorllm.entrypoints.openai.streams import PrimedStream, prime_all, pump, unless_disconnected
from actorllm.entrypoints.openai.structured_request import client_error
from actorllm.entrypoints.routed_experts import routed_experts_b64


async def create_completion(ctx: ServingContext, req: CompletionRequest, receive: Any) -> Response:
    """Serve one completion request. Raises APIError / ValueError for bad input (400/404),
    ClientDisconnected if the client leaves before the first outputs."""
    engine = ctx.engine
    lora = resolve_model(req.model, engine)  # 404 for a name not served
    check_generative(engine)
    check_priority(req.priority, engine.config)  # vLLM: non-zero only under the priority policy
    engine.check_admission(req.n)  # vLLM's queue limits: a 503 before anything starts
    planned = await plan_completion(ctx, req)
    prompts, params = [p for p, _ in planned], [sp for _, sp in planned]
    rid = new_request_id("cmpl", req.request_id)
    if req.use_beam_search and req.echo and req.logprobs is not None:  # vLLM's check
        raise bad_request(
            "`echo` with `logprobs` is not supported with beam search because beam search "
            "does not compute prompt logprobs.",
            "echo",
        )
    iters = [
        _start(ctx, req, p.engine_input(req.cache_salt), params[i],
               rid if len(prompts) == 1 else f"{rid}-{i}", lora)
        for i, p in enumerate(prompts)
    ]  # fmt: skip
    # A spec that does not compile is a 400 naming the field the client sent it in.
    with client_error(constraint_field(req)):
        streams = await unless_disconnected(receive, lambda: prime_all(iters))
    model = engine.model_name if lora is None else lora.lora_name
    state = completion_state(ctx, req, rid=rid, model=model)
    if req.stream:
        return SSEResponse(
            lambda emit: state.stream(streams, emit),
            is_dead=ctx.is_dead,
            keep_alive_s=ctx.defaults.sse_keep_alive_s,
        )
    await unless_disconnected(receive, lambda: pump(streams, state.collect))
    ctx.defaults.log_outputs_of(rid, state.choices)
    return json_response(state.response())


def completion_state(
    ctx: ServingContext, req: CompletionRequest, *, rid: str, model: str
) -> _CompletionState:
    """The state that turns a completion request's engine outputs (prompt ``i``'s through
    ``collect(i, ...)``) into OpenAI's answer (``/v1/completions/derender`` feeds it
    generate responses)."""
    return _CompletionState(
        req=req,
        id=rid,
        model=model,
        text=TokenText(
            ctx.engine.tokenizer,
            as_ids=req.return_tokens_as_token_ids or ctx.defaults.return_tokens_as_token_ids,
        ),
        defaults=ctx.defaults,
    )


async def plan_completion(
    ctx: ServingContext, req: CompletionRequest
) -> list[tuple[Prompt, SamplingParams]]:
    """Each prompt as the engine gets it (tokenized, truncated) and its sampling
    parameters, as :func:`create_completion` submits them (``/v1/completions/render``
    answers them). Raises APIError / ValueError for bad input."""
    engine = ctx.engine
    kind = RequestOutputKind.DELTA if req.stream else RequestOutputKind.FINAL_ONLY
    max_len = engine.max_model_len
    if req.prompt_embeds:
        _check_embeds_options(req)
    encoded = await run_input_work(
        lambda: (
            (
                embeds_prompts(req.prompt_embeds, engine.prompt_embeds_spec)
                if req.prompt_embeds
                else []
            )
            + completion_prompts(
                req.prompt,
                engine.tokenizer,
                add_special_tokens=req.add_special_tokens,
                vocab_size=engine.vocab_size,
            )
        ),
        prompt_chars(req.prompt) + embeds_chars(req.prompt_embeds),
        ctx.input_limiter,
    )
    prompts = [
        truncate(p, req.truncate_prompt_tokens, max_len, req.truncation_side) for p in encoded
    ]
    cap = ctx.defaults.sampling.get("max_tokens") if req.max_tokens is None else None
    params = [
        completion_params(
            req,
            max_tokens=_capped(
                fit_max_tokens(len(p.token_ids), req.max_tokens, max_len, "prompt"), cap
            ),
            output_kind=kind,
            defaults=ctx.defaults.sampling,
            logprob_limits=(engine.config.max_logprobs, engine.vocab_size),
        )
        for p in prompts
    ]
    return list(zip(prompts, params, strict=True))


def _start(
    ctx: ServingContext,
    req: CompletionRequest,
    prompt: dict[str, Any],
    params: SamplingParams,
    request_id: str,
    lora: LoRARequest | None,
) -> AsyncIterator[RequestOutput]:
    """One prompt's engine request: sampled, or a beam search (``use_beam_search``)."""
    engine = ctx.engine
    if not req.use_beam_search:
        return engine.generate(
            prompt, params, request_id=request_id, priority=req.priority, **lora_options(lora)
        )
    beams = beam_params(
        req, params, constraint_field=constraint_field(req),
        max_logprobs=engine.config.max_logprobs,
    )  # fmt: skip
    return engine.beam_search(
        prompt, beams, request_id, priority=req.priority, logprobs=req.logprobs, lora_request=lora
    )


def _check_embeds_options(req: CompletionRequest) -> None:
    """What the HTTP layer refuses alongside prompt_embeds before it acts on the prompts
    (echo, truncation, the beam-search path), in vLLM's words where it has them; the
    engine's input processor refuses prompt_logprobs."""
    if req.echo:
        raise bad_request("Echo is unsupported with prompt embeds.", "echo")
    refuse_beside_embeds(req.truncate_prompt_tokens, req.use_beam_search)


def _capped(max_tokens: int, cap: float | None) -> int:
    """The room left, capped by the generation config's max_new_tokens (max_tokens omitted)."""
    return max_tokens if cap is None else min(max_tokens, int(cap))


@dataclass(slots=True)
class _Choice:
    """What one choice accumulated so far."""

    text: str = ""
    started: bool = False
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    logprobs: CompletionLogProbs | None = None
    offset: int = 0  # text offset of the next token (for logprobs.text_offset)
    prompt_logprobs: PromptLogprobsOut | None = None
    prompt_token_ids: list[int] | None = None  # return_token_ids
    token_ids: list[int] = field(default_factory=list)
    routed_experts: str | None = None  # base64 .npy, from the final output


@dataclass(slots=True)
class _CompletionState:
    req: CompletionRequest
    id: str
    model: str
    text: TokenText
    defaults: ServingDefaults  # the server-wide options (--enable-force-include-usage, ...)
    created: int = field(default_factory=lambda: int(time.time()))
    usage: UsageTracker = field(default_factory=UsageTracker)
    choices: dict[int, _Choice] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.usage.details = self.defaults.prompt_tokens_details

    def apply(self, i: int, out: RequestOutput, *, delta: bool) -> list[CompletionChoice]:
        """Fold one output into the choices; returns the fragments it contributed."""
        self.usage.update(i, out, delta=delta)
        fragments = []
        for co in out.outputs:
            index = i * self.req.n + co.index
            choice = self.choices.setdefault(index, _Choice())
            fragment = self._fragment(index, choice, out, co, delta=delta)
            f = fragment
            # A new token is a chunk even when its text is empty (a special token, a byte
            # of an unfinished character, text held back for a stop string): vLLM sends
            # it, and streaming clients time each token by its chunk.
            if any((co.token_ids, f.text, f.finish_reason, f.logprobs, f.token_ids,
                    f.prompt_logprobs, f.prompt_token_ids)):  # fmt: skip
                fragments.append(fragment)
        return fragments

    def _fragment(
        self, index: int, choice: _Choice, out: RequestOutput, co: CompletionOutput, *, delta: bool
    ) -> CompletionChoice:
        if not delta:  # a full output replaces what we had (FINAL_ONLY / CUMULATIVE)
            choice.text, choice.started, choice.logprobs, choice.offset = "", False, None, 0
            choice.token_ids = []
        first = CompletionChoice(index=index, text="")  # what only the first fragment carries
        if not choice.started:
            choice.started = True
            first = self._first(choice, index, out)
        logprobs = first.logprobs
        if self.req.logprobs is not None and co.logprobs is not None:
            block, choice.offset = completion_logprobs(
                co.token_ids, co.logprobs, self._top_k, self.text, choice.offset
            )
            logprobs = block if logprobs is None else _concat(logprobs, block)
        text = first.text + co.text
        choice.text += text
        if logprobs is not None:
            choice.logprobs = (
                logprobs if choice.logprobs is None else _concat(choice.logprobs, logprobs)
            )
        if co.finish_reason is not None:
            choice.finish_reason, choice.stop_reason = co.finish_reason, co.stop_reason
        if co.routed_experts is not None:  # (vLLM sends them in whole responses only)
            choice.routed_experts = routed_experts_b64(co.routed_experts)
        ids = None
        if self.req.return_token_ids:
            ids = list(co.token_ids)
            choice.token_ids += ids
        return CompletionChoice(
            index=index,
            text=text,
            logprobs=logprobs,
            finish_reason=co.finish_reason,
            stop_reason=co.stop_reason,
            prompt_logprobs=first.prompt_logprobs,
            prompt_token_ids=first.prompt_token_ids,
            token_ids=ids,
        )

    @property
    def _top_k(self) -> int:
        """Entries shown per output token: ``logprobs``, or every one with
        ``logprob_token_ids`` (the sampled token and the ids asked, as vLLM)."""
        ids = self.req.logprob_token_ids
        return len(ids) + 1 if ids else self.req.logprobs or 0

    def _first(self, choice: _Choice, index: int, out: RequestOutput) -> CompletionChoice:
        """What a choice's first fragment carries: the echoed prompt (text, logprobs), the
        prompt logprobs and the prompt token ids, as the request asked."""
        first = CompletionChoice(index=index, text="")
        if self.req.prompt_logprobs is not None:
            first.prompt_logprobs = prompt_logprobs(out.prompt_logprobs, self.text)
            choice.prompt_logprobs = first.prompt_logprobs
        if self.req.return_token_ids:
            first.prompt_token_ids = choice.prompt_token_ids = list(out.prompt_token_ids)
        if self.req.echo:
            first.text = self._prompt_text(out)
            first.logprobs = self._prompt_logprobs(out)
            choice.offset = len(first.text)
        return first

    def _prompt_text(self, out: RequestOutput) -> str:
        return out.prompt if out.prompt is not None else self.text.decode(out.prompt_token_ids)

    def _prompt_logprobs(self, out: RequestOutput) -> CompletionLogProbs | None:
        if self.req.logprobs is None or out.prompt_logprobs is None:
            return None
        entries: list[dict[int, Logprob] | None] = list(out.prompt_logprobs)
        block, _ = completion_logprobs(
            out.prompt_token_ids, entries, self.req.logprobs, self.text, 0
        )
        return block

    async def collect(self, i: int, out: RequestOutput) -> None:
        self.apply(i, out, delta=False)

    async def stream(self, streams: list[PrimedStream], emit: Emit) -> None:
        final_usage, every_chunk = usage_options(
            self.req.stream_options, force=self.defaults.force_include_usage
        )

        fingerprint = self.defaults.system_fingerprint

        async def on_output(i: int, out: RequestOutput) -> None:
            for fragment in self.apply(i, out, delta=True):
                chunk = self._chunk([fragment], usage=every_chunk)
                if fragment.finish_reason is not None and not final_usage:
                    chunk.system_fingerprint = fingerprint  # (vLLM's: a choice's last chunk)
                await emit(chunk)

        await pump(streams, on_output)
        self.defaults.log_outputs_of(self.id, self.choices)
        if final_usage:
            last = self._chunk([], usage=True)
            last.system_fingerprint = fingerprint
            await emit(last)

    def _chunk(self, choices: list[CompletionChoice], usage: bool = False) -> CompletionResponse:
        return CompletionResponse(
            id=self.id,
            created=self.created,
            model=self.model,
            choices=choices,
            usage=self.usage.info() if usage else None,
        )

    def response(self) -> CompletionResponse:
        choices = [
            CompletionChoice(
                index=index,
                text=c.text,
                logprobs=c.logprobs,
                finish_reason=c.finish_reason,
                stop_reason=c.stop_reason,
                prompt_logprobs=c.prompt_logprobs,
                prompt_token_ids=c.prompt_token_ids,
                token_ids=c.token_ids if self.req.return_token_ids else None,
                routed_experts=c.routed_experts,
            )
            for index, c in sorted(self.choices.items())
        ]
        return CompletionResponse(
            id=self.id,
            created=self.created,
            model=self.model,
            choices=choices,
            usage=self.usage.info(),
            system_fingerprint=self.defaults.system_fingerprint,
        )


def _concat(a: CompletionLogProbs, b: CompletionLogProbs) -> CompletionLogProbs:
    return CompletionLogProbs(
        text_offset=a.text_offset + b.text_offset,
        token_logprobs=a.token_logprobs + b.token_logprobs,
        tokens=a.tokens + b.tokens,
        top_logprobs=a.top_logprobs + b.top_logprobs,
    )
