"""The requests ``LLM.enqueue`` / ``enqueue_chat`` started and ``wait_for_completion``
has not yet collected.

    ids = llm.enqueue(["Hello", "The sky is"], SamplingParams(max_tokens=16))   # ["0", "1"]
    ids += llm.enqueue_chat([{"role": "user", "content": "Hi"}])                # ["2"]
    outs = llm.wait_for_completion()          # three RequestOutputs, in id order

Theory of operation
-------------------
vLLM's ``enqueue`` adds requests to its synchronous engine, which runs them only inside
``wait_for_completion``. Here the engine runs on its own thread all the time, so an
enqueued request starts at once; the outputs are the same (greedy or seeded). Each request
is a task on the engine's loop (:func:`~actorllm.compat.vllm.offline_requests.final_output`)
whose future this queue keeps, by request id, in enqueue order (which is id order: the
ids come from one counter). ``wait`` blocks on those futures.

The engine validates a request when it takes it up, and tells no one that it accepted
it; so ``LLM.enqueue`` checks each prompt first, as the engine will
(:mod:`~actorllm.compat.vllm.offline_checks`), and this queue only ever gets requests the
engine takes, as vLLM's ``enqueue`` raises for a bad prompt and queues nothing of its call.
Only a prompt of embeddings, which the engine converts and checks, can still fail here,
and raises at ``wait_for_completion`` (after the others have finished, as ``generate``'s).

Cancelling a future cancels its task, whose stream then aborts the request: Ctrl-C in
``wait`` aborts every request still queued. Closing the engine cancels every task, so
nothing waits on a closed engine.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, final

from actorllm.compat.vllm.offline_requests import (
    OfflineRequest,
    UseTqdm,
    final_output,
    progress_bar,
)
from actorllm.core.outputs import RequestOutput
from actorllm.engine.errors import EngineClosedError

if TYPE_CHECKING:
    from actorllm.compat.vllm.engine_thread import EngineThread
    from actorllm.engine.api.async_engine import AsyncEngine

OutputType = type[Any] | tuple[type[Any], ...]


@final
class OfflineQueue:
    """The enqueued requests of one ``LLM``. Not thread-safe: the ``LLM``'s caller only."""

    def __init__(self, thread: EngineThread, engine: AsyncEngine) -> None:
        self._thread = thread
        self._engine = engine
        self._pending: dict[str, Future[RequestOutput]] = {}  # {request_id: its task}

    def add(self, requests: Sequence[OfflineRequest], use_tqdm: UseTqdm) -> list[str]:
        """Start ``requests`` on the engine; returns their ids. If one cannot start (the
        engine was closed), the ones started here are aborted and the error raised."""
        started: list[str] = []
        bar = progress_bar(use_tqdm, len(requests), "Adding requests")
        try:
            for request in requests:
                task = self._thread.spawn(final_output, self._engine, request)
                self._pending[request.request_id] = task
                started.append(request.request_id)
                bar.update(1)
        except BaseException:
            self.abort(started)
            raise
        finally:
            bar.close()
        return started

    def abort(self, request_ids: Sequence[str]) -> None:
        """Abort and forget these requests."""
        for rid in request_ids:
            task = self._pending.pop(rid, None)
            if task is not None:
                task.cancel()

    def wait(self, output_type: OutputType | None, use_tqdm: UseTqdm) -> list[RequestOutput]:
        """Block until every queued request has finished; their final outputs in id order,
        and the queue is empty. The first failed request's error (in id order) is raised
        once all have finished. ``output_type`` (a type or a tuple of them) must admit
        ``RequestOutput``: else ``TypeError``, before waiting, and nothing is forgotten.
        Interrupted (Ctrl-C), every request still queued is aborted."""
        if not self._pending:
            return []
        check_output_type(output_type)
        pending, self._pending = self._pending, {}
        try:  # from here on, an interruption aborts every request of ``pending``
            bar = progress_bar(use_tqdm, len(pending), "Processed prompts")
            with contextlib.closing(bar):
                for _ in concurrent.futures.as_completed(pending.values()):
                    bar.update(1)
        except BaseException:
            for task in pending.values():
                task.cancel()
            raise
        return [_result(rid, task) for rid, task in pending.items()]

    def statistics(self) -> dict[str, int]:
        return {"queued": len(self._pending)}


def check_output_type(output_type: OutputType | None) -> None:
    """vLLM asserts that each output is an ``output_type``; every output here is a
    ``RequestOutput``, so a type that does not admit it is refused up front."""
    if output_type is None:
        return
    try:
        admits = issubclass(RequestOutput, output_type)
    except TypeError:
        raise TypeError(
            f"wait_for_completion(output_type=...) must be a type or a tuple of types, "
            f"got {output_type!r}."
        ) from None
    if not admits:
        raise TypeError(
            f"wait_for_completion(output_type={output_type!r}): the enqueued requests give "
            "RequestOutput (enqueue and enqueue_chat are for generative models)."
        )


def _result(request_id: str, task: Future[RequestOutput]) -> RequestOutput:
    try:
        return task.result()
    except concurrent.futures.CancelledError:
        raise EngineClosedError(
            f"request {request_id} did not finish: the engine was closed"
        ) from None
