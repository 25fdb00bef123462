"""The derender routes: a generate response (token ids) turned back into the OpenAI answer
the plain route would have given (vLLM's ``/v1/chat/completions/derender`` and
``/v1/completions/derender``, whole responses; one chunk at a time: ``derender_stream``).

The token ids are decoded (seeded with the prompt's last ids, so a first token keeps its
leading space), cut at the stop string that ended them, and fed as one engine output to
the plain route's own answer state (``ChatState``, the completion state): parsers, logprob
shapes, finish reasons and echo are theirs. Usage is vLLM's: ``prompt_tokens`` as the
caller gives it (0 when left out) and the generated ids counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from actorllm.core.logprob_types import Logprob
from actorllm.core.outputs import CompletionOutput, RequestOutput
from actorllm.entrypoints.openai.errors import bad_request
from actorllm.entrypoints.openai.fields import decode_request
from actorllm.entrypoints.openai.lora_models import resolve_model
from actorllm.entrypoints.openai.preprocess import Prompt
from actorllm.entrypoints.openai.protocol.chat_request import ChatCompletionRequest
from actorllm.entrypoints.openai.protocol.chat_response import ChatCompletionResponse
from actorllm.entrypoints.openai.protocol.completion import CompletionRequest, CompletionResponse
from actorllm.entrypoints.openai.protocol.usage import UsageInfo
from actorllm.entrypoints.openai.serving_chat import (
    ChatState,
    RenderedChat,
    new_chat_state,
    render_chat_request,
)
from actorllm.entrypoints.openai.serving_common import ServingContext
from actorllm.entrypoints.openai.serving_completion import completion_state
from actorllm.entrypoints.openai.structured_request import plan_tools
from actorllm.entrypoints.scale_out.derender_bounds import (
    check_prompt_ids,
    check_responses,
    check_token_ids,
)
from actorllm.entrypoints.scale_out.protocol import (
    GenerateChoice,
    GenerateResponse,
    PerRequestMetrics,
    TokenId,
)

_SEED_TOKENS = 6  # prompt ids that seed decoding (enough for a leading space to show)


class DerenderChatResponse(ChatCompletionResponse, kw_only=True):
    """The chat answer with what the generate response carries for it, as given (vLLM's
    fields of its chat response)."""

    prompt_logprobs: list[dict[str, Any] | None] | None = None
    kv_transfer_params: dict[str, Any] | None = None
    metrics: PerRequestMetrics | None = None


class DerenderCompletionResponse(CompletionResponse, kw_only=True):
    """The completion answer with what its generate responses agree on (vLLM's)."""

    kv_transfer_params: dict[str, Any] | None = None
    metrics: PerRequestMetrics | None = None


class DerenderChatRequest(msgspec.Struct, kw_only=True):
    stream: bool = False
    model: str | None = None
    generate_response: GenerateResponse
    prompt_tokens: int | None = None
    prompt_token_ids: list[TokenId] | None = None
    chat_request: dict[str, Any] | None = None


class DerenderCompletionRequest(msgspec.Struct, kw_only=True):
    stream: bool = False
    model: str | None = None
    generate_responses: list[GenerateResponse]
    prompt_tokens: list[int] | None = None
    prompt_token_ids: list[list[TokenId] | None] | None = None
    completion_request: dict[str, Any] | None = None


def _check(ctx: ServingContext, responses: list[GenerateResponse]) -> None:
    """vLLM's refusals before anything is decoded: text responses, sizes beyond the
    served model's (``derender_bounds``)."""
    for gen in responses:
        if gen.output_mode != "tokens":
            raise bad_request(
                "only output_mode 'tokens' responses can be derendered (text is already "
                "detokenized).",
                "output_mode",
            )
    check_responses(
        responses,
        max_model_len=ctx.engine.max_model_len,
        max_logprobs=ctx.engine.config.max_logprobs,
    )


def decode_ids(ctx: ServingContext, ids: list[int], seed: list[int] | None, skip: bool) -> str:
    tok = ctx.engine.tokenizer
    tail = (seed or [])[-_SEED_TOKENS:]
    if tail:
        head = tok.decode(tail, skip_special_tokens=skip)
        full = tok.decode(tail + ids, skip_special_tokens=skip)
        if full.startswith(head):
            return str(full[len(head) :])
    return str(tok.decode(ids, skip_special_tokens=skip))


def _output(
    ctx: ServingContext, c: GenerateChoice, seed: list[int] | None, skip: bool, keep_stop: bool
) -> CompletionOutput:
    ids = list(c.token_ids or [])
    text = decode_ids(ctx, ids, seed, skip)
    if isinstance(c.stop_reason, str) and not keep_stop and c.stop_reason in text:
        text = text[: text.index(c.stop_reason)]  # the engine cut its text there
    logprobs = None
    if c.logprobs is not None and c.logprobs.content is not None:
        logprobs = []
        for entry in c.logprobs.content:
            step = {entry.token_id: Logprob(logprob=entry.logprob, rank=entry.rank)}
            for top in entry.top_logprobs:
                step.setdefault(top.token_id, Logprob(logprob=top.logprob, rank=top.rank))
            logprobs.append(step)
    return CompletionOutput(
        index=c.index, text=text, token_ids=ids, logprobs=logprobs,
        finish_reason=c.finish_reason, stop_reason=c.stop_reason,
    )  # fmt: skip


def _top_k(gen: GenerateResponse) -> int:
    """How many candidates a response carries per position (the request that asked is
    not at hand)."""
    return max(
        (len(e.top_logprobs) for c in gen.choices if c.logprobs for e in c.logprobs.content or []),
        default=0,
    )


def _usage(prompt_tokens: int, generated: int) -> UsageInfo:
    return UsageInfo(
        prompt_tokens=prompt_tokens,
        completion_tokens=generated,
        total_tokens=prompt_tokens + generated,
    )


@dataclass(frozen=True, slots=True)
class ChatSetup:
    req: ChatCompletionRequest
    state: ChatState


async def chat_setup(
    ctx: ServingContext, raw: dict[str, Any] | None, k: int, rid: str, model: str | None
) -> ChatSetup:
    """The chat request a response answers (the caller's ``chat_request``, rendered again
    for its tool plan and prompt text; else a plain one) and the route's answer state for
    it. ``k``: the candidates the response carries per position (they are shown)."""
    if raw is not None:
        req = decode_request(msgspec.json.encode(raw), ChatCompletionRequest)
        rendered = await render_chat_request(ctx, req)
        if k:  # the logprobs the response carries are shown (vLLM's), however asked
            req = msgspec.structs.replace(req, logprobs=True, top_logprobs=k)
    else:
        if ctx.chat.tools.tool_call_parser is not None or ctx.chat.reasoning_parser is not None:
            raise bad_request(
                "chat_request is required when a tool or reasoning parser is configured "
                "because plain detokenization would leak raw parser markup into content.",
                "chat_request",
            )
        req = msgspec.convert(
            {"messages": [{"role": "user", "content": ""}], "logprobs": k > 0,
             "top_logprobs": k or None},
            ChatCompletionRequest,
        )  # fmt: skip
        plan = plan_tools({}, ctx.chat.tools, ctx.engine.tokenizer)
        rendered = RenderedChat(plan, "", Prompt(None, []), None)
    name = model or ctx.engine.model_name
    return ChatSetup(req, new_chat_state(ctx, req, rendered, rid=rid, model=name))


def completion_setup(
    ctx: ServingContext, raw: dict[str, Any] | None, k: int, rid: str, model: str | None
) -> tuple[CompletionRequest, Any]:
    """The completion request responses answer (its prompt is not read: the responses'
    ids are the prompts) and the route's answer state for it."""
    if raw is not None:
        req = decode_request(msgspec.json.encode({**raw, "prompt": "x"}), CompletionRequest)
        if k:  # the logprobs the responses carry are shown (vLLM's), however asked
            req = msgspec.structs.replace(req, logprobs=k)
    else:
        req = msgspec.convert({"prompt": "x", "logprobs": k or None}, CompletionRequest)
    name = model or ctx.engine.model_name
    return req, completion_state(ctx, req, rid=rid, model=name)


async def derender_chat(ctx: ServingContext, d: DerenderChatRequest) -> DerenderChatResponse:
    """Raises APIError (400) for what cannot be derendered."""
    gen = d.generate_response
    resolve_model(d.model, ctx.engine)  # 404 for a name not served
    _check(ctx, [gen])
    check_prompt_ids([d.prompt_token_ids], max_model_len=ctx.engine.max_model_len)
    chat = await chat_setup(ctx, d.chat_request, _top_k(gen), gen.request_id, d.model)
    req, state = chat.req, chat.state
    check_token_ids(gen, "")
    seed = d.prompt_token_ids or gen.prompt_token_ids
    skip = req.skip_special_tokens
    outputs = [_output(ctx, c, seed, skip, req.include_stop_str_in_output) for c in gen.choices]
    state.apply(_request_output(gen, outputs), delta=False)
    answer = state.response()
    answer.usage = _usage(d.prompt_tokens or 0, sum(len(o.token_ids) for o in outputs))
    answer.prompt_token_ids = None
    return DerenderChatResponse(
        **{**msgspec.structs.asdict(answer), "prompt_logprobs": gen.prompt_logprobs},
        kv_transfer_params=gen.kv_transfer_params,
        metrics=gen.metrics,
    )


async def derender_completion(
    ctx: ServingContext, d: DerenderCompletionRequest
) -> DerenderCompletionResponse:
    """One generate response per prompt, as ``/v1/completions/render`` rendered them."""
    gens = d.generate_responses
    lists = (("prompt_tokens", d.prompt_tokens), ("prompt_token_ids", d.prompt_token_ids))
    for name, given in lists:
        if given is not None and len(given) != len(gens):
            raise bad_request(
                f"{name} length ({len(given)}) must equal generate_responses length ({len(gens)})",
                name,
            )
    resolve_model(d.model, ctx.engine)
    if not gens:
        raise bad_request("generate_responses must not be empty", "generate_responses")
    _check(ctx, gens)
    if d.prompt_token_ids is not None:
        check_prompt_ids(d.prompt_token_ids, max_model_len=ctx.engine.max_model_len)
    for gen in gens:
        check_token_ids(gen, f" in response {gen.request_id}")
    k = max(_top_k(g) for g in gens)
    req, state = completion_setup(ctx, d.completion_request, k, gens[0].request_id, d.model)
    generated = 0
    for i, gen in enumerate(gens):
        seed = (d.prompt_token_ids[i] if d.prompt_token_ids else None) or gen.prompt_token_ids
        outputs = [
            _output(ctx, c, seed, req.skip_special_tokens, req.include_stop_str_in_output)
            for c in gen.choices
        ]
        generated += sum(len(o.token_ids) for o in outputs)
        out = _request_output(gen, outputs)
        if req.echo and seed:
            out.prompt = str(ctx.engine.tokenizer.decode(seed))
        await state.collect(i, out)
    answer = state.response()
    answer.usage = _usage(sum(d.prompt_tokens or []), generated)
    kv = gens[0].kv_transfer_params
    return DerenderCompletionResponse(
        **msgspec.structs.asdict(answer),
        # one prompt's connector state, when every response agrees on it
        kv_transfer_params=kv if all(g.kv_transfer_params == kv for g in gens) else None,
        # metrics describe one prompt: several cannot be merged
        metrics=gens[0].metrics if len(gens) == 1 else None,
    )


def _request_output(gen: GenerateResponse, outputs: list[CompletionOutput]) -> RequestOutput:
    return RequestOutput(
        request_id=gen.request_id,
        prompt=None,
        prompt_token_ids=list(gen.prompt_token_ids or []),
        prompt_logprobs=None,
        outputs=outputs,
        finished=True,
    )
