"""One scheduler's structured-outputs state: a matcher per request, bitmasks per step.

Implements ``core.scheduler.grammar.GrammarTracker`` over a shared
:class:`~actorllm.structured_output.compiler.GrammarCompiler`. Owned by one scheduler
(incarnation): when the scheduler is rebuilt after a crash, a new manager is built with it
and every matcher is rebuilt from its request's output tokens — the grammar cache outlives
the crash, so that is a cache hit and a replay of tokens.

``on_ready`` is called (from a compile thread) when a grammar that was not cached finishes
compiling, so the owner can wake its scheduler.

Async scheduling: the scheduler may plan a request's next step while the token of its
previous one is still in flight (its output placeholder). That step's row then depends on
the token: :meth:`bitmask` is told how many output tokens each row follows (``after``), and
the fill, on this manager's fill thread, waits until :meth:`accept` has fed that many —
the scheduler applies step N's tokens while step N+1's forward pass runs, so the wait
is hidden behind the forward instead of costing the request every other step. A request
removed meanwhile, or :meth:`close` (the scheduler incarnation is gone), ends the wait.

Threads: the event loop calls everything but the fill; the fill thread reads matcher
state only after its row's tokens are fed, and no row's matcher is advanced again before
the step it was filled for comes back. ``_cond`` guards the bookkeeping between them.

Reasoning models (``reasoning``: a :class:`~.reasoning_gate.ReasoningGate` from
``--reasoning-parser``): the constraint applies to the answer only, as in vLLM. A request
whose reasoning is open gets all-allowed rows and its tokens are not fed to the matcher;
the tokens after the reasoning ends are. Where the reasoning is open at the start (the
prompt left a ``<think>`` open; Granite's thinking prompt), where the model may open it
with its first token (a single-token opener, allowed beside the grammar there) and where
it ends are the gate's to say, from tokens alone: a rebuilt matcher replays to the same
place.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import final

import numpy as np

from actorllm.core.request import Request
from actorllm.core.scheduler_output import GrammarBitmask
from actorllm.core.structured_outputs_params import StructuredOutputsError
from actorllm.structured_output.backend import (
    CompiledGrammar,
    Matcher,
    bitmask_width,
    fill_bitmasks,
)
from actorllm.structured_output.compiler import GrammarCompiler
from actorllm.structured_output.reasoning_gate import ReasoningGate

log = logging.getLogger(__name__)

# How long a fill waits for an in-flight token before failing its step (a broken pipeline,
# never a normal wait: the token is one loop turn away).
FILL_TIMEOUT_S = 60.0


@final
class StructuredOutputManager:
    def __init__(
        self,
        compiler: GrammarCompiler,
        on_ready: Callable[[], None] | None = None,
        reasoning: ReasoningGate | None = None,
    ) -> None:
        self.compiler = compiler
        self.on_ready = on_ready
        self.reasoning = reasoning
        # {req_id: the last tokens seen while reasoning (to find a multi-token end)}.
        self._reasoning_tail: dict[str, list[int]] = {}
        # Requests whose first output token may still open a reasoning block.
        self._may_open: set[str] = set()
        self._width = bitmask_width(compiler.vocab_size)
        self._pending: dict[str, Future[CompiledGrammar]] = {}  # {req_id: compile}
        self._matchers: dict[str, Matcher] = {}  # {req_id: matcher}, ready requests
        self._terminated: set[str] = set()  # req_ids whose grammar completed
        # {req_id: output tokens given to accept (reasoning ones too)}; under _lock.
        self._fed: dict[str, int] = {}
        # {req_id: output tokens the running fill still waits for}, under _lock: the fill
        # thread sleeps until it is empty, and the accept (or remove) that empties it wakes
        # the thread once per step, not once per token (each wake-up takes the GIL from
        # the loop while it is feeding the step's tokens).
        self._awaited: dict[str, int] = {}
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._closed = False  # under _lock
        # Bitmask fills run here, beside the step's forward pass. One thread per manager:
        # fills are short and ordered, and one replica's wait for its token never holds
        # up another replica's fill.
        self._fill_pool = ThreadPoolExecutor(1, thread_name_prefix="grammar-fill")

    def add(self, request: Request) -> None:
        so = request.sampling_params.structured_outputs
        assert so is not None
        fut = self.compiler.submit_for(so)
        self._pending[request.request_id] = fut
        if not fut.done() and self.on_ready is not None:
            on_ready = self.on_ready
            fut.add_done_callback(lambda _f: on_ready())

    def poll(self, request: Request) -> bool:
        rid = request.request_id
        if rid in self._matchers:
            return True
        fut = self._pending[rid]
        if not fut.done():
            return False
        del self._pending[rid]
        try:
            compiled = fut.result()
        except StructuredOutputsError:
            raise
        except Exception as exc:  # a backend bug: still this request's error, not a crash
            so = request.sampling_params.structured_outputs
            param = so.key.param if so is not None else "structured_outputs"
            raise StructuredOutputsError(f"cannot be compiled: {exc!r}", param=param) from exc
        self._matchers[rid] = self.compiler.matcher(compiled)
        if self.reasoning is not None:
            state = self.reasoning.prompt_state(list(request.prompt_token_ids))
            if state == "open":
                self._reasoning_tail[rid] = []
            elif state == "may_open":
                self._may_open.add(rid)
        with self._cond:
            self._fed[rid] = 0
        # Rebuild from tokens: a resumed (or recovered) request's outputs so far.
        if not self.accept(rid, list(request.output_token_ids), replay=True):
            raise StructuredOutputsError(
                "the request's existing output does not match its grammar."
            )
        return True

    def accept(self, req_id: str, token_ids: list[int], replay: bool = False) -> bool:
        try:
            return self._accept(req_id, token_ids, replay)
        finally:  # fed even when rejected: a fill waiting on it must not wait forever
            with self._lock:
                fed = self._fed.get(req_id)
                if fed is not None:
                    fed += len(token_ids)
                    self._fed[req_id] = fed
                    awaited = self._awaited
                    if awaited and awaited.get(req_id, fed + 1) <= fed:
                        del awaited[req_id]
                        if not awaited:
                            self._cond.notify_all()

    def _accept(self, req_id: str, token_ids: list[int], replay: bool) -> bool:
        if token_ids and req_id in self._may_open:
            self._may_open.discard(req_id)
            assert self.reasoning is not None
            if token_ids[0] == self.reasoning.opener:  # the model chose to think first
                self._reasoning_tail[req_id] = []
                token_ids = token_ids[1:]
        tail = self._reasoning_tail.get(req_id)
        if tail is not None:
            token_ids = self._past_reasoning(req_id, tail, token_ids)
        if req_id in self._terminated:  # complete: what follows is the scheduler's to judge
            return True
        matcher = self._matchers[req_id]
        for tok in token_ids:
            if not matcher.accept(tok):
                if not replay:
                    log.error("request %s: token %d rejected by its grammar", req_id, tok)
                return False
            if matcher.is_terminated():  # its stop token: the tokens after it are not fed
                self._terminated.add(req_id)
                break
        return True

    def _past_reasoning(self, req_id: str, tail: list[int], token_ids: list[int]) -> list[int]:
        """The tokens after the reasoning closes (none while it stays open)."""
        assert self.reasoning is not None
        gate = self.reasoning
        for i, tok in enumerate(token_ids):
            tail.append(tok)
            if gate.ends(tail):
                del self._reasoning_tail[req_id]
                return token_ids[i + 1 :]
        del tail[: max(0, len(tail) - gate.window)]
        return []

    def is_terminated(self, req_id: str) -> bool:
        return req_id in self._terminated

    def bitmask(self, req_ids: list[str], after: list[int] | None = None) -> GrammarBitmask:
        """The rows of ``req_ids``, filled on the fill thread while the step's forward pass
        runs (the worker waits for them just before sampling). ``after[i]``: the number of
        output tokens row ``i`` follows, counting tokens still in flight (async
        scheduling); its fill waits until they are fed. None: all are fed already."""
        needs = after if after is not None else [0] * len(req_ids)
        with self._lock:
            waits = any(self._fed.get(r, n) < n for r, n in zip(req_ids, needs, strict=True))
        fut = self._fill_pool.submit(self._fill, list(req_ids), needs)
        return GrammarBitmask(req_ids=list(req_ids), bitmask=fut, waits_for_inflight=waits)

    def _fill(self, req_ids: list[str], needs: list[int]) -> np.ndarray:
        """On the fill thread: wait for the rows' tokens, then fill the rows ([R, W])."""
        mask = np.zeros((len(req_ids), self._width), dtype=np.int32)  # [R, W]
        rows: list[int] = []
        matchers: list[Matcher] = []
        opens: list[int] = []  # rows that may also open a reasoning block
        with self._cond:
            self._wait_fed(req_ids, needs)
            for row, rid in enumerate(req_ids):
                matcher = self._matchers.get(rid)
                if matcher is None or rid in self._reasoning_tail:
                    mask[row] = -1  # still reasoning (or gone): unconstrained
                    continue
                if rid in self._terminated:
                    # Complete, its stop token accepted (ignore_eos went on): only a stop
                    # token may follow, which ends the request. (xgrammar refuses to fill.)
                    _allow_only(mask, row, self.compiler.stop_token_ids)
                else:
                    rows.append(row)
                    matchers.append(matcher)
                if rid in self._may_open:
                    opens.append(row)
        fill_bitmasks(matchers, mask, rows)
        if opens:
            opener = self.reasoning.opener if self.reasoning is not None else None
            assert opener is not None
            words = mask.view(np.uint32)  # [R, W]
            for row in opens:
                words[row, opener // 32] |= np.uint32(1 << (opener % 32))
        return mask

    def _wait_fed(self, req_ids: list[str], needs: list[int]) -> None:
        """Under ``_cond``: block until every row's tokens are fed (a removed request has
        no entry: nothing to wait for, its row is unused), or the manager is closed."""
        fed = self._fed
        self._awaited = {
            rid: need for rid, need in zip(req_ids, needs, strict=True) if fed.get(rid, need) < need
        }
        deadline = time.monotonic() + FILL_TIMEOUT_S
        try:
            while self._awaited and not self._closed:
                if not self._cond.wait(max(0.0, deadline - time.monotonic())):
                    rid = next(iter(self._awaited))
                    raise TimeoutError(f"request {rid}: its in-flight token never came")
        finally:
            self._awaited = {}

    def remove(self, req_id: str) -> None:
        with self._cond:
            self._fed.pop(req_id, None)
            if self._awaited.pop(req_id, None) is not None and not self._awaited:
                self._cond.notify_all()
        self._pending.pop(req_id, None)
        self._matchers.pop(req_id, None)
        self._terminated.discard(req_id)
        self._reasoning_tail.pop(req_id, None)
        self._may_open.discard(req_id)

    def close(self) -> None:
        """The owning scheduler is gone: end every wait (those steps' results are dropped)
        and let the fill thread go."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._fill_pool.shutdown(wait=False)

    def statistics(self) -> dict[str, int]:
        return {"compiling": len(self._pending), "matchers": len(self._matchers)}


def _allow_only(mask: np.ndarray, row: int, token_ids: list[int]) -> None:
    words = mask.view(np.uint32)  # [R, W]
    words[row] = 0
    for t in token_ids:
        words[row, t // 32] |= np.uint32(1 << (t % 32))
