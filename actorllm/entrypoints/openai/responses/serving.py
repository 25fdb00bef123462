"""``POST /v1/responses``, ``GET /v1/responses/{id}``, ``POST /v1/responses/{id}/cancel``.

A request runs on the chat path (``serving_chat.start_chat``): its input becomes chat
messages (``to_chat``), the chat state parses reasoning, text and tool calls, and this
module shapes them as output items, whole or as the stream's events (``events``).

``background: true`` (with the store on) runs the response beside the server
(``background.py``): the answer is the ``queued`` response, ``GET`` reads its progress and
``cancel`` stops it. Cancelling a response that is not running is vLLM's "Cannot cancel a
synchronous response." (400). With ``stream`` too, the run's events are kept
(``event_log.py``): the creating request streams them, and ``GET ?stream=true
&starting_after=N`` streams them again from sequence number N + 1, following the run until
it ends; a response created without both has no events to stream (400, as vLLM's).
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import msgspec
from starlette.responses import Response

from actorllm.core.harmony import HarmonyMessage, parse_output
from actorllm.core.harmony.dicts import message_dict
from actorllm.core.outputs import RequestOutput
from actorllm.core.structured_outputs_params import StructuredOutputsError
from actorllm.entrypoints.openai import harmony_chat
from actorllm.entrypoints.openai.errors import APIError, bad_request, to_api_error
from actorllm.entrypoints.openai.fields import decode_request
from actorllm.entrypoints.openai.protocol.chat_request import (
    AssistantMessage,
    ChatMessage,
    FunctionCall,
    ToolCall,
)
from actorllm.entrypoints.openai.protocol.logprobs import ChatLogProbs
from actorllm.entrypoints.openai.responses.background import BackgroundRuns
from actorllm.entrypoints.openai.responses.event_log import EventLog
from actorllm.entrypoints.openai.responses.events import EventWriter, Sequencer, new_id
from actorllm.entrypoints.openai.responses.request import ResponsesRequest, normalize_input
from actorllm.entrypoints.openai.responses.response import (
    FunctionCallOutput,
    IncompleteDetails,
    InputTokensDetails,
    OutputItem,
    OutputMessage,
    OutputTextPart,
    OutputTokensDetails,
    ReasoningOutput,
    ReasoningTextPart,
    ResponsesResponse,
    ResponseUsage,
    Status,
    TokenLogprob,
    TopLogprob,
)
from actorllm.entrypoints.openai.responses.store import ResponseStore
from actorllm.entrypoints.openai.responses.to_chat import chat_request, refuse_unserved
from actorllm.entrypoints.openai.serving_chat import ChatState, OutputBudget, start_chat
from actorllm.entrypoints.openai.serving_common import ServingContext, json_response
from actorllm.entrypoints.openai.sse import Emit, SSEResponse
from actorllm.entrypoints.openai.streams import close_quietly, pump, unless_disconnected

_NO_STORE_BACKGROUND = (
    "This vLLM engine does not support `store=True` and therefore does not support the "
    "background mode. To enable these features, set the environment variable "
    "`VLLM_ENABLE_RESPONSES_API_STORE=1` when launching the vLLM server."
)  # vLLM's words (ACTORLLM_ENABLE_RESPONSES_API_STORE=1 too)


def not_found(response_id: str) -> APIError:
    return APIError(
        404,
        f"Response with id '{response_id}' not found.",
        "response_id",
        kind="invalid_request_error",
    )


def decode_responses_request(body: bytes) -> ResponsesRequest:
    """The body as a :class:`ResponsesRequest`; what cannot be served is a 400 naming it."""
    raw = msgspec.json.decode(body)
    if isinstance(raw, dict):
        refuse_unserved(raw)
        normalize_input(raw)
        body = msgspec.json.encode(raw)
    return decode_request(body, ResponsesRequest)


def _check_background(req: ResponsesRequest, store: ResponseStore) -> None:
    if not req.background:
        return
    if req.store is False:
        raise bad_request("background can only be used when `store` is true", "background")
    if not store.enabled:
        raise bad_request(_NO_STORE_BACKGROUND, "background")


def _harmony_history(ctx: ServingContext, req: ResponsesRequest) -> list[HarmonyMessage]:
    """``previous_input_messages`` as harmony messages, gpt-oss only (a 400 naming it
    otherwise); ``enable_response_messages`` is not for background responses (vLLM's
    "non-background only")."""
    if req.previous_input_messages is not None and not ctx.chat.harmony:
        raise bad_request(
            "previous_input_messages is only supported for gpt-oss (harmony) models.",
            "previous_input_messages",
        )
    if req.enable_response_messages and req.background:
        raise bad_request(
            "enable_response_messages is not supported with background: true.",
            "enable_response_messages",
        )
    if req.previous_input_messages is None:
        return []
    if req.previous_response_id is not None:
        raise bad_request(
            "previous_input_messages cannot be used with previous_response_id.",
            "previous_input_messages",
        )
    return harmony_chat.history_from_dicts(req.previous_input_messages)


def _earlier_messages(store: ResponseStore, response_id: str) -> list[ChatMessage]:
    """The conversation before ``previous_response_id``, its answer included."""
    found = store.get(response_id) if store.enabled else None
    if found is None:
        raise not_found(response_id)
    messages = [copy.copy(m) for m in found.messages]  # the next turn may add to them
    text: str | None = None
    calls: list[ToolCall] = []
    for item in found.response.output:
        if isinstance(item, OutputMessage):
            text = (text or "") + "".join(p.text for p in item.content)
        elif isinstance(item, FunctionCallOutput):
            fn = FunctionCall(name=item.name, arguments=item.arguments)
            calls.append(ToolCall(id=item.call_id, function=fn))
        # Reasoning is not carried to the next turn (as vLLM; templates drop it too).
    if text is not None or calls:
        messages.append(AssistantMessage(content=text, tool_calls=calls or None))
    return messages


def raw_message(text: str, token_ids: list[int]) -> dict[str, Any]:
    """vLLM's ``ResponseRawMessageAndToken`` (the token ids are the source of truth)."""
    return {"message": text, "tokens": list(token_ids), "type": "raw_message_tokens"}


