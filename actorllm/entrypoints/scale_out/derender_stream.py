"""Streaming derender: one generate chunk per call (vLLM's ``stream: true`` bodies of
``/v1/chat/completions/derender`` and ``/v1/completions/derender``), stateless.

The client carries ``stream_state`` between calls (vLLM's ``DerenderStreamState``). Here
every call replays: the ids of the earlier chunks (``output_token_ids``, cut by
``output_chunk_lens``) go through a fresh answer state of the plain route (``ChatState``,
the completion state) chunk by chunk, exactly as the route's own stream would have fed
them, and only the new chunk's fragments are answered. Parser state cannot be carried, so
it is rebuilt; tool call ids are pinned in ``last_tool_call_ids`` so a call keeps its id.
Replaying costs O(n) per chunk, bounded by the context length.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

import msgspec

from actorllm.core.logprob_types import Logprob
from actorllm.core.outputs import CompletionOutput, RequestOutput
from actorllm.entrypoints.openai.errors import bad_request
from actorllm.entrypoints.openai.lora_models import resolve_model
from actorllm.entrypoints.openai.protocol.chat_response import ChatCompletionChunk
from actorllm.entrypoints.openai.protocol.completion import CompletionResponse
from actorllm.entrypoints.openai.protocol.usage import UsageInfo
from actorllm.entrypoints.openai.serving_common import ServingContext
from actorllm.entrypoints.scale_out.derender import chat_setup, completion_setup, decode_ids
from actorllm.entrypoints.scale_out.derender_bounds import check_prompt_ids, check_stream_length
from actorllm.entrypoints.scale_out.protocol import (
    GenerateStreamChoice,
    GenerateStreamResponse,
    PerRequestMetrics,
)

# vLLM's: with a parser, whether the prompt left reasoning open decides what the first
# ids are, and the replay can only tell from the prompt.
_PROMPT_IDS_NEEDED = (
    "prompt_token_ids is required when a tool or reasoning parser is configured. Without "
    "it parse_delta cannot tell whether the prompt left reasoning open (e.g. a chat "
    "template that pre-opens <think>) and would misclassify reasoning content as plain "
    "content."
)


class DerenderStreamState(msgspec.Struct, kw_only=True):
    """vLLM's client-carried state (its fields; the replay reads the last four)."""

    prev_tokens: list[str] = msgspec.field(default_factory=list)
    prefix_offset: Annotated[int, msgspec.Meta(ge=0)] = 0
    read_offset: Annotated[int, msgspec.Meta(ge=0)] = 0
    role_sent: bool = False
    logprob_context_token_ids: list[int] = msgspec.field(default_factory=list)
    logprob_text_offset: Annotated[int, msgspec.Meta(ge=0)] = 0
    output_token_ids: list[int] = msgspec.field(default_factory=list)
    output_chunk_lens: list[Annotated[int, msgspec.Meta(gt=0)]] = msgspec.field(
        default_factory=list
    )
    tools_streamed: bool = False
    last_tool_call_ids: list[str] = msgspec.field(default_factory=list)


class DerenderChatChunk(ChatCompletionChunk, kw_only=True):
    metrics: PerRequestMetrics | None = None  # the generate chunk's, as given (vLLM's)


class DerenderCompletionChunk(CompletionResponse, kw_only=True):
    metrics: PerRequestMetrics | None = None


class _DerenderStreamRequest(msgspec.Struct, kw_only=True):
    """One streamed generate chunk to derender, with the state the client carries."""

    stream: bool = True
    model: str | None = None
    generate_chunk: GenerateStreamResponse
    stream_state: DerenderStreamState | None = None
    prompt_tokens: int | None = None
    prompt_token_ids: list[Annotated[int, msgspec.Meta(ge=0)]] | None = None


class DerenderChatStreamRequest(_DerenderStreamRequest, kw_only=True):
    chat_request: dict[str, Any] | None = None


class DerenderCompletionStreamRequest(_DerenderStreamRequest, kw_only=True):
    completion_request: dict[str, Any] | None = None


