"""One scheduler's structured-outputs state: a matcher per request, bitmasks per step.

Implements ``core.scheduler.grammar.GrammarTracker`` over a shared
:class:`~actorllm.structured_output.compiler.GrammarCompiler`. Owned by one scheduler
(incarnation): when the scheduler is rebuilt after a crash, a new manager is built with it
and every matcher is rebuilt from its request's output tokens — the grammar cache outlives
the crash, so that is a cache hit and a replay of tokens.

``on_ready`` is called (from a compile thread) when a grammar that was not cached finishes
compiling, so the owner can wake its scheduler.

Reasoning models (``reasoning``: the token ids that open and close the reasoning block,
from ``--reasoning-parser``): the constraint applies to the answer only, as in vLLM. A
request whose reasoning is still open gets an all-allowed row and its tokens are not fed
to the matcher; the tokens after the closing sequence are. A prompt that already closed
the block (``enable_thinking: false``) starts constrained.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future
from typing import final

import numpy as np

from actorllm.core.request import Request
from actorllm.core.scheduler_output import GrammarBitmask
from actorllm.core.structured_outputs_params import StructuredOutputsError
from actorllm.structured_output.backend import CompiledGrammar, Matcher, bitmask_width
from actorllm.structured_output.compiler import GrammarCompiler

log = logging.getLogger(__name__)


@final
class StructuredOutputManager:
    def __init__(
        self,
        compiler: GrammarCompiler,
        on_ready: Callable[[], None] | None = None,
        reasoning: tuple[list[int], list[int]] | None = None,
    ) -> None:
        self.compiler = compiler
        self.on_ready = on_ready
        self.reasoning = reasoning  # (start ids, end ids) or None
        # {req_id: the last tokens seen while reasoning (to find a multi-token end)}.
        self._reasoning_tail: dict[str, list[int]] = {}
        self._width = bitmask_width(compiler.vocab_size)
        self._pending: dict[str, Future[CompiledGrammar]] = {}  # {req_id: compile}
        self._matchers: dict[str, Matcher] = {}  # {req_id: matcher}, ready requests
        self._terminated: set[str] = set()  # req_ids whose grammar completed

    def add(self, request: Request) -> None:
        so = request.sampling_params.structured_outputs
        assert so is not None
        fut = self.compiler.submit(so.key, so.backend)
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
            raise StructuredOutputsError(f"cannot be compiled: {exc!r}") from exc
        self._matchers[rid] = self.compiler.matcher(compiled)
        if self.reasoning is not None and not _closed_in(request.prompt_token_ids, *self.reasoning):
            self._reasoning_tail[rid] = []
        # Rebuild from tokens: a resumed (or recovered) request's outputs so far.
        if not self.accept(rid, list(request.output_token_ids), replay=True):
            raise StructuredOutputsError(
                "the request's existing output does not match its grammar."
            )
        return True

    def accept(self, req_id: str, token_ids: list[int], replay: bool = False) -> bool:
        tail = self._reasoning_tail.get(req_id)
        if tail is not None:
            token_ids = self._past_reasoning(req_id, tail, token_ids)
        matcher = self._matchers[req_id]
        for tok in token_ids:
            if matcher.is_terminated():
                break
            if not matcher.accept(tok):
                if not replay:
                    log.error("request %s: token %d rejected by its grammar", req_id, tok)
                return False
        if matcher.is_terminated():
            self._terminated.add(req_id)
        return True

    def _past_reasoning(self, req_id: str, tail: list[int], token_ids: list[int]) -> list[int]:
        """The tokens after the reasoning closes (none while it stays open)."""
        assert self.reasoning is not None
        end = self.reasoning[1]
        for i, tok in enumerate(token_ids):
            tail.append(tok)
            if tail[-len(end) :] == end:
                del self._reasoning_tail[req_id]
                return token_ids[i + 1 :]
        del tail[: max(0, len(tail) - len(end))]
        return []

    def is_terminated(self, req_id: str) -> bool:
        return req_id in self._terminated

    def bitmask(self, req_ids: list[str]) -> GrammarBitmask:
        mask = np.zeros((len(req_ids), self._width), dtype=np.int32)  # [R, W]
        for row, rid in enumerate(req_ids):
            if rid in self._reasoning_tail:
                mask[row] = -1  # still reasoning: unconstrained
            else:
                self._matchers[rid].fill_bitmask(mask, row)
        return GrammarBitmask(req_ids=list(req_ids), bitmask=mask)

    def remove(self, req_id: str) -> None:
        self._pending.pop(req_id, None)
        self._matchers.pop(req_id, None)
        self._terminated.discard(req_id)
        self._reasoning_tail.pop(req_id, None)

    def statistics(self) -> dict[str, int]:
        return {"compiling": len(self._pending), "matchers": len(self._matchers)}


def _closed_in(prompt: list[int], start: list[int], end: list[int]) -> bool:
    """Whether the prompt's last reasoning block is closed (its last ``end`` comes after
    its last ``start``); a prompt without ``end`` leaves reasoning to the output."""
    last_end = _rfind(prompt, end)
    return last_end >= 0 and last_end > _rfind(prompt, start)


def _rfind(seq: list[int], sub: list[int]) -> int:
    n = len(sub)
    for i in range(len(seq) - n, -1, -1):
        if seq[i : i + n] == sub:
            return i
    return -1