def _logprobs(lps: ChatLogProbs | None) -> list[TokenLogprob]:
    if lps is None or not lps.content:
        return []

    def as_bytes(token: str, given: list[int] | None) -> list[int]:
        return given if given is not None else list(token.encode("utf-8", errors="replace"))

    return [
        TokenLogprob(
            token=e.token,
            logprob=max(e.logprob, -9999.0),
            bytes=as_bytes(e.token, e.bytes),
            top_logprobs=[
                TopLogprob(
                    token=t.token, logprob=max(t.logprob, -9999.0), bytes=as_bytes(t.token, t.bytes)
                )
                for t in e.top_logprobs
            ],
        )
        for e in lps.content
    ]


class _Run:
    """One Responses request on the chat path: its skeleton response and its outputs."""

    def __init__(
        self,
        ctx: ServingContext,
        store: ResponseStore,
        req: ResponsesRequest,
        rid: str,
        state: ChatState,
        max_tokens: int,
        temperature: float,
        top_p: float,
        messages: list[ChatMessage],
    ) -> None:
        self.ctx, self.store, self.req, self.state = ctx, store, req, state
        self.messages = messages
        self.base = ResponsesResponse(
            id=rid,
            instructions=req.instructions,
            metadata=req.metadata,
            model=ctx.engine.model_name,
            parallel_tool_calls=req.parallel_tool_calls is not False,
            temperature=temperature,
            # vLLM's validator makes "auto" without tools "none", and echoes that.
            tool_choice="none" if not req.tools and req.tool_choice == "auto" else req.tool_choice,
            tools=req.tools,
            top_p=top_p,
            background=bool(req.background),
            max_output_tokens=max_tokens,
            max_tool_calls=req.max_tool_calls,
            previous_response_id=req.previous_response_id,
            reasoning=req.reasoning,
            service_tier=req.service_tier,
            status="in_progress",
            text=req.text,
            top_logprobs=req.top_logprobs if state.req.logprobs else None,
            truncation=req.truncation or "disabled",
            user=req.user,
            presence_penalty=req.presence_penalty,
            frequency_penalty=req.frequency_penalty,
        )

    def _choice(self) -> Any:
        return self.state.choices.get(0)

    def whole_output(self) -> list[OutputItem]:
        """The output items of a finished, non-streamed response (vLLM's
        ``build_response_output_items``)."""
        c = self._choice()
        if c is None:
            return []
        m = c.parser.message(c.text)
        items: list[OutputItem] = []
        lps = _logprobs(c.logprobs) or None
        if c.parser.plain:  # no parser: one message, empty or not
            parts = [OutputTextPart(text=c.text, logprobs=lps)] if c.text else []
            return [OutputMessage(id=new_id("msg"), content=parts)]
        reasoning = m.reasoning_content if self.req.include_reasoning else None
        if reasoning:
            items.append(
                ReasoningOutput(id=new_id("rs"), content=[ReasoningTextPart(text=reasoning)])
            )
        if m.content:
            part = OutputTextPart(text=m.content, logprobs=lps)
            items.append(OutputMessage(id=new_id("msg"), content=[part]))
        for call in m.tool_calls:
            items.append(
                FunctionCallOutput(
                    id=new_id("fc"),
                    call_id=call.id,
                    name=call.function.name,
                    arguments=call.function.arguments,
                )
            )
        return items

    def finish(self, output: list[OutputItem]) -> ResponsesResponse:
        c = self._choice()
        status: Status = "completed"
        details = None
        if c is not None and c.finish_reason == "length":
            status, details = "incomplete", IncompleteDetails(reason="max_output_tokens")
        usage = self.state.usage_info()
        thought = usage.completion_tokens_details  # (the chat state's reasoning count)
        reasoning_tokens = thought.reasoning_tokens if thought is not None else 0
        # (the Responses API reports the cache's part whatever --enable-prompt-tokens-details)
        cached, written = self.state.usage.cached_tokens, self.state.usage.created_tokens
        response = msgspec.structs.replace(
            self.base,
            output=output,
            status=status,
            incomplete_details=details,
            usage=ResponseUsage(
                input_tokens=usage.prompt_tokens,
                input_tokens_details=InputTokensDetails(
                    cached_tokens=cached, cache_write_tokens=written
                ),
                output_tokens=usage.completion_tokens,
                output_tokens_details=OutputTokensDetails(
                    reasoning_tokens=min(reasoning_tokens, usage.completion_tokens)
                ),
                total_tokens=usage.total_tokens,
            ),
            **self._messages(c),
        )
        self.ctx.defaults.log_outputs_of(response.id, self.state.choices)
        if self.req.store:
            self.store.put(response, self.messages)
        return response

    def _messages(self, c: Any) -> dict[str, Any]:
        """enable_response_messages: a gpt-oss model's harmony messages in and out (vLLM's
        ``Message.to_dict()`` lists); another model's rendered prompt and raw answer, text
        and token ids (vLLM's ``raw_message_tokens``; no answer yet: no message)."""
        if not self.req.enable_response_messages:
            return {}
        hp = self.state.harmony_prompt
        if hp is not None:
            out = parse_output(c.text, final=True).messages if c is not None else []
            return {
                "input_messages": hp.message_dicts(),
                "output_messages": [message_dict(m) for m in out],
            }
        prompt = raw_message(self.state.prompt_text or "", self.state.prompt_token_ids or [])
        answered = c is not None and bool(c.text or c.token_ids)
        answer = [raw_message(c.text, c.token_ids)] if answered else []
        return {"input_messages": [prompt], "output_messages": answer}

    async def stream(self, streams: Any, emit: Emit) -> ResponsesResponse | None:
        """Emit the response's events; the final response, or None when the engine failed
        the request (an ``error`` event was the last)."""
        seq = Sequencer(emit)
        first = msgspec.to_builtins(self.base)
        await seq.send({"type": "response.created", "response": first})
        await seq.send({"type": "response.in_progress", "response": first})
        writer = EventWriter()

        async def on_output(_i: int, out: RequestOutput) -> None:
            for fragment in self.state.apply(out, delta=True):
                lps = _logprobs(fragment.logprobs)
                for event in writer.feed(fragment.delta, lps):
                    await seq.send(event)

        try:
            await pump(streams, on_output)
        except Exception as exc:  # the engine failed mid-stream: OpenAI's error event
            err = to_api_error(exc, engine_dead=self.ctx.is_dead()).body().error
            await seq.send(
                {"type": "error", "code": str(err.code), "message": err.message, "param": err.param}
            )
            return None
        for event in writer.close():
            await seq.send(event)
        final = self.finish(writer.output)
        await seq.send({"type": "response.completed", "response": msgspec.to_builtins(final)})
        return final