def _one_choice(chunk: GenerateStreamResponse, route: str) -> GenerateStreamChoice | None:
    """The chunk's choice: one state is carried per choice, so a chunk has at most one."""
    if chunk.output_mode != "tokens":
        raise bad_request(
            "only output_mode 'tokens' chunks can be derendered (text is already decoded).",
            "output_mode",
        )
    if len(chunk.choices) > 1:
        raise bad_request(
            f"{route} expects at most one choice per chunk (got {len(chunk.choices)}).",
            "generate_chunk.choices",
        )
    return chunk.choices[0] if chunk.choices else None


def _top_k(choice: GenerateStreamChoice | None) -> int:
    if choice is not None and choice.logprobs is not None and choice.logprobs.content:
        return max(len(e.top_logprobs) for e in choice.logprobs.content)
    return 0


def _outputs(
    ctx: ServingContext,
    state: DerenderStreamState,
    choice: GenerateStreamChoice,
    seed: list[int] | None,
    skip: bool,
    keep_stop: bool,
) -> list[CompletionOutput]:
    """Every chunk so far as the engine's DELTA outputs: the text each chunk added."""
    lens = [*state.output_chunk_lens]
    ids = [*state.output_token_ids, *(choice.token_ids or [])]
    if sum(lens) != len(state.output_token_ids):
        raise bad_request("output_chunk_lens must sum to len(output_token_ids).", "stream_state")
    if ctx.engine.max_model_len < len(ids):
        raise bad_request("the stream is longer than max_model_len.", "stream_state")
    bounds = [*lens, len(choice.token_ids or [])]
    outputs: list[CompletionOutput] = []
    shown, start = "", 0
    for j, n in enumerate(bounds):
        last = j == len(bounds) - 1
        text = decode_ids(ctx, ids[: start + n], seed, skip)
        if not last or choice.finish_reason is None:
            # an incomplete character waits for its bytes (the next chunk's replay shows it)
            text = text.rstrip("\ufffd")
        stop = choice.stop_reason if last and not keep_stop else None
        if isinstance(stop, str) and stop in text:
            text = text[: text.index(stop)]
        delta = text[len(shown) :] if text.startswith(shown) else ""
        shown = text if text.startswith(shown) else shown
        logprobs = None
        if last and choice.logprobs is not None and choice.logprobs.content is not None:
            logprobs = [
                {e.token_id: Logprob(logprob=e.logprob, rank=e.rank)}
                | {t.token_id: Logprob(logprob=t.logprob, rank=t.rank) for t in e.top_logprobs
                   if t.token_id != e.token_id}
                for e in choice.logprobs.content
            ]  # fmt: skip
        outputs.append(
            CompletionOutput(
                index=choice.index,
                text=delta,
                token_ids=ids[start : start + n],
                logprobs=logprobs,
                finish_reason=choice.finish_reason if last else None,
                stop_reason=choice.stop_reason if last else None,
            )
        )
        start += n
    return outputs


def _usage(given: UsageInfo | None, prompt_tokens: int | None) -> UsageInfo | None:
    """A usage chunk's counts, the caller's ``prompt_tokens`` over generate's (vLLM's)."""
    if given is None:
        return None
    pt = prompt_tokens if prompt_tokens is not None else (given.prompt_tokens or 0)
    ct = given.completion_tokens or 0
    return UsageInfo(prompt_tokens=pt, completion_tokens=ct, total_tokens=pt + ct)


def _next_state(
    state: DerenderStreamState, choice: GenerateStreamChoice | None
) -> DerenderStreamState:
    new = list(choice.token_ids or []) if choice is not None else []
    return msgspec.structs.replace(
        state,
        role_sent=True,
        output_token_ids=[*state.output_token_ids, *new],
        output_chunk_lens=[*state.output_chunk_lens, *([len(new)] if new else [])],
    )


def _out(rid: str, prompt: list[int], outputs: list[CompletionOutput]) -> RequestOutput:
    return RequestOutput(request_id=rid, prompt=None, prompt_token_ids=prompt,
                         prompt_logprobs=None, outputs=outputs, finished=False)  # fmt: skip


