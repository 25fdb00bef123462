"""A user request and its samples: ``n > 1`` fan-out and output aggregation (vLLM's design).

A user request with ``n > 1`` runs in the scheduler as ``n`` independent child requests
``f"{index}_{request_id}"`` with ``n=1``; a seeded request gives child ``i`` the seed
``seed + i`` (wrapped into 64 bits), so the samples differ but each one is reproducible.
With ``n == 1`` the only child *is* the request (same id, same params).

The :class:`UserRequest` aggregates its children's outputs into one ``RequestOutput`` keyed
by the user's id:

* CUMULATIVE / DELTA: an output whenever some child changed (new tokens or finished);
  ``outputs`` holds the changed children, sorted by ``index``.
* FINAL_ONLY: one output, once every child finished, with every child sorted by ``index``.
* ``finished`` is True only when every child finished.

Prompt logprobs are the same for every child; the first child to report them is used.
"""

from __future__ import annotations

from typing import final

from actorllm.core.engine_core_output import FinishReason
from actorllm.core.logprobs import DecodeFn, PromptLogprobsState
from actorllm.core.model_runner_output import TokenLogprobs
from actorllm.core.output_state import RequestState
from actorllm.core.outputs import CompletionOutput, RequestMetrics, RequestOutput
from actorllm.core.request_stats import FinishedRequest
from actorllm.core.sampling_params import RequestOutputKind, SamplingParams

_U64 = 2**64


def child_request_id(request_id: str, index: int) -> str:
    return f"{index}_{request_id}"


def child_params(params: SamplingParams, index: int) -> SamplingParams:
    """The params child ``index`` runs with: ``n=1`` and, when seeded, ``seed + index``."""
    if params.n == 1:
        return params
    seed = params.seed
    if seed is not None:
        seed += index
        if seed >= _U64:
            seed -= _U64
    return params.clone(n=1, seed=seed)


def fan_out(request_id: str, params: SamplingParams) -> list[tuple[str, SamplingParams]]:
    """The engine requests for one user request: ``[(engine_req_id, params)]``, n of them."""
    if params.n == 1:
        return [(request_id, params)]
    return [(child_request_id(request_id, i), child_params(params, i)) for i in range(params.n)]


