"""Starting waiting requests in a step, and recompute-preemption.

After the running requests, WAITING requests are tried in policy order (``policy.py``)
while the token budget lasts. A request starts from its prefix-cache hit (and the KV
connector's, if enabled) and computes the rest, in chunks when chunked prefill is on
(otherwise the whole remainder must fit the budget, or it waits). Under ``priority``, a
waiting request may preempt running requests of lower priority for blocks or for a seat.
The first request that cannot start ends the step's admissions (its turn is kept); those
passed over — tokens still in flight, preempted in this very step, or an adapter one too
many (``lora_gate.py``) — keep their places.

Preemption is by recompute: the victim frees its blocks, keeps its outputs, returns to the
front of the waiting queue and is computed from scratch when resumed (as a new request for
the worker). The running requests' growth uses it too, when the pool runs dry.
"""

from __future__ import annotations

import time
from typing import final

from actorllm.core.kv_cache import KVCacheManager
from actorllm.core.request import Request, RequestStatus
from actorllm.core.scheduler.budget import StepBudget
from actorllm.core.scheduler.config import SchedulerConfig
from actorllm.core.scheduler.kv_connector import ConnectorLink
from actorllm.core.scheduler.lora_gate import LoRAGate
from actorllm.core.scheduler.policy import WaitingQueue, pick_victim_for


@final
class Admitter:
    """Moves requests between a scheduler's queues: waiting ones into ``running`` (and the
    step), preempted ones back to ``waiting``. The scheduler owns both queues and passes
    ``running`` to each call (it replaces that list); this object owns only its count and
    the requests its last pass deferred."""

    __slots__ = (
        "_config",
        "_connector",
        "_kv",
        "_waiting",
        "deferred",
        "num_preemptions",
        "pinned_loras",
    )

    def __init__(
        self,
        config: SchedulerConfig,
        kv: KVCacheManager,
        waiting: WaitingQueue,
        connector: ConnectorLink,
    ) -> None:
        self._config = config
        self._kv = kv
        self._waiting = waiting
        self._connector = connector
        self.num_preemptions = 0  # cumulative
        # The waiting requests the last pass passed over for a transient reason (tokens in
        # flight, preempted in that step, an adapter one too many): vLLM's "deferred"
        # waiting requests, as opposed to those waiting for capacity. Some may have
        # finished since (the reader counts those still waiting).
        self.deferred: list[Request] = []
        # LoRA adapters pinned on the workers (vLLM's pin_lora): they hold their slots.
        self.pinned_loras: frozenset[str] = frozenset()

    def schedule_waiting(self, plan: StepBudget, running: list[Request]) -> None:
        """Start waiting requests in policy order while ``plan``'s budget lasts."""
        waiting = self._waiting
        skipped: list[Request] = []
        adapters = LoRAGate(running, self._config.max_loras, self.pinned_loras)
        while len(waiting) and plan.token_budget > 0:
            req = waiting.pop()
            if req.num_output_placeholders or req.request_id in plan.preempted:
                skipped.append(req)  # tokens of an earlier step still in flight, or just preempted
                continue
            if not adapters.admits(req):
                skipped.append(req)  # its adapter would exceed max_loras: it waits its turn
                continue
            if not self._admit(req, plan, running):
                waiting.prepend(req)
                break
        for req in reversed(skipped):
            waiting.prepend(req)
        self.deferred = skipped

    def _chunk(self, num_new: int, plan: StepBudget) -> int:
        """Cap a request's tokens by the step's chunk cap and the remaining budget."""
        if 0 < plan.chunk_cap < num_new:
            num_new = plan.chunk_cap
        return min(num_new, plan.token_budget)

    def _admit(self, req: Request, plan: StepBudget, running: list[Request]) -> bool:
        """Start (or resume) ``req`` if a seat and blocks can be found; False leaves it as is."""
        config = self._config
        while len(running) >= config.max_num_seqs:
            if not self._preempt_for(req, plan, running):
                return False
        kv = self._kv
        hit_blocks, num_hit = kv.get_computed_blocks(req)
        num_external = self._connector.lookup(req, num_hit)
        num_computed = num_hit + num_external
        num_new = req.num_tokens - num_computed
        if not config.enable_chunked_prefill and num_new > plan.token_budget:
            return False
        chunk = self._chunk(num_new, plan)
        ahead = min(config.num_lookahead_tokens, config.max_model_len - req.num_tokens)
        # vLLM's watermark: headroom for the running requests' growth, kept by every start
        # while others run (a request starting alone always may: progress).
        keep = config.watermark_blocks if running else 0
        if chunk < num_new and config.reserve_full_isl:
            # vLLM's scheduler_reserve_full_isl: a prompt prefilled in chunks starts only if
            # all of it fits, not just its first chunk (else its later chunks preempt).
            total = min(req.num_tokens, config.max_model_len)
            budget = config.max_num_batched_tokens
            while not kv.holds_whole(req, total, budget, hit_blocks, keep):
                if not self._preempt_for(req, plan, running):
                    return False
        num_new = chunk
        while kv.allocate_slots(req, num_new, num_computed, hit_blocks, ahead, keep) is None:
            if not self._preempt_for(req, plan, running):
                return False
        req.num_computed_tokens = num_computed
        if req.num_cached_tokens < 0:
            req.num_cached_tokens = num_computed
            req.first_scheduled_time = time.monotonic()
        self._connector.allocated(req, kv, num_external)
        req.transition(RequestStatus.RUNNING)
        running.append(req)
        plan.add_new(req, num_new)
        return True

    def _preempt_for(self, req: Request, plan: StepBudget, running: list[Request]) -> bool:
        victim = pick_victim_for(req, running, self._config.policy)
        if victim is None:
            return False
        self.preempt(victim, plan, running)
        return True

    def preempt(self, victim: Request, plan: StepBudget, running: list[Request]) -> None:
        """Recompute-preemption: free everything, keep the outputs, back to the queue's front."""
        plan.unschedule(victim)
        self._kv.free(victim)
        running.remove(victim)
        victim.transition(RequestStatus.PREEMPTED)
        victim.num_computed_tokens = 0
        victim.spec_token_ids = []  # proposed for the blocks it just lost
        victim.num_preemptions += 1
        self.num_preemptions += 1
        plan.preempted[victim.request_id] = victim
        self._waiting.prepend(victim)
