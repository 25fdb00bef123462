"""Chat deltas -> the Messages stream's events, as vLLM's ``message_stream_converter``.

A stream is ``message_start`` (usage: the prompt, no output yet), then content blocks,
each ``content_block_start``, its deltas (``thinking_delta``, ``text_delta``,
``input_json_delta``), and ``content_block_stop`` — a thinking block sends a
``signature_delta`` (a random hex string, vLLM's) before it stops — and at the end
``message_delta`` (stop reason, stop sequence, usage) and ``message_stop``. Text that
comes while a tool_use block is open is held and sent as a text block after it. vLLM
sends no ``ping``.

:class:`BlockWriter` holds no I/O: :meth:`feed` takes one chat delta and returns the
events it makes, :meth:`close` the last ones.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from actorllm.entrypoints.anthropic.protocol import StopReason
from actorllm.entrypoints.openai.protocol.chat_response import ChatChunkChoice

Event = dict[str, Any]


def stop_reason_of(
    finish_reason: str | None,
    stop_reason: int | str | None,
    *,
    tool_used: bool,
    tool_complete: bool,
) -> tuple[StopReason | None, str | None]:
    """A chat finish reason as Anthropic's ``(stop_reason, stop_sequence)`` (vLLM's
    ``_to_anthropic_stop_reason``): ``max_tokens`` wins; complete tool calls are
    ``tool_use`` even when a stop string matched (a call it cut short must not run);
    a matched stop string (a str; a stop token id is not one) is ``stop_sequence``."""
    if finish_reason == "length":
        return "max_tokens", None
    if finish_reason not in ("stop", "tool_calls"):
        return None, None
    if tool_complete:
        return "tool_use", None
    if isinstance(stop_reason, str):
        return "stop_sequence", stop_reason
    if finish_reason == "tool_calls" or tool_used:
        return "tool_use", None
    return "end_turn", None


def is_json(text: str) -> bool:
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True


def _delta(index: int, **delta: Any) -> Event:
    return {"type": "content_block_delta", "delta": delta, "index": index}


@dataclass(slots=True)
class BlockWriter:
    """The open content block and what the stream has seen so far."""

    index: int = 0  # the next block's index
    kind: str | None = None  # the open block's type (None: none open)
    signature: str | None = None  # an open thinking block's, sent before it stops
    tool_use_id: str | None = None  # an open tool_use block's id
    held: list[str] = field(default_factory=list)  # text that came inside a tool_use block
    ids: dict[int, str] = field(default_factory=dict)  # {tool call index: its id}
    tool_used: bool = False
    last_args: list[str] = field(default_factory=list)  # the latest tool call's arguments
    finish_reason: str | None = None
    stop_reason: int | str | None = None

    def _start(self, block: dict[str, Any]) -> Event:
        self.kind = block["type"]
        self.signature = uuid.uuid4().hex if self.kind == "thinking" else None
        self.tool_use_id = block.get("id") if self.kind == "tool_use" else None
        return {"type": "content_block_start", "content_block": block, "index": self.index}

    def _stop(self) -> list[Event]:
        if self.kind is None:
            return []
        events = []
        if self.signature is not None:
            events.append(_delta(self.index, type="signature_delta", signature=self.signature))
        events.append({"type": "content_block_stop", "index": self.index})
        self.kind = self.signature = self.tool_use_id = None
        self.index += 1
        return events

    def _stop_and_flush(self) -> list[Event]:
        """Close the open block; held text becomes a text block of its own."""
        held = "".join(self.held)
        self.held.clear()
        events = self._stop()
        if held:
            events.append(self._start({"type": "text", "text": ""}))
            events.append(_delta(self.index, type="text_delta", text=held))
            events += self._stop()
        return events

    def _open(self, kind: str, block: dict[str, Any]) -> list[Event]:
        if self.kind == kind:
            return []
        return [*self._stop_and_flush(), self._start(block)]

    def feed(self, fragment: ChatChunkChoice) -> list[Event]:
        if fragment.finish_reason is not None:
            self.finish_reason, self.stop_reason = fragment.finish_reason, fragment.stop_reason
        d = fragment.delta
        events: list[Event] = []
        if d.reasoning_content:
            events += self._open("thinking", {"type": "thinking", "thinking": ""})
            events.append(_delta(self.index, type="thinking_delta", thinking=d.reasoning_content))
        if d.content:
            if self.kind == "tool_use":
                self.held.append(d.content)
            else:
                events += self._open("text", {"type": "text", "text": ""})
                events.append(_delta(self.index, type="text_delta", text=d.content))
        for call in d.tool_calls or []:
            events += self._tool_call(call.index, call.id, call.function)
        return events

    def _tool_call(self, index: int, call_id: str | None, fn: Any) -> list[Event]:
        events: list[Event] = []
        name = fn.name if fn is not None else None
        args = fn.arguments if fn is not None else None
        if call_id is not None:
            self.ids[index] = call_id
            if self.tool_use_id != call_id and name is not None:  # a new call
                events += self._stop_and_flush()
                self.tool_used, self.last_args = True, []
                block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
                events.append(self._start(block))
        else:
            call_id = self.ids.get(index)
        if args and call_id is not None and self.tool_use_id == call_id:
            self.last_args.append(args)
            events.append(_delta(self.index, type="input_json_delta", partial_json=args))
        return events

    def close(self) -> list[Event]:
        """The open block's end (and any held text)."""
        return self._stop_and_flush()

    def stop(self) -> tuple[StopReason | None, str | None]:
        return stop_reason_of(
            self.finish_reason or "stop",
            self.stop_reason,
            tool_used=self.tool_used,
            tool_complete=self.tool_used and is_json("".join(self.last_args)),
        )