@final
class UserRequest:
    """One user-facing request: its prompt, its ``n`` children and how to report them."""

    def __init__(
        self,
        request_id: str,
        prompt: str | None,
        prompt_token_ids: list[int],
        params: SamplingParams,
        arrival_time: float,
        decode_token: DecodeFn | None,
    ) -> None:
        self.request_id = request_id
        self.prompt = prompt
        self.prompt_token_ids = prompt_token_ids
        self.n = params.n
        self.max_tokens = params.max_tokens
        self.watermarking = params.watermarking  # the request's switch (its stats' status)
        self.greedy = params.is_greedy
        self.first_token_seen = False  # for the engine's prompt-token count
        self.kind = params.output_kind
        self.arrival_time = arrival_time
        self.children: dict[int, RequestState] = {}  # {index: state}
        self.prompt_logprobs = PromptLogprobsState(
            params.prompt_logprobs, decode_token, params.flat_logprobs
        )
        self._prompt_logprobs_from: int | None = None  # child index whose chunks are kept
        self.num_cached_tokens: int | None = None  # first value a child reported
        self.num_cache_creation_tokens: int | None = None  # the same, once a child has one
        # One sample and no prompt logprobs: an unfinished step's output is the child's
        # delta (DELTA) or nothing at all (FINAL_ONLY). The output processor's plain lane.
        self.plain = self.n == 1 and params.prompt_logprobs is None
        self.plain = self.plain and self.kind != RequestOutputKind.CUMULATIVE
        self.silent = self.kind == RequestOutputKind.FINAL_ONLY  # no output until the end

    @property
    def finished(self) -> bool:
        children = self.children
        if len(children) != self.n:
            return False
        if len(children) == 1:  # n == 1, the common case: no generator per step
            return children[next(iter(children))].finish_reason is not None
        return all(c.finish_reason is not None for c in children.values())

    def unfinished_children(self) -> list[RequestState]:
        return [c for _, c in sorted(self.children.items()) if not c.finished]

    def add_prompt_logprobs(self, child: RequestState, entries: list[TokenLogprobs] | None) -> None:
        if entries is None:
            return
        if self._prompt_logprobs_from is None:
            self._prompt_logprobs_from = child.index
        if child.index == self._prompt_logprobs_from:
            self.prompt_logprobs.append(entries)

    def note_cached_tokens(self, child: RequestState) -> None:
        """Take the prefix-cache counts of ``child``'s first output (the first child's to
        report them)."""
        if self.num_cached_tokens is None and child.num_cached_tokens:
            self.num_cached_tokens = child.num_cached_tokens
        if self.num_cache_creation_tokens is None and child.scheduled_time is not None:
            self.num_cache_creation_tokens = child.num_cache_creation_tokens

    def make_output(
        self, changed: list[RequestState], error: str | None = None
    ) -> RequestOutput | None:
        """The output for this step, given the children that changed; None when there is
        nothing to report (FINAL_ONLY before the end, or nothing changed)."""
        finished = self.finished
        kind = self.kind
        if kind == RequestOutputKind.FINAL_ONLY:
            if not finished:
                return None
            changed = list(self.children.values())
        if not changed:
            return None
        if len(changed) > 1:
            changed = sorted(changed, key=_by_index)
        return self._build([c.completion(kind) for c in changed], error, finished)

    def _build(
        self, completions: list[CompletionOutput], error: str | None, finished: bool
    ) -> RequestOutput:
        if self.kind == RequestOutputKind.DELTA:
            prompt_logprobs = self.prompt_logprobs.pop_new()
        else:
            prompt_logprobs = self.prompt_logprobs.snapshot()
        return RequestOutput(
            request_id=self.request_id,
            prompt=self.prompt,
            prompt_token_ids=self.prompt_token_ids,
            prompt_logprobs=prompt_logprobs,
            outputs=completions,
            finished=finished,
            num_cached_tokens=self.num_cached_tokens or 0,
            num_cache_creation_tokens=self.num_cache_creation_tokens or 0,
            metrics=self._metrics(finished),
            error=error,
            pooled=self.children[0].pooled if self.children else None,
        )

    def plain_output(
        self, child: RequestState, delta: CompletionOutput | None = None
    ) -> RequestOutput:
        """:meth:`make_output` for a ``plain`` request whose ``plain`` child changed and
        did not finish (the same output, built directly); ``delta``: the child's
        :meth:`~RequestState.plain_step`, when it took one."""
        return RequestOutput(
            request_id=self.request_id,
            prompt=self.prompt,
            prompt_token_ids=self.prompt_token_ids,
            prompt_logprobs=None,
            outputs=[child.plain_delta() if delta is None else delta],
            finished=False,
            num_cached_tokens=self.num_cached_tokens or 0,
            num_cache_creation_tokens=self.num_cache_creation_tokens or 0,
            metrics=RequestMetrics(
                arrival_time=self.arrival_time,
                first_scheduled_time=child.scheduled_time,
                first_token_time=child.first_token_time,
                last_token_time=child.last_token_time,
            ),
        )

    def finished_stats(self, now: float) -> FinishedRequest:
        """This request's figures for the engine's request statistics, as it ends."""
        children = list(self.children.values())
        lens = [len(c.token_ids) for c in children]
        first_child = self.children.get(0) or (children[0] if children else None)
        reason = first_child.finish_reason if first_child is not None else None
        rm = self._metrics(self.finished)
        return FinishedRequest(
            finish_reason=str(reason or FinishReason.ABORT),
            arrival_time=self.arrival_time,
            scheduled_time=rm.first_scheduled_time,
            first_token_time=rm.first_token_time,
            last_token_time=rm.last_token_time,
            finished_time=rm.finished_time if rm.finished_time is not None else now,
            prompt_tokens=len(self.prompt_token_ids),
            generation_tokens=sum(lens),
            max_generation_tokens=max(lens, default=0),
            n=self.n,
            max_tokens=self.max_tokens,
            num_preemptions=sum(c.num_preemptions for c in children),
            cached_tokens=self.num_cached_tokens or 0,
            watermarking=self.watermarking,
            greedy=self.greedy,
        )

    def _metrics(self, finished: bool) -> RequestMetrics:
        if len(self.children) == 1:  # n == 1, the common case: no lists to build
            (c,) = self.children.values()
            return RequestMetrics(
                arrival_time=self.arrival_time,
                first_scheduled_time=c.scheduled_time,
                first_token_time=c.first_token_time,
                last_token_time=c.last_token_time,
                finished_time=c.finished_time if finished else None,
            )
        children = list(self.children.values())
        first = [c.first_token_time for c in children if c.first_token_time is not None]
        last = [c.last_token_time for c in children if c.last_token_time is not None]
        done = [c.finished_time for c in children if c.finished_time is not None]
        scheduled = [c.scheduled_time for c in children if c.scheduled_time is not None]
        return RequestMetrics(
            arrival_time=self.arrival_time,
            first_scheduled_time=min(scheduled, default=None),
            first_token_time=min(first, default=None),
            last_token_time=max(last, default=None),
            finished_time=max(done) if finished and done else None,
        )


def _by_index(child: RequestState) -> int:
    return child.index
