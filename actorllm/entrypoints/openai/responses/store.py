"""The responses store: finished responses kept in memory for ``previous_response_id`` and
``GET /v1/responses/{id}``, the least recently used dropped beyond :data:`MAX_STORED`.

Off by default, as vLLM's (whose ``store`` then does nothing, and every id is unknown);
``ACTORLLM_ENABLE_RESPONSES_API_STORE=1`` (or vLLM's ``VLLM_ENABLE_RESPONSES_API_STORE=1``)
switches it on. vLLM's store grows without bound; this one holds the last
:data:`MAX_STORED` responses (``ACTORLLM_RESPONSES_API_STORE_MAX`` to change it).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

from actorllm.entrypoints.openai.protocol.chat_request import ChatMessage
from actorllm.entrypoints.openai.responses.response import ResponsesResponse

MAX_STORED = 1024
_TRUE = ("1", "true", "yes", "on")


@dataclass(frozen=True, slots=True)
class Stored:
    response: ResponsesResponse
    messages: list[ChatMessage]  # the conversation up to and including the response's input


class ResponseStore:
    """Response id -> :class:`Stored`, least recently used first out."""

    def __init__(self, *, enabled: bool, max_size: int = MAX_STORED) -> None:
        if max_size < 1:
            raise ValueError(f"the responses store holds at least 1 response, got {max_size}.")
        self.enabled = enabled
        self.max_size = max_size
        self._items: OrderedDict[str, Stored] = OrderedDict()

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> ResponseStore:
        flag = env.get("ACTORLLM_ENABLE_RESPONSES_API_STORE")
        if flag is None:
            flag = env.get("VLLM_ENABLE_RESPONSES_API_STORE", "0")
        size = env.get("ACTORLLM_RESPONSES_API_STORE_MAX")
        try:
            max_size = int(size) if size else MAX_STORED
        except ValueError:
            raise ValueError(
                f"ACTORLLM_RESPONSES_API_STORE_MAX must be a whole number, got {size!r}."
            ) from None
        return cls(enabled=flag.strip().lower() in _TRUE, max_size=max_size)

    def __len__(self) -> int:
        return len(self._items)

    def get(self, response_id: str) -> Stored | None:
        found = self._items.get(response_id)
        if found is not None:
            self._items.move_to_end(response_id)
        return found

    def put(self, response: ResponsesResponse, messages: list[ChatMessage]) -> None:
        if not self.enabled:
            return
        self._items[response.id] = Stored(response, messages)
        self._items.move_to_end(response.id)
        while len(self._items) > self.max_size:
            self._items.popitem(last=False)