async def derender_chat_stream(ctx: ServingContext, d: DerenderChatStreamRequest) -> dict[str, Any]:
    """``{"chunk": <chat.completion.chunk>, "stream_state": ...}`` for one generate chunk."""
    resolve_model(d.model, ctx.engine)  # 404 for a name not served
    parsed = ctx.chat.tools.tool_call_parser is not None or ctx.chat.reasoning_parser is not None
    if parsed and d.chat_request is not None and d.prompt_token_ids is None:
        raise bad_request(_PROMPT_IDS_NEEDED, "prompt_token_ids")
    state = d.stream_state or DerenderStreamState()
    chunk = d.generate_chunk
    choice = _one_choice(chunk, "derender_chat_stream")
    check_stream_length(
        len(d.prompt_token_ids or []),
        len(state.output_token_ids),
        sum(len(c.token_ids or []) for c in chunk.choices),
        max_model_len=ctx.engine.max_model_len,
    )
    k = _top_k(choice)
    chat = await chat_setup(ctx, d.chat_request, k, chunk.request_id, d.model)
    req, answer = chat.req, chat.state
    fragments: list[Any] = []
    if choice is not None:
        seed = d.prompt_token_ids or chunk.prompt_token_ids
        outputs = _outputs(ctx, state, choice, seed, req.skip_special_tokens,
                           req.include_stop_str_in_output)  # fmt: skip
        for out in outputs[:-1]:
            answer.apply(_out(chunk.request_id, [], [out]), delta=True)
        fragments = answer.apply(_out(chunk.request_id, [], [outputs[-1]]), delta=True)
    pinned = list(state.last_tool_call_ids)
    for f in fragments:
        for call in f.delta.tool_calls or []:
            if call.id is not None and call.index < len(pinned):
                call.id = pinned[call.index]
            elif call.id is not None and call.index == len(pinned):
                pinned.append(call.id)
    if not state.role_sent and fragments:
        fragments[0].delta.role = ctx.response_role
    out_chunk = DerenderChatChunk(
        id=chunk.request_id, created=int(time.time()), model=d.model or ctx.engine.model_name,
        choices=fragments, usage=_usage(chunk.usage, d.prompt_tokens), metrics=chunk.metrics,
    )  # fmt: skip
    new_state = msgspec.structs.replace(
        _next_state(state, choice),
        last_tool_call_ids=pinned,
        tools_streamed=state.tools_streamed or bool(pinned),
    )
    return {"chunk": out_chunk, "stream_state": new_state}


async def derender_completion_stream(
    ctx: ServingContext, d: DerenderCompletionStreamRequest
) -> dict[str, Any]:
    resolve_model(d.model, ctx.engine)
    check_prompt_ids([d.prompt_token_ids], max_model_len=ctx.engine.max_model_len)
    state = d.stream_state or DerenderStreamState()
    chunk = d.generate_chunk
    choice = _one_choice(chunk, "derender_completion_stream")
    k = _top_k(choice)
    req, answer = completion_setup(ctx, d.completion_request, k, chunk.request_id, d.model)
    fragments: list[Any] = []
    if choice is not None:
        seed = d.prompt_token_ids or chunk.prompt_token_ids
        outputs = _outputs(ctx, state, choice, seed, req.skip_special_tokens,
                           req.include_stop_str_in_output)  # fmt: skip
        for out in outputs[:-1]:
            answer.apply(0, _out(chunk.request_id, [], [out]), delta=True)
        fragments = answer.apply(0, _out(chunk.request_id, [], [outputs[-1]]), delta=True)
    out_chunk = DerenderCompletionChunk(
        id=chunk.request_id, object="text_completion", created=int(time.time()),
        model=d.model or ctx.engine.model_name, choices=fragments,
        usage=_usage(chunk.usage, d.prompt_tokens), metrics=chunk.metrics,
    )  # fmt: skip
    return {"chunk": out_chunk, "stream_state": _next_state(state, choice)}
