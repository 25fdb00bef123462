"""POST /v1/chat/completions/batch (vLLM 0.32): several conversations in one request.

``messages`` is a list of conversations; each runs as its own chat request with the
request's other fields (``serving_chat.start_chat``), all at once, and the answer is one
``chat.completion`` whose choice ``i`` answers conversation ``i`` (usage summed). As vLLM:
no streaming, no tools, ``n`` 1 (each a 400 naming the field).
"""

from __future__ import annotations

import time
from typing import Annotated, Any

import anyio
import msgspec
from starlette.responses import Response

from actorllm.core.outputs import RequestOutput
from actorllm.entrypoints.openai.errors import bad_request
from actorllm.entrypoints.openai.protocol.chat_request import ChatCompletionRequest, Messages
from actorllm.entrypoints.openai.protocol.chat_response import ChatCompletionResponse
from actorllm.entrypoints.openai.protocol.usage import PromptTokensDetails, UsageInfo
from actorllm.entrypoints.openai.sampling import new_request_id
from actorllm.entrypoints.openai.serving_chat import ChatState, start_chat
from actorllm.entrypoints.openai.serving_common import ServingContext, json_response
from actorllm.entrypoints.openai.streams import (
    PrimedStream,
    close_quietly,
    first_leaf,
    pump,
    unless_disconnected,
)


class BatchChatCompletionRequest(ChatCompletionRequest, kw_only=True):
    """A chat request whose ``messages`` are several conversations."""

    messages: Annotated[list[Messages], msgspec.Meta(min_length=1)]  # type: ignore[assignment]


def _check(req: BatchChatCompletionRequest) -> None:
    """vLLM's limits of the batch endpoint (``check_batch_mode``), by name."""
    if req.stream:
        raise bad_request("Batch chat completions do not support streaming.", "stream")
    if req.n != 1:
        raise bad_request(
            "Batch chat completions do not support `n > 1`. Please set `n` to 1.", "n"
        )
    if req.tools or req.tool_choice not in (None, "none"):
        raise bad_request("Batch chat completions do not support tools.", "tools")
    if req.use_beam_search:
        raise bad_request(
            "Batch chat completions do not support beam search. "
            "Please set `use_beam_search` to False.",
            "use_beam_search",
        )
    if req.kv_transfer_params and req.kv_transfer_params.get("prompt_token_ids") is not None:
        raise bad_request(
            "Batch chat completions do not support `kv_transfer_params['prompt_token_ids']`: "
            "one pre-tokenized prompt cannot serve several conversations.",
            "kv_transfer_params.prompt_token_ids",
        )


def _one(req: BatchChatCompletionRequest, messages: Any) -> ChatCompletionRequest:
    fields = {f: getattr(req, f) for f in ChatCompletionRequest.__struct_fields__}
    return ChatCompletionRequest(**{**fields, "messages": messages})


async def create_batch_chat_completion(
    ctx: ServingContext, req: BatchChatCompletionRequest, receive: Any
) -> Response:
    _check(req)
    ctx.engine.check_admission()  # vLLM's queue limits, once for the batch as vLLM's
    rid = new_request_id("chatcmpl", req.request_id)
    runs: list[tuple[ChatState, list[PrimedStream]] | None] = [None] * len(req.messages)

    async def start(i: int) -> None:
        state, streams, _ = await start_chat(
            ctx, _one(req, req.messages[i]), receive, request_id=f"{rid}_{i}"
        )
        runs[i] = (state, streams)

    try:
        async with anyio.create_task_group() as tg:
            for i in range(len(req.messages)):
                tg.start_soon(start, i)
    except BaseException as exc:  # one conversation failed: abort the ones submitted
        for run in runs:
            for s in run[1] if run is not None else []:
                await close_quietly(s.rest)
        leaf = first_leaf(exc)
        raise leaf if isinstance(leaf, Exception) else exc from None
    started = [run for run in runs if run is not None]
    states = [state for state, _ in started]
    streams = [s for _, ss in started for s in ss]  # one stream per conversation (n is 1)

    async def collect(i: int, out: RequestOutput) -> None:
        await states[i].collect(0, out)

    await unless_disconnected(receive, lambda: pump(streams, collect))
    choices = []
    prompt = completion = cached = created = 0
    for i, state in enumerate(states):
        ctx.defaults.log_outputs_of(state.id, state.choices)
        one = state.response()
        choices += [msgspec.structs.replace(c, index=i) for c in one.choices]
        prompt += one.usage.prompt_tokens
        completion += one.usage.completion_tokens
        details = one.usage.prompt_tokens_details
        if details is not None:
            cached += details.cached_tokens
            created += details.created_cache_tokens
    usage = UsageInfo(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion,
        prompt_tokens_details=(
            PromptTokensDetails(cached_tokens=cached, created_cache_tokens=created)
            if ctx.defaults.prompt_tokens_details
            else None
        ),
    )
    model = ctx.engine.model_name
    response = ChatCompletionResponse(
        id=rid,
        created=int(time.time()),
        model=model,
        choices=choices,
        usage=usage,
        system_fingerprint=ctx.defaults.system_fingerprint,
    )
    return json_response(response)
