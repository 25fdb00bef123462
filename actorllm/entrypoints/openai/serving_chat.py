"""POST /v1/chat/completions: messages through the chat template, OpenAI's chat response.

Streaming sends, per choice, a first chunk with ``role`` (``--response-role``), then content deltas;
the finish reason rides on the chunk that carries the last delta.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from starlette.responses import Response

from actorllm.core.outputs import CompletionOutput, RequestOutput
from actorllm.core.sampling_params import RequestOutputKind, SamplingParams
from actorllm.entrypoints.metrics import RequestObserver
from actorllm.entrypoints.openai.errors import bad_request
from actorllm.entrypoints.openai.logprobs import TokenText, chat_logprobs
from actorllm.entrypoints.openai.protocol import (
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatLogProbs,
    ChatMessage,
    ChatResponseMessage,
    DeltaMessage,
)
from actorllm.entrypoints.openai.sampling import chat_params, check_model, new_request_id
from actorllm.entrypoints.openai.serving_common import ServingContext, UsageTracker, json_response
from actorllm.entrypoints.openai.sse import Emit, SSEResponse
from actorllm.entrypoints.openai.streams import PrimedStream, prime_all, pump, unless_disconnected


def messages_for_template(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """OpenAI messages as chat-template dicts; text parts are joined with newlines.

    Raises APIError(400) for non-text content parts (this server serves text models).
    """
    out: list[dict[str, Any]] = []
    for i, msg in enumerate(messages):
        if msg.content is None or isinstance(msg.content, str):
            content = msg.content or ""
        else:
            texts = []
            for part in msg.content:
                if part.type != "text" or part.text is None:
                    raise bad_request(
                        f"messages[{i}]: only text content parts are supported, got {part.type!r}.",
                        "messages",
                    )
                texts.append(part.text)
            content = "\n".join(texts)
        entry: dict[str, Any] = {"role": msg.role, "content": content}
        if msg.name is not None:
            entry["name"] = msg.name
        out.append(entry)
    return out


async def create_chat_completion(
    ctx: ServingContext, req: ChatCompletionRequest, receive: Any
) -> Response:
    """Serve one chat request. Raises APIError / ValueError for bad input (400/404),
    ClientDisconnected if the client leaves before the first output."""
    engine = ctx.engine
    check_model(req.model, engine.model_name)
    kind = RequestOutputKind.DELTA if req.stream else RequestOutputKind.FINAL_ONLY
    params = chat_params(req, max_model_len=engine.max_model_len, output_kind=kind)
    rid = new_request_id("chatcmpl", req.request_id)
    it = engine.chat(
        messages_for_template(req.messages),
        params,
        request_id=rid,
        priority=req.priority,
        add_generation_prompt=req.add_generation_prompt,
        chat_template_kwargs=req.chat_template_kwargs,
    )
    streams = await unless_disconnected(receive, lambda: prime_all([it]))
    state = _ChatState(
        req=req,
        params=params,
        id=rid,
        model=engine.model_name,
        text=TokenText(engine.tokenizer),
        observer=ctx.metrics.observe_request(),
        role=ctx.response_role,
    )
    if req.stream:
        return SSEResponse(lambda emit: state.stream(streams, emit), is_dead=ctx.is_dead)
    await unless_disconnected(receive, lambda: pump(streams, state.collect))
    return json_response(state.response())


@dataclass(slots=True)
class _Choice:
    text: str = ""
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    logprobs: ChatLogProbs | None = None


@dataclass(slots=True)
class _ChatState:
    req: ChatCompletionRequest
    params: SamplingParams
    id: str
    model: str
    text: TokenText
    observer: RequestObserver
    role: str  # --response-role
    created: int = field(default_factory=lambda: int(time.time()))
    usage: UsageTracker = field(default_factory=UsageTracker)
    choices: dict[int, _Choice] = field(default_factory=dict)

    def _logprobs(self, co: CompletionOutput) -> ChatLogProbs | None:
        if not self.req.logprobs or co.logprobs is None:
            return None
        return chat_logprobs(co.token_ids, co.logprobs, self.req.top_logprobs or 0, self.text)

    def _apply(self, out: RequestOutput, *, delta: bool) -> list[ChatChunkChoice]:
        self.observer.update(out, delta=delta)
        self.usage.update(0, out, delta=delta)
        fragments = []
        for co in out.outputs:
            choice = self.choices.setdefault(co.index, _Choice())
            logprobs = self._logprobs(co)
            if delta:
                choice.text += co.text
                if logprobs is not None:
                    prev = choice.logprobs.content if choice.logprobs else None
                    choice.logprobs = ChatLogProbs(content=(prev or []) + (logprobs.content or []))
            else:
                choice.text, choice.logprobs = co.text, logprobs
            if co.finish_reason is not None:
                choice.finish_reason, choice.stop_reason = co.finish_reason, co.stop_reason
            if co.text or co.finish_reason or logprobs:
                fragments.append(
                    ChatChunkChoice(
                        index=co.index,
                        delta=DeltaMessage(content=co.text) if co.text else DeltaMessage(),
                        logprobs=logprobs,
                        finish_reason=co.finish_reason,
                        stop_reason=co.stop_reason,
                    )
                )
        return fragments

    async def collect(self, _i: int, out: RequestOutput) -> None:
        self._apply(out, delta=False)

    async def stream(self, streams: list[PrimedStream], emit: Emit) -> None:
        for j in range(self.params.n):
            await emit(
                self._chunk(
                    [ChatChunkChoice(index=j, delta=DeltaMessage(role=self.role, content=""))]
                )
            )

        async def on_output(_i: int, out: RequestOutput) -> None:
            for fragment in self._apply(out, delta=True):
                await emit(self._chunk([fragment]))

        await pump(streams, on_output)
        if self.req.stream_options is not None and self.req.stream_options.include_usage:
            await emit(self._chunk([], usage=True))

    def _chunk(self, choices: list[ChatChunkChoice], usage: bool = False) -> ChatCompletionChunk:
        return ChatCompletionChunk(
            id=self.id,
            created=self.created,
            model=self.model,
            choices=choices,
            usage=self.usage.info() if usage else None,
        )

    def response(self) -> ChatCompletionResponse:
        choices = [
            ChatChoice(
                index=index,
                message=ChatResponseMessage(role=self.role, content=c.text),
                logprobs=c.logprobs,
                finish_reason=c.finish_reason,
                stop_reason=c.stop_reason,
            )
            for index, c in sorted(self.choices.items())
        ]
        return ChatCompletionResponse(
            id=self.id,
            created=self.created,
            model=self.model,
            choices=choices,
            usage=self.usage.info(),
        )
