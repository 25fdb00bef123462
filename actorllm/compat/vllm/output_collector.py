"""vLLM's ``RequestOutputCollector``: what ``AsyncLLM.add_request`` returns, one request's
outputs for a consumer that pulls them (``get`` / ``get_nowait``) instead of iterating
``generate``.

    q = await llm.add_request("r1", "Hello", SamplingParams(output_kind=DELTA))
    while not (out := q.get_nowait() or await q.get()).finished:
        print(out.outputs[0].text, end="")

The engine's thread posts each output into a memory stream on the caller's loop (as for
``generate``: :mod:`caller_loop`); a read takes what is there and folds the outputs that
arrived since the last read into one (vLLM's rule: DELTA pieces aggregate, other kinds the
newest replaces), so a consumer that falls behind reads one output, not a backlog. The
error that ended the request is raised by the read that reaches it. Abandoning the
collector leaves the request running, as in vLLM; ``AsyncLLM.abort`` stops it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import final

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

from actorllm.compat.vllm.bridge import END
from actorllm.core.outputs import RequestOutput
from actorllm.core.sampling_params import RequestOutputKind
from actorllm.engine.api.step_outputs import merge_outputs
from actorllm.engine.errors import RequestFailedError


@final
class RequestOutputCollector:
    """One request's outputs, read on the caller's loop (not thread-safe)."""

    def __init__(
        self,
        output_kind: RequestOutputKind,
        request_id: str,
        receive: MemoryObjectReceiveStream[object],
        on_end: Callable[[], None],
    ) -> None:
        self.aggregate = output_kind == RequestOutputKind.DELTA  # vLLM's attribute
        self.request_id = request_id
        self._kind = output_kind
        self._receive = receive
        self._on_end = on_end  # the request is over (finished, failed or ended)
        self._pending: object = None  # an error or the end, read while folding

    async def get(self) -> RequestOutput:
        """The outputs since the last read, folded into one; waits for the first."""
        while True:
            out = self.get_nowait()
            if out is not None:
                return out
            item = await self._receive.receive()
            self._pending = item  # (read back by get_nowait, folded with what follows)

    def get_nowait(self) -> RequestOutput | None:
        """The outputs since the last read, folded into one; None when there are none."""
        first, self._pending = self._pending, None
        out: RequestOutput | None = None
        while True:
            if first is not None:
                item, first = first, None
            else:
                try:
                    item = self._receive.receive_nowait()
                except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                    return out
            if isinstance(item, RequestOutput):
                out = item if out is None else merge_outputs(out, item, self._kind)
                if out.finished:
                    self._end()
                    return out
                continue
            if out is not None:  # hand out what came first; the end on the next read
                self._pending = item
                return out
            self._end()
            if item is END:
                raise RequestFailedError(self.request_id, "it ended without a final output")
            assert isinstance(item, BaseException)
            raise item

    def close(self) -> None:
        """vLLM's: stop reading (the request goes on until it finishes or is aborted)."""
        self._receive.close()

    def _end(self) -> None:
        self._on_end()
        self._receive.close()
