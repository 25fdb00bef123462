"""The scheduler: which requests compute how many tokens in the next step.

Theory of operation
-------------------
There are no prefill and decode phases. Every request has a token count (prompt + outputs,
plus output placeholders under async scheduling) and ``num_computed_tokens``; a step lets
the second catch up with the first, under a token budget (``max_num_batched_tokens``) and a
seat limit (``max_num_seqs``). A prompt is a request far behind; a decode is a request one
token behind. One ``schedule()`` is a short pipeline of named steps:

1. ``_schedule_running``: RUNNING requests first, in admission order. Each gets
   ``min(gap, budget, chunk cap)`` tokens (the cap: ``long_prefill_token_threshold``,
   with ``long_prefill_token_threshold_adaptive`` at least the budget's fair share). When
   the KV pool cannot give it blocks, the policy preempts someone (fcfs: the newest
   running; priority: the lowest priority, latest arrival) — possibly the request itself —
   until the allocation fits.
   A preempted request frees its blocks, keeps its outputs, returns to the front of the
   waiting queue and is recomputed from scratch when resumed (as a new request for the
   worker).
2. ``Admitter.schedule_waiting`` (``admit.py``): if nobody was preempted, WAITING requests
   in policy order, each from its prefix-cache hit (and the KV connector's), in chunks when
   chunked prefill is on. Under ``priority``, a waiting request may preempt running
   requests of lower priority for blocks or for a seat.
3. ``build_output`` (``step_output.py``): the ``SchedulerOutput``, then ``_advance``:
   ``num_computed_tokens`` moves forward at once, so the next ``schedule()`` can run before
   this step's results arrive.

Async scheduling: a request whose step samples a token gets an output placeholder; the next
``schedule()`` computes one more position against that unknown token. ``update_from_output``
replaces placeholders with tokens; tokens for requests finished meanwhile are discarded, and
a request whose in-flight tokens reach its length limit is not scheduled again.
Pipeline parallel reuses the placeholders with one difference: a request with one is not
scheduled again until its token is back (the first stage needs it as an input id), so the
steps in flight hold different requests and the stages work on them at once.

``update_from_output`` appends sampled tokens and checks stop conditions (``stopping.py``),
reports them (``results.py``), frees finished requests' blocks at once and reports their
ids in the next step's ``finished_req_ids``.

Speculative decoding (drafts as extra positions of a decode, rolled back when rejected) is
in ``spec_decode.py``; structured outputs (requests waiting in ``waiting_for_fsm`` for their
grammar, bitmask rows, matchers advanced by sampled tokens) in ``grammar.py``; the KV
connector's plumbing in ``kv_connector.py``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import final

from actorllm.core.engine_core_output import EngineCoreOutput, EngineCoreOutputs, SchedulerStats
from actorllm.core.kv_cache import KVCacheManager
from actorllm.core.model_runner_output import ModelRunnerOutput
from actorllm.core.request import Request, RequestStatus
from actorllm.core.routed_experts import RoutedExpertsLog
from actorllm.core.scheduler.admit import Admitter
from actorllm.core.scheduler.budget import StepBudget
from actorllm.core.scheduler.config import SchedulerConfig
from actorllm.core.scheduler.grammar import GrammarTracker, advance_grammar, poll_grammar
from actorllm.core.scheduler.kv_connector import ConnectorLink, KVConnectorBase, KVConnectorMetadata
from actorllm.core.scheduler.lora_gate import count_loras
from actorllm.core.scheduler.policy import make_waiting_queue, pick_victim
from actorllm.core.scheduler.results import computed_prompt, pooled_output, token_output
from actorllm.core.scheduler.spec_decode import SpecDecodeStats, schedule_drafts
from actorllm.core.scheduler.step_output import build_output
from actorllm.core.scheduler.stopping import check_stop, reached_limit_in_flight
from actorllm.core.scheduler.validation import check_request
from actorllm.core.scheduler_output import SchedulerOutput
from actorllm.core.structured_outputs_params import StructuredOutputsError

_RUNNING = RequestStatus.RUNNING
_WAITING_STATES = (RequestStatus.WAITING, RequestStatus.PREEMPTED)


@final
class Scheduler:
    """Continuous batching over a paged KV cache. Synchronous; never blocks; not thread-safe.

    >>> from actorllm.core.sampling_params import SamplingParams
    >>> s = Scheduler(SchedulerConfig(max_model_len=64, num_blocks=8, block_size=16))
    >>> s.add_request(Request("a", [1, 2, 3], SamplingParams(max_tokens=1)))
    >>> out = s.schedule()
    >>> out.num_scheduled_tokens
    {'a': 3}
    >>> ro = ModelRunnerOutput(step_id=out.step_id, req_ids=["a"], sampled_token_ids=[[9]])
    >>> [(o.new_token_ids, o.finish_reason) for o in s.update_from_output(out, ro).outputs]
    [([9], <FinishReason.LENGTH: 'length'>)]
    """

    def __init__(
        self,
        config: SchedulerConfig,
        kv_connector: KVConnectorBase | None = None,
        grammar: GrammarTracker | None = None,
    ) -> None:
        self.config = config
        self.kv_cache_manager = KVCacheManager(
            config.num_blocks,
            config.block_size,
            enable_caching=config.enable_prefix_caching,
            hash_algo=config.prefix_caching_hash_algo,
            sliding_window=config.sliding_window,
            group_windows=config.kv_group_windows,
        )
        self.requests: dict[str, Request] = {}  # {req_id: request}, every unfinished request
        self.running: list[Request] = []  # in admission order
        # False while generation is paused (vLLM's PAUSED_NEW): running requests go on,
        # queued ones (new or preempted) stay queued. Set by the engine's admission.
        self.admit_waiting = True
        self.waiting = make_waiting_queue(config.policy)
        self.grammar = grammar  # None: structured outputs are refused
        self.waiting_for_fsm: dict[str, Request] = {}  # {req_id: request}, grammar compiling
        # (req_id, message) of requests whose grammar failed to compile, until taken.
        self._grammar_failures: list[tuple[str, str]] = []
        self._finished_req_ids: list[str] = []  # finished since the last schedule()
        self._step_id = 0
        self._spec = SpecDecodeStats()  # speculative decoding: verifications applied
        self._last_num_scheduled_tokens = 0
        self._connector = ConnectorLink(kv_connector, self.kv_cache_manager)  # off: no-ops
        # Starts waiting requests, preempts running ones (on the queues above).
        self._admitter = Admitter(config, self.kv_cache_manager, self.waiting, self._connector)

    # -- requests in and out ----------------------------------------------------------------

    def add_request(self, request: Request) -> None:
        """Queue a new (or resumed) request. Raises an :class:`InvalidRequestError` subtype."""
        check_request(request, self.config, self.requests, self.grammar is not None)
        rid = request.request_id
        ready = True
        if request.use_structured_output:
            assert self.grammar is not None  # else check_request refused it
            self.grammar.add(request)
            ready = poll_grammar(self.grammar, request)  # raises for a spec that failed
        request.attach_block_hasher(self.kv_cache_manager.block_hasher)
        if self.config.return_routed_experts:
            request.routed_experts = RoutedExpertsLog()
            request.skip_prefix_cache = True
        self.requests[rid] = request
        if ready:
            self.waiting.add(request)
        else:
            request.transition(RequestStatus.WAITING_FOR_FSM)
            self.waiting_for_fsm[rid] = request

    def poll_grammars(self) -> None:
        """Move requests whose grammar is compiled to the waiting queue; finish those whose
        compile failed (``take_grammar_failures`` reports them). ``schedule`` calls it too."""
        grammar = self.grammar
        for rid, req in list(self.waiting_for_fsm.items()):
            assert grammar is not None  # only structured requests wait for a grammar
            try:
                ready = poll_grammar(grammar, req)
            except StructuredOutputsError as exc:
                del self.waiting_for_fsm[rid]
                self._finish(req, RequestStatus.FINISHED_ERROR)
                self._grammar_failures.append((rid, str(exc)))
                continue
            if ready:
                del self.waiting_for_fsm[rid]
                req.transition(RequestStatus.WAITING)
                self.waiting.add(req)

    def take_grammar_failures(self) -> list[tuple[str, str]]:
        """(req_id, error) of requests finished because their grammar failed to compile."""
        failures, self._grammar_failures = self._grammar_failures, []
        return failures

    def close(self) -> None:
        """This scheduler is being replaced (a crash, sleep): release what its grammar
        tracker holds (a step's fill waiting for a token this scheduler will never apply)."""
        if self.grammar is not None:
            self.grammar.close()

    def finish_requests(self, req_ids: Iterable[str], status: RequestStatus) -> list[str]:
        """Finish requests from outside (abort, stop string, error); their blocks are freed now.

        Unknown or already finished ids are ignored; returns the ids actually finished. They
        appear in the next ``SchedulerOutput.finished_req_ids``.
        """
        if not status.is_finished:
            raise ValueError(f"{status.name} is not a finished status.")
        done = []
        for rid in req_ids:
            req = self.requests.get(rid)
            if req is None:
                continue
            if req.status is _RUNNING:
                self.running.remove(req)
            elif req.status is RequestStatus.WAITING_FOR_FSM:
                del self.waiting_for_fsm[rid]
            else:
                self.waiting.remove(req)
            self._finish(req, status)
            done.append(rid)
        return done

    def _finish(self, req: Request, status: RequestStatus) -> None:
        """Mark finished, free blocks, forget. The caller removes it from running/waiting."""
        req.transition(status)
        self._connector.finished(req, self.kv_cache_manager)
        self.kv_cache_manager.free(req)
        if self.grammar is not None and req.use_structured_output:
            self.grammar.remove(req.request_id)
        del self.requests[req.request_id]
        self._finished_req_ids.append(req.request_id)

    # -- schedule -------------------------------------------------------------------------

    def schedule(self) -> SchedulerOutput:
        """Plan the next step. Mutates state at once (blocks, ``num_computed_tokens``)."""
        self._step_id += 1
        if self.waiting_for_fsm:
            self.poll_grammars()
        cap = self.config.chunk_cap(self.num_running + self.num_waiting)
        plan = StepBudget(self.config.max_num_batched_tokens, cap)
        self._schedule_running(plan)
        if not plan.preempted and self.admit_waiting:
            self._admitter.schedule_waiting(plan, self.running)
        finished, self._finished_req_ids = self._finished_req_ids, []
        out = build_output(
            plan,
            self.kv_cache_manager,
            self.grammar,
            step_id=self._step_id,
            total_num_scheduled_tokens=self.config.max_num_batched_tokens - plan.token_budget,
            finished_req_ids=finished,
        )
        self._advance(plan)
        self._last_num_scheduled_tokens = out.total_num_scheduled_tokens
        self._connector.scheduled(out)
        return out

    def _schedule_running(self, plan: StepBudget) -> None:
        # The hot loop (once per running request per step): locals, no helper calls.
        max_len = self.config.max_model_len
        threshold = plan.chunk_cap
        allocate = self.kv_cache_manager.allocate_slots
        lookahead = self.config.num_lookahead_tokens
        pipelined = self.config.pipeline_parallel_size > 1
        for req in list(self.running):
            budget = plan.token_budget
            if budget <= 0:
                break
            if req.status is not _RUNNING:
                continue  # preempted earlier in this step
            pending = req.num_output_placeholders
            if pending and (pipelined or reached_limit_in_flight(req, max_len)):
                continue  # pipeline parallel: its token is still in the pipeline
            computed = req.num_computed_tokens
            spec = req.spec_token_ids
            num_new = len(req.all_token_ids) + pending + len(spec) - computed
            if 0 < threshold < num_new:
                num_new = threshold
            if num_new > budget:
                num_new = budget
            # (a pooling request computes its whole prompt and no output token)
            room = max_len - computed - (req.pooling is None)
            if num_new > room:
                num_new = room
            if num_new <= 0:
                continue
            ahead = min(lookahead, max_len - computed - num_new) if lookahead else 0
            new_blocks = allocate(req, num_new, num_lookahead_tokens=ahead)
            while new_blocks is None:
                victim = pick_victim(self.running, self.config.policy)
                self._admitter.preempt(victim, plan, self.running)
                if victim is req:
                    break
                new_blocks = allocate(req, num_new, num_lookahead_tokens=ahead)
            if new_blocks is not None:
                plan.add_cached(req, num_new, new_blocks)
                if spec:
                    schedule_drafts(req, num_new, plan)

    def _advance(self, plan: StepBudget) -> None:
        """Move ``num_computed_tokens`` past this step; add placeholders for its samples."""
        async_sched = self.config.async_scheduling or self.config.pipeline_parallel_size > 1
        requests = self.requests
        for rid, n in plan.num_scheduled_tokens.items():
            req = requests[rid]
            req.num_computed_tokens += n
            if (
                async_sched
                and req.num_computed_tokens >= req.num_tokens + req.num_output_placeholders
            ):
                req.num_output_placeholders += 1

    def take_connector_metadata(self) -> KVConnectorMetadata | None:
        """The connector's hand-off for the step ``schedule()`` just returned (once), or None."""
        return self._connector.take_meta()

    # -- results ---------------------------------------------------------------------------

    def update_from_output(
        self, scheduler_output: SchedulerOutput, runner_output: ModelRunnerOutput
    ) -> EngineCoreOutputs:
        """Apply one step's sampled tokens; report new tokens and finished requests."""
        outputs: list[EngineCoreOutput] = []
        requests = self.requests
        max_len = self.config.max_model_len
        logprobs = runner_output.logprobs
        prompt_logprobs = runner_output.prompt_logprobs
        routed = runner_output.routed_experts
        any_finished = False
        grammar = self.grammar
        spec = scheduler_output.scheduled_spec_decode_tokens
        drafts = runner_output.draft_token_ids
        spec_logprobs = runner_output.spec_logprobs
        pooled = runner_output.pooled
        kv = self.kv_cache_manager
        cache_block = kv.block_size if kv.enable_caching else 0  # (first outputs' count)
        iteration = 0  # vLLM's iteration tokens (EngineCoreOutputs.iteration_tokens)
        for rid, tokens in zip(runner_output.req_ids, runner_output.sampled_token_ids, strict=True):
            req = requests.get(rid)
            if req is None:
                continue  # finished (or aborted) while this step was in flight: discard
            if pooled and rid in pooled:
                # A pooling request's last chunk ran: report its result, finish it.
                iteration += computed_prompt(req)
                outputs.append(pooled_output(req, pooled[rid]))
                req.num_output_placeholders = 0
                any_finished |= self._finish_stepped(req, RequestStatus.FINISHED_STOPPED)
                continue
            if spec and tokens and rid in spec:
                self._spec.verified(req, len(spec[rid]), len(tokens) - 1)
            plp = prompt_logprobs.get(rid) if prompt_logprobs else None
            if routed and rid in routed and req.routed_experts is not None:
                req.routed_experts.write(routed[rid])
            if not tokens:
                if plp:
                    outputs.append(
                        EngineCoreOutput(req_id=rid, new_token_ids=[], new_prompt_logprobs=plp)
                    )
                continue
            if req.num_output_placeholders:
                req.num_output_placeholders = max(0, req.num_output_placeholders - len(tokens))
            status = None
            for i, tok in enumerate(tokens):
                req.append_output_token_ids(tok)
                status = check_stop(req, max_len)
                if grammar is not None and req.use_structured_output:
                    status = advance_grammar(grammar, req, tok, status)
                if status is not None:
                    tokens = tokens[: i + 1]
                    break
            lp = logprobs.get(rid) if logprobs else None
            lps = [lp] if lp is not None else None
            if spec_logprobs and rid in spec_logprobs:
                lps = spec_logprobs[rid][: len(tokens)]
            if not req.emitted_first_output:
                iteration += computed_prompt(req)
            iteration += len(tokens)
            mask = runner_output.sampling_masks.get(rid)  # one token a step (no drafts)
            masks = [mask] if mask is not None else None
            outputs.append(token_output(req, tokens, status, lps, plp, cache_block, masks))
            if status is not None:
                any_finished |= self._finish_stepped(req, status)
            elif drafts and rid in drafts and req.status is _RUNNING:
                req.spec_token_ids = drafts[rid]
        if any_finished:
            self.running = [r for r in self.running if r.status is _RUNNING]
        return EngineCoreOutputs(
            step_id=scheduler_output.step_id,
            outputs=outputs,
            stats=self.statistics(),
            timestamp=time.monotonic(),
            iteration_tokens=iteration,
        )

    def _finish_stepped(self, req: Request, status: RequestStatus) -> bool:
        """Finish ``req``, which its step's results ended (its blocks are freed now).
        Returns whether it was running: the caller prunes ``running`` once for all."""
        was_running = req.status is _RUNNING
        if not was_running:
            self.waiting.remove(req)  # preempted while its last step was in flight
        self._finish(req, status)
        return was_running

    # -- control plane and views -------------------------------------------------------------

    @property
    def kv_connector_enabled(self) -> bool:
        return self._connector.enabled

    def set_kv_connector_enabled(self, enabled: bool) -> None:
        """Switch the connector at run time; raises ``ValueError`` if there is none."""
        self._connector.set_enabled(enabled)

    def pin_loras(self, names: frozenset[str]) -> None:
        """The LoRA adapters pinned on the workers: they hold slots of ``max_loras`` whether
        their requests run or not (``lora_gate.LoRAGate``)."""
        self._admitter.pinned_loras = names

    def forget_prefix_cache(self) -> None:
        """Drop every cached prefix even while requests hold blocks (a weight update)."""
        self.kv_cache_manager.forget_prefix_cache()

    def reset_prefix_cache(self) -> bool:
        """Forget every cached prefix; refused (False) while any request holds blocks."""
        return self.kv_cache_manager.reset_prefix_cache()

    def get_request(self, req_id: str) -> Request | None:
        return self.requests.get(req_id)

    def has_unfinished_requests(self) -> bool:
        """Requests that a step could compute (those waiting for a grammar cannot yet)."""
        return bool(self.running) or len(self.waiting) > 0

    def has_waiting_for_grammar(self) -> bool:
        return bool(self.waiting_for_fsm)

    def has_finished_requests(self) -> bool:
        """Finished ids wait to be sent in the next ``SchedulerOutput`` (even an empty one)."""
        return bool(self._finished_req_ids)

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def statistics(self) -> SchedulerStats:
        kv = self.kv_cache_manager
        running_loras: dict[str, int] = {}
        waiting_loras: dict[str, int] = {}
        if self.config.max_loras:  # LoRA on: count each adapter's requests
            count_loras(self.running, running_loras)
            count_loras([*self.waiting, *self.waiting_for_fsm.values()], waiting_loras)
        return SchedulerStats(
            num_running_reqs=len(self.running),
            num_waiting_reqs=len(self.waiting) + len(self.waiting_for_fsm),
            num_deferred_reqs=len(self.waiting_for_fsm)
            + sum(1 for r in self._admitter.deferred if r.status in _WAITING_STATES),
            kv_cache_usage=kv.usage,
            prefix_cache_queries=kv.prefix_cache_queries,
            prefix_cache_hits=kv.prefix_cache_hits,
            connector_queries=self._connector.queries,
            connector_hits=self._connector.hits,
            num_preemptions=self._admitter.num_preemptions,
            num_scheduled_tokens=self._last_num_scheduled_tokens,
            spec_num_drafts=self._spec.num_drafts,
            spec_num_draft_tokens=self._spec.num_draft_tokens,
            spec_num_accepted_tokens=self._spec.num_accepted_tokens,
            spec_accepted_per_pos=list(self._spec.accepted_per_pos),
            running_lora_adapters=running_loras,
            waiting_lora_adapters=waiting_loras,
        )
