"""Chat deltas -> the Cohere v2 stream's events, as vLLM's ``_chat_completion_stream_to_v2``.

A stream is ``message-start`` (the chat's id, ``{"message": {"role": "assistant"}}``),
then blocks: a thinking or text block is ``content-start``, its ``content-delta``s and
``content-end`` (their ``index`` counts content blocks); a tool call is
``tool-call-start`` (id, name and its first arguments), ``tool-call-delta``s and
``tool-call-end`` (their ``index`` is the call's). A block of another kind closes the
open one. A server started with ``--no-cohere-is-reasoning-model`` streams reasoning as
``tool-plan-delta`` events (no start or end) instead of a thinking block. The last event
is ``message-end`` (finish reason and usage; or, when the engine failed, the error and
finish reason ERROR); ``data: [DONE]`` follows it.

With ``logprobs``, a ``content-delta`` carries Cohere's ``logprobs`` item for the tokens
sampled since the last one (their text, ids and logprobs); vLLM's stream leaves them out.
Tokens that only made tool calls come with no content event, so with no logprobs (as
Cohere's logprobs are for content).

:class:`EventWriter` holds no I/O: :meth:`feed` takes one chat delta and returns the
events it makes, :meth:`end` the last ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from actorllm.entrypoints.cohere.outcome import finish_reason_of, usage_of
from actorllm.entrypoints.openai.protocol.chat_response import ChatChunkChoice, DeltaToolCall
from actorllm.entrypoints.openai.protocol.usage import UsageInfo

Event = dict[str, Any]
Block = Literal["thinking", "text", "tool_call"]


def message_start(chat_id: str) -> Event:
    return {"type": "message-start", "id": chat_id, "delta": {"message": {"role": "assistant"}}}


def message_failed(message: str) -> Event:
    """The ``message-end`` of a stream the engine failed (vLLM's: no id, no usage)."""
    return {"type": "message-end", "delta": {"error": message, "finish_reason": "ERROR"}}


def _content(kind: str, index: int, content: dict[str, str]) -> Event:
    return {"type": kind, "index": index, "delta": {"message": {"content": content}}}


def _call(kind: str, index: int, call: dict[str, Any]) -> Event:
    return {"type": kind, "index": index, "delta": {"message": {"tool_calls": call}}}


@dataclass(slots=True)
class EventWriter:
    """The open block and what the stream has seen so far."""

    reasoning_model: bool = True  # --cohere-is-reasoning-model
    block: Block | None = None  # the open block's kind (None: none open)
    index: int = 0  # the open block's index: a content block's, or a tool call's
    next_content: int = 0  # the next content block's index
    calls_seen: set[int] = field(default_factory=set)  # tool call indices started
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    # the logprobs of tokens not yet sent with a content-delta: [(token, id, logprob)]
    pending: list[tuple[str, int, float]] = field(default_factory=list)

    def _close(self) -> list[Event]:
        if self.block is None:
            return []
        kind = "tool-call-end" if self.block == "tool_call" else "content-end"
        self.block = None
        return [{"type": kind, "index": self.index}]

    def _content_delta(self, block: Literal["thinking", "text"], text: str) -> list[Event]:
        events: list[Event] = []
        if self.block != block:
            events += self._close()
            self.block, self.index = block, self.next_content
            self.next_content += 1
            events.append(_content("content-start", self.index, {"type": block, block: ""}))
        events.append(_content("content-delta", self.index, {block: text}))
        return events

    def _reasoning(self, text: str) -> list[Event]:
        if self.reasoning_model:
            return self._content_delta("thinking", text)
        plan = {"type": "tool-plan-delta", "delta": {"message": {"tool_plan": text}}}
        return [*self._close(), plan]

    def _tool_call(self, call: DeltaToolCall) -> list[Event]:
        fn = call.function
        if call.index not in self.calls_seen:  # a new call: its start carries what came
            events = self._close()
            self.calls_seen.add(call.index)
            self.block, self.index = "tool_call", call.index
            start = {
                "id": call.id or "",
                "type": "function",
                "function": {
                    "name": (fn.name if fn else None) or "",
                    "arguments": (fn.arguments if fn else None) or "",
                },
            }
            return [*events, _call("tool-call-start", call.index, start)]
        if fn is None or not fn.arguments:
            return []
        return [_call("tool-call-delta", call.index, {"function": {"arguments": fn.arguments}})]

    def _hold_logprobs(self, fragment: ChatChunkChoice) -> None:
        entries = fragment.logprobs.content if fragment.logprobs is not None else None
        if entries and fragment.token_ids is not None:
            ids = fragment.token_ids
            self.pending += [(e.token, i, e.logprob) for e, i in zip(entries, ids, strict=True)]

    def _send_logprobs(self, events: list[Event]) -> None:
        """The held logprobs on this fragment's last content-delta, if it made one."""
        deltas = [e for e in events if e["type"] == "content-delta"]
        if not deltas or not self.pending:
            return
        tokens, ids, logprobs = zip(*self.pending, strict=True)
        deltas[-1]["logprobs"] = {
            "text": "".join(tokens),
            "token_ids": list(ids),
            "logprobs": list(logprobs),
        }
        self.pending.clear()

    def feed(self, fragment: ChatChunkChoice) -> list[Event]:
        if fragment.finish_reason is not None:
            self.finish_reason, self.stop_reason = fragment.finish_reason, fragment.stop_reason
        self._hold_logprobs(fragment)
        d = fragment.delta
        events: list[Event] = []
        if d.reasoning_content:
            events += self._reasoning(d.reasoning_content)
        if d.content:
            events += self._content_delta("text", d.content)
        for call in d.tool_calls or []:
            events += self._tool_call(call)
        self._send_logprobs(events)
        return events

    def end(self, chat_id: str, usage: UsageInfo | None) -> list[Event]:
        """The open block's end and ``message-end``."""
        delta: dict[str, Any] = {
            "finish_reason": finish_reason_of(self.finish_reason, self.stop_reason)
        }
        if usage is not None:
            delta["usage"] = msgspec.to_builtins(usage_of(usage))
        return [*self._close(), {"type": "message-end", "id": chat_id, "delta": delta}]
