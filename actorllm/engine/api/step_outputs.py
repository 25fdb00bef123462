"""What ``LLMEngine.step()`` hands out: per request, everything it produced since the last
step, as one ``RequestOutput``.

Theory of operation
-------------------
The engine runs on its own loop thread and reports each request's outputs as they come
(one per engine step for CUMULATIVE and DELTA, one at the end for FINAL_ONLY). The caller's
``step()`` may come less often than engine steps, so outputs that arrive between two calls
are merged, per request, into what one output covering that span would have been:

* CUMULATIVE and FINAL_ONLY: each output already holds everything so far, so the newest
  completion of each sample index wins;
* DELTA: the pieces are concatenated, per sample index (text, token ids, logprobs, token
  weight versions, prompt logprobs); the newest finish reason wins.

Both are ``RequestOutput.add`` (vLLM's fold), on a copy: one fold for every merge.

:class:`PendingOutputs` is the thread-safe mailbox between the loop (``put``/``fail``) and
the caller (``take``). (``messages.StepOutputs`` is the actor message that carries one
engine step's outputs to the output processor.) A request is *unfinished* from ``add``
until ``take`` has returned its final output (or until it is aborted), as with vLLM's
``has_unfinished_requests``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import final

import msgspec

from actorllm.core.errors import DuplicateRequestError
from actorllm.core.outputs import CompletionOutput, RequestOutput
from actorllm.core.sampling_params import RequestOutputKind
from actorllm.engine.errors import EngineError, RequestFailedError


def merge_outputs(old: RequestOutput, new: RequestOutput, kind: RequestOutputKind) -> RequestOutput:
    """One output covering ``old`` then ``new`` (two outputs of one request, in order):
    :meth:`RequestOutput.add` on a copy of ``old`` (neither argument is changed)."""
    merged = msgspec.structs.replace(old, outputs=list(old.outputs))
    merged.add(new, aggregate=kind == RequestOutputKind.DELTA)
    return merged


@dataclass
class _Open:
    """A request added and not yet finished (from the caller's point of view)."""

    token: int  # tells this use of the request id from an earlier, aborted one
    kind: RequestOutputKind
    prompt: str | None
    prompt_token_ids: list[int]
    n: int


@final
class PendingOutputs:
    """Outputs waiting for ``step()``, per request; safe to use from two threads."""

    def __init__(self) -> None:
        # Taken as ``with self._lock`` (the C lock's own enter and exit), not ``with
        # self._cond``: Condition's __enter__/__exit__ are Python frames, and a Ctrl-C that
        # lands in one leaves the lock held (a caller's thread interrupted inside
        # num_unfinished's exit would make the loop thread's next put() block forever).
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)  # take()'s wait for outputs
        # All guarded by _lock.
        self._open: dict[str, _Open] = {}  # {request_id: state}, in order of addition
        self._ready: dict[str, RequestOutput] = {}  # {request_id: merged outputs}
        self._fatal: BaseException | None = None  # the engine died: step() raises this
        self._tokens = 0

    # -- the caller's thread --------------------------------------------------------------

    def add(
        self,
        request_id: str,
        kind: RequestOutputKind,
        prompt: str | None,
        prompt_token_ids: list[int],
        n: int,
    ) -> int:
        """Open a request; returns its token. Raises ``DuplicateRequestError``."""
        with self._lock:
            if request_id in self._open:
                raise DuplicateRequestError(
                    f"request id {request_id!r} is already in use.", param="request_id"
                )
            self._tokens += 1
            self._open[request_id] = _Open(self._tokens, kind, prompt, prompt_token_ids, n)
            return self._tokens

    def abort(self, request_ids: Iterable[str]) -> list[str]:
        """Forget these requests (and their pending outputs); returns those that were open."""
        with self._lock:
            found = [rid for rid in request_ids if self._open.pop(rid, None) is not None]
            for rid in found:
                self._ready.pop(rid, None)
            return found

    def take(self) -> list[RequestOutput]:
        """Every request's merged outputs since the last call; blocks until there is at
        least one, or returns ``[]`` at once when no request is unfinished. Raises the
        error that killed the engine."""
        with self._lock:
            while not self._ready and self._open and self._fatal is None:
                self._cond.wait()
            if self._fatal is not None:
                raise self._fatal
            outs = list(self._ready.values())
            self._ready.clear()
            for out in outs:
                if out.finished:
                    del self._open[out.request_id]
            return outs

    def num_unfinished(self) -> int:
        with self._lock:
            return len(self._open)

    # -- the loop thread ------------------------------------------------------------------

    def put(self, request_id: str, token: int, out: RequestOutput) -> None:
        """An output of the request opened with ``token`` (under the caller's id: the bridge
        renames it); dropped once it was aborted."""
        with self._lock:
            state = self._open.get(request_id)
            if state is None or state.token != token:
                return
            prev = self._ready.get(request_id)
            self._ready[request_id] = out if prev is None else merge_outputs(prev, out, state.kind)
            self._cond.notify_all()

    def fail(self, request_id: str, token: int, exc: BaseException) -> None:
        """The request's stream raised ``exc``. An engine failure ends every ``step()``;
        a failure of this request alone becomes its final output, ``finish_reason="error"``."""
        with self._lock:
            state = self._open.get(request_id)
            if state is None or state.token != token:
                return
            if isinstance(exc, EngineError) and not isinstance(exc, RequestFailedError):
                self._fatal = exc
            else:
                err = _error_output(request_id, state, exc)
                prev = self._ready.get(request_id)
                # The error piece adds no tokens: keep what is pending, end it as "error".
                self._ready[request_id] = (
                    err if prev is None else merge_outputs(prev, err, RequestOutputKind.DELTA)
                )
            self._cond.notify_all()


def _error_output(request_id: str, state: _Open, exc: BaseException) -> RequestOutput:
    return RequestOutput(
        request_id=request_id,
        prompt=state.prompt,
        prompt_token_ids=state.prompt_token_ids,
        prompt_logprobs=None,
        outputs=[
            CompletionOutput(index=i, text="", token_ids=[], finish_reason="error")
            for i in range(state.n)
        ],
        finished=True,
        error=str(exc),
    )
