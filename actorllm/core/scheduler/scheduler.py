"""The scheduler: which requests compute how many tokens in the next step.

Theory of operation
-------------------
There are no prefill and decode phases. Every request has a token count (prompt + outputs,
plus output placeholders under async scheduling) and ``num_computed_tokens``; a step lets
the second catch up with the first, under a token budget (``max_num_batched_tokens``) and a
seat limit (``max_num_seqs``). A prompt is a request far behind; a decode is a request one
token behind. One ``schedule()`` is a short pipeline of named steps:

1. ``_schedule_running``: RUNNING requests first, in admission order. Each gets
   ``min(gap, budget, long_prefill_token_threshold)`` tokens. When the KV pool cannot give
   it blocks, the policy preempts someone (fcfs: the newest running; priority: the lowest
   priority, latest arrival) — possibly the request itself — until the allocation fits.
   A preempted request frees its blocks, keeps its outputs, returns to the front of the
   waiting queue and is recomputed from scratch when resumed (as a new request for the
   worker).
2. ``_schedule_waiting``: if nobody was preempted, WAITING requests in policy order.
   A request starts from its prefix-cache hit (and the KV connector's, if enabled) and
   computes the rest, in chunks when chunked prefill is on (otherwise the whole remainder
   must fit the budget, or it waits). Under ``priority``, a waiting request may preempt
   running requests of lower priority for blocks or for a seat.
3. ``_build_output``: the ``SchedulerOutput`` (new requests carry all their tokens and
   blocks, cached ones only new blocks), then ``_advance``: ``num_computed_tokens`` moves
   forward at once, so the next ``schedule()`` can run before this step's results arrive.

Async scheduling: a request whose step samples a token gets an output placeholder; the next
``schedule()`` computes one more position against that unknown token. ``update_from_output``
replaces placeholders with tokens; tokens for requests finished meanwhile are discarded, and
a request whose in-flight tokens reach its length limit is not scheduled again.
Pipeline parallel reuses the placeholders with one difference: a request with one is not
scheduled again until its token is back (the first stage needs it as an input id), so the
steps in flight hold different requests and the stages work on them at once.

Speculative decoding (``docs/speculative.md``): the worker returns draft tokens for a
request's next step (``ModelRunnerOutput.draft_token_ids``), kept in
``request.spec_token_ids``. The next ``schedule()`` computes them as extra positions of the
request's decode (their KV slots allocated with the rest; drafts that the budget or the
context length cut are dropped) and sends them in ``scheduled_spec_decode_tokens``; the
step returns the accepted drafts plus one token, and ``num_computed_tokens`` steps back
over the rejected ones (their KV is void; the slots stay with the request).

``update_from_output`` appends sampled tokens, checks stop conditions (``stopping.py``),
frees finished requests' blocks at once and reports their ids in the next step's
``finished_req_ids``.

Structured outputs (``grammar.py``): a request with a constraint waits in
``waiting_for_fsm`` until its grammar is compiled (no seat, no blocks), then joins the
waiting queue. Each step carries the allowed-token bitmask rows of the structured requests
that sample in it, and their sampled tokens advance their matchers. Under async scheduling
a structured request runs every step like any other: its row follows the token still in
flight, so the tracker fills it once this scheduler has applied that token (while the
step's forward pass runs).
A completed grammar allows only stop tokens, and the next token ends the request
(``FINISHED_STOPPED``) even if the stop token is ignored.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import final

from actorllm.core.engine_core_output import EngineCoreOutput, EngineCoreOutputs, SchedulerStats
from actorllm.core.errors import (
    DuplicateRequestError,
    EmptyPromptError,
    InvalidRequestError,
    RequestTooLongError,
)
from actorllm.core.kv_cache import KVCacheManager
from actorllm.core.kv_cache.block_hash import BlockHash
from actorllm.core.model_runner_output import ModelRunnerOutput
from actorllm.core.pooling_params import PooledData
from actorllm.core.request import FINISH_REASONS, Request, RequestStatus
from actorllm.core.scheduler.budget import StepBudget
from actorllm.core.scheduler.config import SchedulerConfig
from actorllm.core.scheduler.grammar import GrammarTracker
from actorllm.core.scheduler.kv_connector import KVConnectorBase, KVConnectorMetadata
from actorllm.core.scheduler.lora_gate import LoRAGate, count_loras
from actorllm.core.scheduler.policy import make_waiting_queue, pick_victim, pick_victim_for
from actorllm.core.scheduler.stopping import check_stop, reached_limit_in_flight
from actorllm.core.scheduler_output import CachedRequestData, NewRequestData, SchedulerOutput
from actorllm.core.structured_outputs_params import StructuredOutputsError

_RUNNING = RequestStatus.RUNNING


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
        self._num_preemptions = 0  # cumulative
        # Speculative decoding, cumulative: verifications, drafts, accepted (per position).
        self._spec_num_drafts = 0
        self._spec_num_draft_tokens = 0
        self._spec_num_accepted_tokens = 0
        self._spec_accepted_per_pos: list[int] = []
        self._last_num_scheduled_tokens = 0
        self._connector = kv_connector
        self._connector_enabled = kv_connector is not None
        self._connector_meta: KVConnectorMetadata | None = None
        self._connector_queries = 0  # tokens asked about (cumulative)
        self._connector_hits = 0  # tokens the connector could load (cumulative)
        if kv_connector is not None:
            if self.kv_cache_manager.num_groups > 1:
                raise ValueError(
                    "kv_connector: a KV connector keys blocks by one block table; this model "
                    f"has {self.kv_cache_manager.num_groups} KV cache groups (sliding and full "
                    "attention layers). Start it without a connector, or with "
                    "disable_hybrid_kv_cache_manager."
                )
            self.kv_cache_manager.eviction_callbacks.append(self._on_block_evicted)

    # -- requests in and out ----------------------------------------------------------------

    def add_request(self, request: Request) -> None:
        """Queue a new (or resumed) request. Raises an :class:`InvalidRequestError` subtype."""
        rid = request.request_id
        if rid in self.requests:
            raise DuplicateRequestError(
                f"request id {rid!r} is already in use.", param="request_id"
            )
        if request.num_prompt_tokens == 0:
            raise EmptyPromptError("the prompt must contain at least one token.", param="prompt")
        max_len = self.config.max_model_len
        if request.pooling is not None and request.num_tokens > max_len:
            raise RequestTooLongError(
                f"the prompt has {request.num_tokens} tokens; this model's maximum context "
                f"length is {max_len} tokens.",
                param="prompt",
            )
        if request.pooling is None and request.num_tokens >= max_len:
            raise RequestTooLongError(
                f"the request has {request.num_tokens} tokens ({request.num_prompt_tokens} in the "
                f"prompt); this model's maximum context length is {max_len} tokens, including at "
                "least one token to generate.",
                param="prompt",
            )
        if request.max_tokens is not None and request.num_output_tokens >= request.max_tokens:
            raise InvalidRequestError(
                f"the request already has {request.num_output_tokens} outputs, max_tokens is "
                f"{request.max_tokens}.",
                param="max_tokens",
            )
        if request.lora_request is not None and not self.config.max_loras:
            raise InvalidRequestError(
                f"LoRA adapter {request.lora_request.lora_name!r} requested, but LoRA is not "
                "enabled in this engine (start it with enable_lora).",
                param="lora_request",
            )
        if request.status is not RequestStatus.WAITING:
            raise ValueError(f"request {rid!r} is {request.status.name}, not WAITING.")
        ready = True
        if request.use_structured_output:
            if self.grammar is None:
                raise InvalidRequestError(
                    "structured outputs are not available in this engine.",
                    param="structured_outputs",
                )
            self.grammar.add(request)
            ready = self._poll_grammar(request)  # raises for a spec that failed to compile
        request.attach_block_hasher(self.kv_cache_manager.block_hasher)
        self.requests[rid] = request
        if ready:
            self.waiting.add(request)
        else:
            request.transition(RequestStatus.WAITING_FOR_FSM)
            self.waiting_for_fsm[rid] = request

    def _poll_grammar(self, request: Request) -> bool:
        assert self.grammar is not None
        try:
            return self.grammar.poll(request)
        except StructuredOutputsError:
            self.grammar.remove(request.request_id)
            raise

    def poll_grammars(self) -> None:
        """Move requests whose grammar is compiled to the waiting queue; finish those whose
        compile failed (``take_grammar_failures`` reports them). ``schedule`` calls it too."""
        for rid, req in list(self.waiting_for_fsm.items()):
            try:
                ready = self._poll_grammar(req)
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
        if self._connector is not None and self._connector_enabled:
            self._connector.request_finished(
                req, self.kv_cache_manager.get_block_ids(req.request_id)[0]
            )
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
        plan = StepBudget(self.config.max_num_batched_tokens)
        self._schedule_running(plan)
        if not plan.preempted and self.admit_waiting:
            self._schedule_waiting(plan)
        out = self._build_output(plan)
        self._advance(plan)
        self._last_num_scheduled_tokens = out.total_num_scheduled_tokens
        if self._connector is not None and self._connector_enabled:
            self._connector_meta = self._connector.build_connector_meta(out)
        return out

    def _chunk(self, num_new: int, budget: int) -> int:
        """Cap a request's tokens by the long-prefill threshold and the remaining budget."""
        threshold = self.config.long_prefill_token_threshold
        if 0 < threshold < num_new and self.config.enable_chunked_prefill:
            num_new = threshold
        return min(num_new, budget)

    def _schedule_running(self, plan: StepBudget) -> None:
        # The hot loop (once per running request per step): locals, no helper calls.
        max_len = self.config.max_model_len
        threshold = self.config.long_prefill_token_threshold
        if not self.config.enable_chunked_prefill:
            threshold = 0
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
                self._preempt(victim, plan)
                if victim is req:
                    break
                new_blocks = allocate(req, num_new, num_lookahead_tokens=ahead)
            if new_blocks is not None:
                plan.add_cached(req, num_new, new_blocks)
                if spec:
                    self._schedule_drafts(req, num_new, plan)

    def _schedule_drafts(self, req: Request, num_new: int, plan: StepBudget) -> None:
        """Move ``req``'s drafts into the step: those the ``num_new`` scheduled tokens reach
        (the budget or the context length may cut the run); their lookahead slots are
        allocated with the rest."""
        spec, req.spec_token_ids = req.spec_token_ids, []
        fit = num_new - (req.num_tokens - req.num_computed_tokens)
        if fit > 0:
            plan.spec_tokens[req.request_id] = spec[:fit]

    def _schedule_waiting(self, plan: StepBudget) -> None:
        skipped: list[Request] = []
        adapters = LoRAGate(self.running, self.config.max_loras)
        while len(self.waiting) and plan.token_budget > 0:
            req = self.waiting.pop()
            if req.num_output_placeholders or req.request_id in plan.preempted:
                skipped.append(req)  # tokens of an earlier step still in flight, or just preempted
                continue
            if not adapters.admits(req):
                skipped.append(req)  # its adapter would exceed max_loras: it waits its turn
                continue
            if not self._admit(req, plan):
                self.waiting.prepend(req)
                break
        for req in reversed(skipped):
            self.waiting.prepend(req)

    def _admit(self, req: Request, plan: StepBudget) -> bool:
        """Start (or resume) ``req`` if a seat and blocks can be found; False leaves it as is."""
        while len(self.running) >= self.config.max_num_seqs:
            if not self._preempt_for(req, plan):
                return False
        kv = self.kv_cache_manager
        hit_blocks, num_hit = kv.get_computed_blocks(req)
        num_external = self._connector_lookup(req, num_hit)
        num_computed = num_hit + num_external
        num_new = req.num_tokens - num_computed
        if not self.config.enable_chunked_prefill and num_new > plan.token_budget:
            return False
        num_new = self._chunk(num_new, plan.token_budget)
        ahead = min(self.config.num_lookahead_tokens, self.config.max_model_len - req.num_tokens)
        while kv.allocate_slots(req, num_new, num_computed, hit_blocks, ahead) is None:
            if not self._preempt_for(req, plan):
                return False
        req.num_computed_tokens = num_computed
        if req.num_cached_tokens < 0:
            req.num_cached_tokens = num_computed
            req.first_scheduled_time = time.monotonic()
        if self._connector is not None and self._connector_enabled:
            self._connector.update_state_after_alloc(
                req, kv.get_blocks(req.request_id), num_external
            )
        req.transition(_RUNNING)
        self.running.append(req)
        plan.add_new(req, num_new)
        return True

    def _connector_lookup(self, req: Request, num_hit: int) -> int:
        if self._connector is None or not self._connector_enabled:
            return 0
        n = self._connector.get_num_new_matched_tokens(req, num_hit)
        n = max(0, min(n, req.num_tokens - 1 - num_hit))  # the last token is always computed
        self._connector_queries += req.num_tokens - num_hit
        self._connector_hits += n
        return n

    def _preempt_for(self, req: Request, plan: StepBudget) -> bool:
        victim = pick_victim_for(req, self.running, self.config.policy)
        if victim is None:
            return False
        self._preempt(victim, plan)
        return True

    def _preempt(self, victim: Request, plan: StepBudget) -> None:
        """Recompute-preemption: free everything, keep the outputs, back to the queue's front."""
        plan.unschedule(victim)
        self.kv_cache_manager.free(victim)
        self.running.remove(victim)
        victim.transition(RequestStatus.PREEMPTED)
        victim.num_computed_tokens = 0
        victim.spec_token_ids = []  # proposed for the blocks it just lost
        victim.num_preemptions += 1
        self._num_preemptions += 1
        plan.preempted[victim.request_id] = victim
        self.waiting.prepend(victim)

    def _build_output(self, plan: StepBudget) -> SchedulerOutput:
        kv = self.kv_cache_manager
        new_reqs = [
            NewRequestData(
                req_id=r.request_id,
                prompt_token_ids=r.prompt_token_ids,  # never mutated: shared, not copied
                output_token_ids=list(r.output_token_ids),
                sampling_params=r.sampling_params,
                block_ids=kv.get_block_ids(r.request_id),
                num_computed_tokens=r.num_computed_tokens,
                eos_token_id=r.eos_token_id,
                lora_request=r.lora_request,
                prompt_embeds=None if r.prompt_embeds is None else r.prompt_embeds.tensor,
                prompt_embeds_mask=None
                if r.prompt_embeds is None
                else r.prompt_embeds.embedded_positions(),
            )
            for r in plan.new_reqs
        ]
        new_blocks = plan.new_blocks
        nothing_new = kv.nothing_new
        # Most running requests get no new block: one shared (read-only) empty value.
        no_ids: tuple[list[int], ...] = tuple([] for _ in nothing_new)
        cached_reqs = [
            CachedRequestData(
                req_id=r.request_id,
                new_block_ids=no_ids
                if (blocks := new_blocks[r.request_id]) is nothing_new
                else tuple([b.block_id for b in g] for g in blocks),
                num_computed_tokens=r.num_computed_tokens,
            )
            for r in plan.cached_reqs
        ]
        finished, self._finished_req_ids = self._finished_req_ids, []
        grammar_bitmask = None
        if self.grammar is not None:
            sampling = [
                r
                for r in (*plan.new_reqs, *plan.cached_reqs)
                if r.use_structured_output
                and r.num_computed_tokens + plan.num_scheduled_tokens[r.request_id] >= r.num_tokens
            ]
            if sampling:
                # Each row follows the outputs so far and those still in flight.
                grammar_bitmask = self.grammar.bitmask(
                    [r.request_id for r in sampling],
                    [len(r.output_token_ids) + r.num_output_placeholders for r in sampling],
                )
        return SchedulerOutput(
            step_id=self._step_id,
            scheduled_new_reqs=new_reqs,
            scheduled_cached_reqs=cached_reqs,
            num_scheduled_tokens=plan.num_scheduled_tokens,
            total_num_scheduled_tokens=self.config.max_num_batched_tokens - plan.token_budget,
            finished_req_ids=finished,
            preempted_req_ids=list(plan.preempted),
            grammar_bitmask=grammar_bitmask,
            scheduled_spec_decode_tokens=plan.spec_tokens,
        )

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
        meta, self._connector_meta = self._connector_meta, None
        return meta

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
        any_finished = False
        grammar = self.grammar
        spec = scheduler_output.scheduled_spec_decode_tokens
        drafts = runner_output.draft_token_ids
        spec_logprobs = runner_output.spec_logprobs
        pooled = runner_output.pooled
        for rid, tokens in zip(runner_output.req_ids, runner_output.sampled_token_ids, strict=True):
            req = requests.get(rid)
            if req is None:
                continue  # finished (or aborted) while this step was in flight: discard
            if pooled and rid in pooled:
                any_finished |= self._finish_pooled(req, pooled[rid], outputs)
                continue
            if spec and tokens and rid in spec:
                self._verified(req, len(spec[rid]), len(tokens) - 1)
            plp = prompt_logprobs.get(rid) if prompt_logprobs else None
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
                    status = self._advance_grammar(req, tok, status)
                if status is not None:
                    tokens = tokens[: i + 1]
                    break
            lp = logprobs.get(rid) if logprobs else None
            lps = [lp] if lp is not None else None
            if spec_logprobs and rid in spec_logprobs:
                lps = spec_logprobs[rid][: len(tokens)]
            cached, scheduled = 0, None
            if not req.emitted_first_output:
                req.emitted_first_output = True
                cached, scheduled = max(req.num_cached_tokens, 0), req.first_scheduled_time
            outputs.append(
                EngineCoreOutput(
                    req_id=rid,
                    new_token_ids=tokens,
                    new_logprobs=lps,
                    new_prompt_logprobs=plp,
                    finish_reason=None if status is None else FINISH_REASONS[status],
                    stop_reason=req.stop_reason if status is not None else None,
                    num_cached_tokens=cached,
                    scheduled_time=scheduled,
                )
            )
            if status is not None:
                if req.status is _RUNNING:
                    any_finished = True
                else:
                    self.waiting.remove(req)  # preempted while its last token was in flight
                self._finish(req, status)
            elif drafts and rid in drafts and req.status is _RUNNING:
                req.spec_token_ids = drafts[rid]
        if any_finished:
            self.running = [r for r in self.running if r.status is _RUNNING]
        return EngineCoreOutputs(
            step_id=scheduler_output.step_id,
            outputs=outputs,
            stats=self.statistics(),
            timestamp=time.monotonic(),
        )

    def _verified(self, req: Request, num_drafts: int, num_accepted: int) -> None:
        """``req`` verified ``num_drafts`` drafts and accepted the first ``num_accepted``:
        the rejected positions' KV is void, so ``num_computed_tokens`` steps back over them
        (their slots stay the request's, written again by its next step)."""
        req.num_computed_tokens -= num_drafts - num_accepted
        self._spec_num_drafts += 1
        self._spec_num_draft_tokens += num_drafts
        self._spec_num_accepted_tokens += num_accepted
        per_pos = self._spec_accepted_per_pos
        if len(per_pos) < num_drafts:
            per_pos.extend([0] * (num_drafts - len(per_pos)))
        for i in range(num_accepted):
            per_pos[i] += 1

    def _finish_pooled(
        self, req: Request, data: PooledData, outputs: list[EngineCoreOutput]
    ) -> bool:
        """A pooling request's last chunk ran: report its result and finish it (its blocks
        are freed now). Returns whether it was running (the caller prunes ``running``)."""
        outputs.append(
            EngineCoreOutput(
                req_id=req.request_id,
                new_token_ids=[],
                finish_reason=FINISH_REASONS[RequestStatus.FINISHED_STOPPED],
                num_cached_tokens=max(req.num_cached_tokens, 0),
                scheduled_time=req.first_scheduled_time,
                pooled=data,
            )
        )
        req.num_output_placeholders = 0
        was_running = req.status is _RUNNING
        if not was_running:
            self.waiting.remove(req)  # preempted while its pooled step was in flight
        self._finish(req, RequestStatus.FINISHED_STOPPED)
        return was_running

    def _advance_grammar(
        self, req: Request, token: int, status: RequestStatus | None
    ) -> RequestStatus | None:
        """Feed ``token`` to the request's matcher. A rejected token (the sampler broke
        the mask) ends the request with an error rather than emit invalid output. A token
        after the grammar completed can only be a stop token (the mask allows nothing
        else): it ends the request even when ``ignore_eos`` or ``min_tokens`` would not."""
        assert self.grammar is not None
        rid = req.request_id
        if self.grammar.is_terminated(rid):
            return status or RequestStatus.FINISHED_STOPPED
        if not self.grammar.accept(rid, [token]):
            return RequestStatus.FINISHED_ERROR
        return status

    # -- control plane and views -------------------------------------------------------------

    def _on_block_evicted(self, block_hash: BlockHash, block_id: int) -> None:
        if self._connector is not None and self._connector_enabled:
            self._connector.on_block_evicted(block_hash, block_id)

    @property
    def kv_connector_enabled(self) -> bool:
        return self._connector_enabled

    def set_kv_connector_enabled(self, enabled: bool) -> None:
        """Switch the connector at run time; raises ``ValueError`` if there is none."""
        if enabled and self._connector is None:
            raise ValueError("this scheduler has no KV connector.")
        self._connector_enabled = enabled

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
            kv_cache_usage=kv.usage,
            prefix_cache_queries=kv.prefix_cache_queries,
            prefix_cache_hits=kv.prefix_cache_hits,
            connector_queries=self._connector_queries,
            connector_hits=self._connector_hits,
            num_preemptions=self._num_preemptions,
            num_scheduled_tokens=self._last_num_scheduled_tokens,
            spec_num_drafts=self._spec_num_drafts,
            spec_num_draft_tokens=self._spec_num_draft_tokens,
            spec_num_accepted_tokens=self._spec_num_accepted_tokens,
            spec_accepted_per_pos=list(self._spec_accepted_per_pos),
            running_lora_adapters=running_loras,
            waiting_lora_adapters=waiting_loras,
        )