async def create_response(
    ctx: ServingContext,
    store: ResponseStore,
    req: ResponsesRequest,
    receive: Any,
    background: BackgroundRuns | None = None,
) -> Response:
    _check_background(req, store)
    ctx.engine.check_admission()  # vLLM's queue limits: a 503 before anything starts
    history = _harmony_history(ctx, req)
    earlier = (
        _earlier_messages(store, req.previous_response_id)
        if req.previous_response_id is not None
        else []
    )
    max_len = ctx.engine.max_model_len
    truncate_to = None
    if req.truncation == "auto":  # keep the prompt's last tokens, room for the answer
        truncate_to = max(1, max_len - (req.max_output_tokens or 1))
    chat = chat_request(req, earlier, truncate_to=truncate_to)
    if req.background:  # outputs as they come (the first one answers the request)
        chat = msgspec.structs.replace(chat, stream=True)
    rid = req.request_id or new_id("resp")
    budget = OutputBudget(asked=req.max_output_tokens, param="input")
    try:
        state, streams, params = await start_chat(
            ctx, chat, receive, budget=budget, request_id=rid, harmony_history=history
        )
    except StructuredOutputsError as exc:  # chat's response_format is text.format here
        if exc.param == "response_format":
            raise exc.renamed("text") from None
        raise

    run = _Run(
        ctx,
        store,
        req,
        rid,
        state,
        max_tokens=params.max_tokens or 0,
        temperature=params.temperature,
        top_p=params.top_p,
        messages=list(chat.messages),
    )
    if req.background and background is not None:
        queued = msgspec.structs.replace(run.base, status="queued")
        log = background.logs.open(rid) if req.stream else None

        async def work() -> ResponsesResponse:
            if log is not None:
                try:
                    final = await run.stream(streams, log.append)
                finally:
                    log.close()  # its readers end, whatever ended the run
                if final is None:
                    raise RuntimeError("the engine failed the request mid-stream")
                return final

            async def collect(_i: int, out: RequestOutput) -> None:
                state.apply(out, delta=True)

            await pump(streams, collect)
            return run.finish(run.whole_output())

        async def abort() -> None:
            for s in streams:
                await close_quietly(s.rest)

        background.start(queued, run.messages, work, abort)
        if log is not None:
            replay = functools.partial(_replay, log, None)
            return SSEResponse(replay, is_dead=ctx.is_dead, named=True)
        return json_response(queued)
    if req.stream:

        async def produce(emit: Emit) -> None:
            await run.stream(streams, emit)

        return SSEResponse(produce, is_dead=ctx.is_dead, named=True)
    await unless_disconnected(receive, lambda: pump(streams, state.collect))
    return json_response(run.finish(run.whole_output()))


