"""Background responses (``background: true``): the response is stored as ``queued`` and
returned at once; it runs in the server's task group and reads ``queued`` until it ends
(``completed``, ``incomplete`` or ``failed``: vLLM stores a background response again only
when it is done, and clients poll while it is queued), read with ``GET
/v1/responses/{id}``, and ``POST /v1/responses/{id}/cancel`` stops it (``cancelled``; its
engine request is aborted). A run created with ``stream`` too writes its events to an
:class:`EventLog` (``logs``), which the creating request and ``GET ...?stream=true`` read.

A run outlives the HTTP request that started it but not the server: the lifespan's task
group owns every run, so shutting down cancels them.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import msgspec
from anyio.abc import TaskGroup

from actorllm.entrypoints.openai.protocol.chat_request import ChatMessage
from actorllm.entrypoints.openai.responses.event_log import EventLogs
from actorllm.entrypoints.openai.responses.response import ResponsesResponse, Status
from actorllm.entrypoints.openai.responses.store import ResponseStore

logger = logging.getLogger("actorllm.server")

# The run itself: collects the engine's outputs, stores and returns the final response.
Work = Callable[[], Awaitable[ResponsesResponse]]


class BackgroundRuns:
    """The running background responses, by id (one owner: the server's lifespan)."""

    def __init__(self, store: ResponseStore) -> None:
        self.store = store
        self.logs = EventLogs(store.max_size)  # of the runs created with ``stream``
        self._tg: TaskGroup | None = None
        # {response id: (its run's scope, set when the run has ended)}
        self._scopes: dict[str, tuple[anyio.CancelScope, anyio.Event]] = {}

    def attach(self, tg: TaskGroup | None) -> None:
        """The lifespan's task group (None once it closes: no new runs)."""
        self._tg = tg

    def start(
        self, queued: ResponsesResponse, messages: list[ChatMessage], work: Work, abort: Any
    ) -> None:
        """Store ``queued`` and run ``work`` beside the server; ``abort()``: closes the
        run's engine streams when it is cancelled before finishing."""
        if self._tg is None:
            raise RuntimeError("the server is not running background responses")
        self.store.put(queued, messages)
        scope = anyio.CancelScope()
        self._scopes[queued.id] = (scope, anyio.Event())
        self._tg.start_soon(self._run, queued, messages, work, abort, scope)

    async def _run(
        self,
        queued: ResponsesResponse,
        messages: list[ChatMessage],
        work: Work,
        abort: Callable[[], Awaitable[None]],
        scope: anyio.CancelScope,
    ) -> None:
        rid = queued.id
        try:
            with scope:
                await work()  # stores the finished response
                return
            # Cancelled (POST .../cancel): the engine request is aborted with the streams.
            with anyio.CancelScope(shield=True):
                await abort()
            self._set(queued, messages, "cancelled")
        except Exception as exc:  # the engine failed the request: the run failed
            logger.warning("background response %s failed: %s", rid, exc)
            self._set(queued, messages, "failed")
        finally:
            _, ended = self._scopes.pop(rid)
            ended.set()

    def _set(self, queued: ResponsesResponse, messages: list[ChatMessage], status: Status) -> None:
        current = self.store.get(queued.id)
        if current is not None and current.response.status in ("completed", "incomplete"):
            return  # finished meanwhile: keep it
        self.store.put(msgspec.structs.replace(queued, status=status), messages)

    def cancel(self, response_id: str) -> bool:
        """Stop a run still going; False if there is none."""
        run = self._scopes.get(response_id)
        if run is None:
            return False
        run[0].cancel()
        return True

    async def wait(self, response_id: str) -> None:
        """Until the run of ``response_id`` has ended (cancel's answer then reads it)."""
        run = self._scopes.get(response_id)
        if run is not None:
            await run[1].wait()
