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
the step it was filled for comes back. ``_lock`` guards the bookkeeping between them
(``_cond`` waits on it).

Reasoning models (``reasoning``: a :class:`~.reasoning_gate.ReasoningGate` from
``--reasoning-parser``): the constraint applies to the answer only, as in vLLM. A request
whose reasoning is open gets all-allowed rows and its tokens are not fed to the matcher;
the tokens after the reasoning ends are. Whether the reasoning is open at the start is
the request's ``reasoning_ended`` where the server resolved it (from the request's
chat_template_kwargs, as the reasoning parser thinks), else the gate's reading of the
prompt (a ``<think>`` left open; Granite's thinking prompt; the parser's thinking without
kwargs). Where the model may open it with its first token (a single-token opener, allowed
beside the grammar there) and where it ends are the gate's to say, from tokens alone: a
rebuilt matcher replays to the same place.
"""

from __future__ import annotations

import contextlib
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
from actorllm.structured_output.reasoning_gate import PromptState, ReasoningGate

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
        # Fills whose rows still wait for tokens in flight (async scheduling), oldest
        # first; under _lock. The accept (or remove) that feeds a fill's last awaited row
        # runs it at once, on the loop: no thread to wake, nothing to wait for.
        self._awaiting: list[_Fill] = []
        # Taken as ``with self._lock`` (the C lock's own enter and exit), never ``with
        # self._cond``: Condition's __enter__/__exit__ are Python frames, and a Ctrl-C
        # landing in one leaves the lock held for good (engine/api/step_outputs.py).
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)  # a fill's awaited rows were fed
        self._closed = False  # under _lock
        # Fills whose rows are all fed run here, beside the step's forward pass, once the
        # worker starts them. One thread per manager: fills are short and ordered. A fill
        # nobody has begun when the worker asks for its rows is run by the worker itself.
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
            state = reasoning_start(self.reasoning, request)
            if state == "open":
                self._reasoning_tail[rid] = []
            elif state == "may_open":
                self._may_open.add(rid)
        with self._lock:
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
            ready = None
            with self._lock:
                fed = self._fed.get(req_id)
                if fed is not None:
                    fed += len(token_ids)
                    self._fed[req_id] = fed
                    if self._awaiting:
                        ready = self._feed_awaiting(req_id, fed)
            if ready:
                for fill in ready:
                    fill.run()

    def _feed_awaiting(self, req_id: str, fed: int | None) -> list[_Fill]:
        """Under ``_lock``: ``req_id`` now has ``fed`` tokens (None: removed). The fills
        whose last awaited row that was (taken off ``_awaiting``, waiters woken)."""
        ready: list[_Fill] = []
        for fill in self._awaiting:
            need = fill.awaited.get(req_id)
            if need is not None and (fed is None or need <= fed):
                del fill.awaited[req_id]
                if not fill.awaited:
                    ready.append(fill)
        if ready:
            self._awaiting = [f for f in self._awaiting if f.awaited]
            self._cond.notify_all()
        return ready

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
        runs (the worker starts the fill as the step reaches it, and waits for the rows
        just before sampling). ``after[i]``: the number of output tokens row ``i`` follows,
        counting tokens still in flight (async scheduling); its fill waits until they are
        fed. None: all are fed already."""
        ids = list(req_ids)
        fill = _Fill(self._fill_pool, self._fill, ids)
        if after is not None:
            with self._lock:
                fed = self._fed
                fill.awaited = {r: n for r, n in zip(ids, after, strict=True) if fed.get(r, n) < n}
                if fill.awaited:
                    self._awaiting.append(fill)
        waits = bool(fill.awaited)
        return GrammarBitmask(req_ids=ids, bitmask=fill, waits_for_inflight=waits)

    def _fill(self, req_ids: list[str], awaited: dict[str, int]) -> np.ndarray:
        """Wait for the rows' tokens still in flight (``awaited``, emptied as they are
        fed), then fill the rows ([R, W]). On the fill thread, the loop or the worker."""
        mask = np.zeros((len(req_ids), self._width), dtype=np.int32)  # [R, W]
        rows: list[int] = []
        matchers: list[Matcher] = []
        opens: list[int] = []  # rows that may also open a reasoning block
        with self._lock:
            self._wait_fed(awaited)
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

    def _wait_fed(self, awaited: dict[str, int]) -> None:
        """Under ``_lock``: block until ``awaited`` is empty (accept and remove empty it),
        or the manager is closed."""
        deadline = time.monotonic() + FILL_TIMEOUT_S
        while awaited and not self._closed:
            if not self._cond.wait(max(0.0, deadline - time.monotonic())):
                rid = next(iter(awaited))
                raise TimeoutError(f"request {rid}: its in-flight token never came")

    def remove(self, req_id: str) -> None:
        """Forget ``req_id``; a fill waiting for its token stops waiting (its row is not
        read: the request finished meanwhile)."""
        with self._lock:
            self._fed.pop(req_id, None)
            ready = self._feed_awaiting(req_id, None) if self._awaiting else []
        self._pending.pop(req_id, None)
        self._matchers.pop(req_id, None)
        self._terminated.discard(req_id)
        self._reasoning_tail.pop(req_id, None)
        self._may_open.discard(req_id)
        for fill in ready:
            fill.run()

    def close(self) -> None:
        """The owning scheduler is gone: end every wait (those steps' results are dropped)
        and let the fill thread go."""
        with self._lock:
            self._closed = True
            self._awaiting = []
            self._cond.notify_all()
        self._fill_pool.shutdown(wait=False)

    def statistics(self) -> dict[str, int]:
        return {"compiling": len(self._pending), "matchers": len(self._matchers)}


