"""The Responses stream: chat deltas in, vLLM 0.32's events out (its
``SimpleStreamingEventProcessor``).

Each delta goes to one output item: reasoning (``--reasoning-parser``), the message's text,
or a function call (one item per call index). Moving to another item closes the open one
(its ``...done`` events, then ``response.output_item.done``) and opens the next
(``response.output_item.added``, and for text ``response.content_part.added``)::

    response.created, response.in_progress,
    response.output_item.added, response.content_part.added,
    response.output_text.delta ... response.output_text.done,
    response.content_part.done, response.output_item.done, ..., response.completed

Every event carries a ``sequence_number`` from 0, in the order sent (:class:`Sequencer`).
The items closed on the way are the response's ``output`` (same ids as streamed).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from actorllm.entrypoints.openai.protocol.chat_response import DeltaMessage, DeltaToolCall
from actorllm.entrypoints.openai.responses.response import (
    FunctionCallOutput,
    OutputItem,
    OutputMessage,
    OutputTextPart,
    ReasoningOutput,
    ReasoningTextPart,
    TokenLogprob,
)

Event = dict[str, Any]


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class Sequencer:
    """Numbers events from 0 as they are sent."""

    def __init__(self, emit: Callable[[Any], Awaitable[None]]) -> None:
        self._emit = emit
        self.next = 0

    async def send(self, event: Event) -> None:
        event["sequence_number"] = self.next
        self.next += 1
        await self._emit(event)


def _stream_logprobs(lps: list[TokenLogprob]) -> list[dict[str, Any]]:
    """The delta event's logprob shape: no bytes (OpenAI's ``response_text_delta_event``)."""
    return [
        {
            "token": lp.token,
            "logprob": lp.logprob,
            "top_logprobs": [{"token": t.token, "logprob": t.logprob} for t in lp.top_logprobs],
        }
        for lp in lps
    ]


def _builtins(item: Any) -> Any:
    return msgspec.to_builtins(item)


@dataclass
class _Open:
    kind: str  # "message", "reasoning", "function_call"
    item_id: str
    text: str = ""  # the text, reasoning or arguments so far
    logprobs: list[TokenLogprob] = field(default_factory=list)
    call_index: int | None = None
    call_id: str = ""
    name: str = ""


@dataclass
class EventWriter:
    """Turns one choice's deltas into events; ``output``: the items closed so far."""

    output: list[OutputItem] = field(default_factory=list)
    _open: _Open | None = None

    @property
    def _index(self) -> int:
        return len(self.output)

    def feed(self, delta: DeltaMessage, logprobs: list[TokenLogprob]) -> list[Event]:
        events: list[Event] = []
        if delta.reasoning_content:
            events += self._to("reasoning")
            events += self._reasoning_delta(delta.reasoning_content)
        if delta.content:
            events += self._to("message")
            events += self._text_delta(delta.content, logprobs)
        for call in delta.tool_calls or []:
            events += self._call_delta(call)
        return events

    def close(self) -> list[Event]:
        """Close the open item (the end of the stream)."""
        return self._close()

    # -- opening and closing ---------------------------------------------------------------

    def _to(self, kind: str, call: DeltaToolCall | None = None) -> list[Event]:
        cur = self._open
        same_call = call is None or (cur is not None and cur.call_index == call.index)
        if cur is not None and cur.kind == kind and same_call:
            return []
        events = self._close()
        if kind == "message":
            self._open = _Open("message", new_id("msg"))
            item = OutputMessage(id=self._open.item_id, content=[], status="in_progress")
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        elif kind == "reasoning":
            self._open = _Open("reasoning", new_id("rs"))
            item = ReasoningOutput(id=self._open.item_id, status="in_progress")  # type: ignore[assignment]
            part = {"type": "reasoning_text", "text": ""}
        else:
            assert call is not None and call.function is not None
            self._open = _Open(
                "function_call",
                new_id("fc"),
                call_index=call.index,
                call_id=call.id or new_id("call"),
                name=call.function.name or "",
            )
            item = FunctionCallOutput(  # type: ignore[assignment]
                id=self._open.item_id,
                call_id=self._open.call_id,
                name=self._open.name,
                arguments="",
                status="in_progress",
            )
        events.append(
            {
                "type": "response.output_item.added",
                "output_index": self._index,
                "item": _builtins(item),
            }
        )
        if kind != "function_call":
            events.append(
                {
                    "type": "response.content_part.added",
                    "output_index": self._index,
                    "item_id": self._open.item_id,
                    "content_index": 0,
                    "part": part,
                }
            )
        return events

    def _close(self) -> list[Event]:
        cur, self._open = self._open, None
        if cur is None:
            return []
        index, where = self._index, {"item_id": cur.item_id, "output_index": self._index}
        events: list[Event]
        item: OutputItem
        if cur.kind == "message":
            part = OutputTextPart(text=cur.text, logprobs=cur.logprobs or None)
            item = OutputMessage(id=cur.item_id, content=[part] if cur.text else [])
            events = [
                {
                    "type": "response.output_text.done",
                    **where,
                    "content_index": 0,
                    "text": cur.text,
                    "logprobs": [],
                },
                {
                    "type": "response.content_part.done",
                    **where,
                    "content_index": 0,
                    "part": _builtins(part),
                },
            ]
        elif cur.kind == "reasoning":
            rpart = ReasoningTextPart(text=cur.text)
            item = ReasoningOutput(id=cur.item_id, content=[rpart], status="completed")
            events = [
                {
                    "type": "response.reasoning_text.done",
                    **where,
                    "content_index": 0,
                    "text": cur.text,
                },
                {
                    "type": "response.content_part.done",
                    **where,
                    "content_index": 0,
                    "part": _builtins(rpart),
                },
            ]
        else:
            item = FunctionCallOutput(
                id=cur.item_id, call_id=cur.call_id, name=cur.name, arguments=cur.text
            )
            events = [
                {
                    "type": "response.function_call_arguments.done",
                    **where,
                    "arguments": cur.text,
                    "name": cur.name,
                }
            ]
        events.append(
            {"type": "response.output_item.done", "output_index": index, "item": _builtins(item)}
        )
        self.output.append(item)
        return events

    # -- deltas ----------------------------------------------------------------------------

    def _text_delta(self, text: str, logprobs: list[TokenLogprob]) -> list[Event]:
        cur = self._open
        assert cur is not None
        cur.text += text
        cur.logprobs += logprobs
        return [
            {
                "type": "response.output_text.delta",
                "content_index": 0,
                "output_index": self._index,
                "item_id": cur.item_id,
                "delta": text,
                "logprobs": _stream_logprobs(logprobs),
            }
        ]

    def _reasoning_delta(self, text: str) -> list[Event]:
        cur = self._open
        assert cur is not None
        cur.text += text
        return [
            {
                "type": "response.reasoning_text.delta",
                "item_id": cur.item_id,
                "output_index": self._index,
                "content_index": 0,
                "delta": text,
            }
        ]

    def _call_delta(self, call: DeltaToolCall) -> list[Event]:
        cur = self._open
        if cur is None or cur.kind != "function_call" or cur.call_index != call.index:
            if call.function is None or call.function.name is None:
                return []  # arguments before a name: no call to attach them to
            events = self._to("function_call", call)
        else:
            events = []
        cur = self._open
        assert cur is not None
        args = call.function.arguments if call.function is not None else None
        if args:
            cur.text += args
            events.append(
                {
                    "type": "response.function_call_arguments.delta",
                    "output_index": self._index,
                    "item_id": cur.item_id,
                    "delta": args,
                }
            )
        return events