async def _replay(log: EventLog, starting_after: int | None, emit: Emit) -> None:
    async for event in log.follow(starting_after):
        await emit(event)


def retrieve_response(
    ctx: ServingContext,
    store: ResponseStore,
    background: BackgroundRuns,
    response_id: str,
    stream: bool,
    starting_after: int | None,
) -> Response:
    found = store.get(response_id) if store.enabled else None
    if found is None:
        raise not_found(response_id)
    if starting_after is not None and not stream:
        raise bad_request("starting_after applies only with stream=true.", "starting_after")
    if starting_after is not None and starting_after < 0:
        raise bad_request(
            f"starting_after is a sequence number (0 or more), got {starting_after}.",
            "starting_after",
        )
    if not stream:
        return json_response(found.response)
    log = background.logs.get(response_id)
    if log is None:
        raise bad_request(
            f"Unknown response_id: {response_id} has no events to stream: only a response "
            "created with background and stream keeps them.",
            "response_id",
        )
    replay = functools.partial(_replay, log, starting_after)
    return SSEResponse(replay, is_dead=ctx.is_dead, named=True)


async def cancel_response(
    store: ResponseStore, response_id: str, background: BackgroundRuns
) -> Response:
    found = store.get(response_id) if store.enabled else None
    if found is None:
        raise not_found(response_id)
    if found.response.status not in ("queued", "in_progress") or not background.cancel(response_id):
        raise APIError(
            400,
            "Cannot cancel a synchronous response.",
            "response_id",
            kind="invalid_request_error",
        )
    await background.wait(response_id)
    after = store.get(response_id)
    assert after is not None
    return json_response(after.response)