@final
class _Fill:
    """One step's bitmask fill, run once by whoever comes first: the loop, as it feeds the
    last token the rows wait for (async scheduling); the fill thread, which the worker
    starts as the step reaches it (rows fed already); or the worker, asking for the rows
    before either has begun. Not started when the scheduler builds the step: waking the
    fill thread there takes the GIL from the loop just before it sends the step (about
    1 ms a step at 64 rows, the worker idle meanwhile). The ``Future`` part the worker
    and tests use: ``result()`` and ``done()``."""

    def __init__(
        self,
        pool: ThreadPoolExecutor,
        fn: Callable[[list[str], dict[str, int]], np.ndarray],
        req_ids: list[str],
    ) -> None:
        self._pool = pool
        self._fn = fn
        self._req_ids = req_ids
        # {req_id: output tokens its row follows}, rows whose tokens are still in flight;
        # emptied by the manager under its lock as they are fed.
        self.awaited: dict[str, int] = {}
        self._claim = threading.Lock()  # held by whoever runs the fill, never released
        self._done = threading.Event()
        self._value: np.ndarray | None = None
        self._error: BaseException | None = None

    def start(self) -> None:
        """Run the fill on the fill thread if its rows are fed (else the loop runs it when
        they are); a no-op once begun, or after ``close`` (then :meth:`result` runs it)."""
        if not self._claim.locked() and not self.awaited:
            with contextlib.suppress(RuntimeError):  # the pool is shut down
                self._pool.submit(self.run)

    def run(self) -> None:
        """Fill, unless another thread has begun to."""
        if not self._claim.acquire(blocking=False):
            return
        try:
            self._value = self._fn(self._req_ids, self.awaited)
        except BaseException as exc:  # the caller of result() gets it
            self._error = exc
        finally:
            self._done.set()

    def done(self) -> bool:
        return self._done.is_set()

    def result(self) -> np.ndarray:
        """The [R, W] rows; filled here if no thread has begun, else waited for."""
        self.run()
        self._done.wait()
        if self._error is not None:
            raise self._error
        assert self._value is not None
        return self._value


def _allow_only(mask: np.ndarray, row: int, token_ids: list[int]) -> None:
    words = mask.view(np.uint32)  # [R, W]
    words[row] = 0
    for t in token_ids:
        words[row, t // 32] |= np.uint32(1 << (t % 32))


def reasoning_start(gate: ReasoningGate, request: Request) -> PromptState:
    """Where ``request``'s output starts: as the server resolved it (``reasoning_ended``,
    from the request's chat_template_kwargs), else as the gate reads the prompt."""
    if request.reasoning_ended is not None:
        return "closed" if request.reasoning_ended else "open"
    return gate.prompt_state(list(request.prompt_token_ids), gate.thinking)
