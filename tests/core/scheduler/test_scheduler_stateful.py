"""Random add / abort / step / reset sequences against the scheduler and its KV cache.

After every rule: block reference counts equal the number of holders, free + used = total,
no request holds a freed block, queues are consistent. The fake worker checks that every
prefix-cache hit holds the request's own tokens and, with a sliding window (every layer, or
hybrid: sliding and full groups side by side), that each query's window still holds them
after blocks behind it went back to the pool.
Outputs reported to callers must be exactly the tokens the deterministic fake model
sampled, in order, with no gap or repeat, across preemptions and (with async scheduling)
two steps in flight.
"""

from __future__ import annotations

from collections import deque

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from sched_helpers import EOS, FakeWorker, check_invariants, make_request, sample_token

from actorllm.core.model_runner_output import ModelRunnerOutput
from actorllm.core.request import RequestStatus
from actorllm.core.scheduler import Scheduler, SchedulerConfig
from actorllm.core.scheduler_output import SchedulerOutput

BS = 4
MAX_LEN = 40
# Prompts share prefixes so prefix-cache hits happen often.
PREFIXES = [[5, 6, 7, 8, 9, 10, 11, 12], [5, 6, 7, 8, 20, 21, 22, 23], [30, 31, 32, 33]]


class SchedulerMachine(RuleBasedStateMachine):
    async_scheduling = False

    @initialize(
        policy=st.sampled_from(["fcfs", "priority"]),
        chunked=st.booleans(),
        caching=st.booleans(),
        num_blocks=st.integers(MAX_LEN // BS + 1, 18),
        budget=st.integers(4, 24),
        threshold=st.sampled_from([0, 0, 3, 6]),
        max_seqs=st.integers(1, 6),
        # KV cache group windows: one group (full, or every layer sliding), or hybrid.
        layout=st.sampled_from([(None,), (None,), (5,), (8,), (None, 5), (None, 8, 8)]),
    )
    def setup(self, policy, chunked, caching, num_blocks, budget, threshold, max_seqs, layout):  # type: ignore[no-untyped-def]
        # Each further group may need a whole request's blocks.
        num_blocks += (len(layout) - 1) * (MAX_LEN // BS + 1)
        self.cfg = SchedulerConfig(
            max_num_seqs=max_seqs,
            max_num_batched_tokens=budget if chunked else MAX_LEN,
            max_model_len=MAX_LEN,
            block_size=BS,
            num_blocks=num_blocks,
            enable_prefix_caching=caching,
            enable_chunked_prefill=chunked,
            long_prefill_token_threshold=threshold,
            policy=policy,
            async_scheduling=self.async_scheduling,
            sliding_window=layout[0] if len(layout) == 1 else None,
            kv_group_windows=layout if len(layout) > 1 else None,
        )
        self.sched = Scheduler(self.cfg)
        self.worker = FakeWorker(BS, eos_period=9, group_windows=layout)
        self.inflight: deque[tuple[SchedulerOutput, ModelRunnerOutput]] = deque()
        self.next_id = 0
        self.prompts: dict[str, list[int]] = {}
        self.outputs: dict[str, list[int]] = {}  # what callers saw
        self.max_tokens: dict[str, int] = {}
        self.finished: set[str] = set()

    @rule(
        prefix=st.sampled_from(PREFIXES),
        tail=st.lists(st.integers(1, 49), max_size=10),
        max_tokens=st.integers(1, 12),
        priority=st.integers(0, 3),
        ignore_eos=st.booleans(),
        min_tokens=st.integers(0, 2),
        resumed=st.integers(0, 3),
    )
    def add(self, prefix, tail, max_tokens, priority, ignore_eos, min_tokens, resumed):  # type: ignore[no-untyped-def]
        rid = f"r{self.next_id}"
        self.next_id += 1
        prompt = (prefix + tail)[: MAX_LEN - 8]
        # A request resumed after a crash carries outputs the model sampled before.
        outs = [sample_token(rid, len(prompt) + i, eos_period=0) for i in range(resumed)]
        outs = outs[: max_tokens - 1]
        req = make_request(
            rid,
            prompt,
            arrival_time=float(self.next_id),
            priority=priority,
            output_token_ids=outs,
            max_tokens=max_tokens,
            ignore_eos=ignore_eos,
            min_tokens=min(min_tokens, max_tokens),
        )
        self.sched.add_request(req)
        self.prompts[rid] = prompt
        self.outputs[rid] = list(outs)
        self.max_tokens[rid] = max_tokens

    @precondition(lambda self: bool(self.sched.requests))
    @rule(data=st.data())
    def abort(self, data):  # type: ignore[no-untyped-def]
        rid = data.draw(st.sampled_from(sorted(self.sched.requests)))
        kv = self.sched.kv_cache_manager
        held = sum(len(kv.get_blocks(rid, g)) for g in range(kv.num_groups))
        free_before = self.sched.kv_cache_manager.num_free_blocks
        assert self.sched.finish_requests([rid], RequestStatus.FINISHED_ABORTED) == [rid]
        # Freed at once (shared blocks may stay held by others).
        assert self.sched.kv_cache_manager.num_free_blocks <= free_before + held
        assert rid not in self.sched.kv_cache_manager.req_to_blocks
        self.finished.add(rid)

    @rule()
    def step(self) -> None:
        so = self.sched.schedule()
        self.inflight.append((so, self.worker.execute(so)))
        depth = 2 if self.async_scheduling else 1
        if len(self.inflight) >= depth:
            self._update_oldest()

    @precondition(lambda self: bool(self.inflight))
    @rule()
    def drain(self) -> None:
        while self.inflight:
            self._update_oldest()

    @rule()
    def reset_prefix_cache(self) -> None:
        kv = self.sched.kv_cache_manager
        idle = kv.num_free_blocks == kv.num_usable_blocks
        assert self.sched.reset_prefix_cache() == idle
        if idle:
            assert not kv.block_pool.cached

    def _update_oldest(self) -> None:
        so, ro = self.inflight.popleft()
        eco = self.sched.update_from_output(so, ro)
        for o in eco.outputs:
            assert o.req_id not in self.finished, f"output for finished {o.req_id}"
            self.outputs[o.req_id].extend(o.new_token_ids)
            if o.finished:
                self.finished.add(o.req_id)
                self._check_finished(o.req_id, o)

    def _check_finished(self, rid, o) -> None:  # type: ignore[no-untyped-def]
        outs = self.outputs[rid]
        prompt = self.prompts[rid]
        assert len(outs) <= self.max_tokens[rid]
        assert len(prompt) + len(outs) <= MAX_LEN
        if o.finish_reason == "stop":
            assert outs[-1] == EOS
        else:
            assert len(outs) == self.max_tokens[rid] or len(prompt) + len(outs) == MAX_LEN

    @invariant()
    def consistent(self) -> None:
        if not hasattr(self, "sched"):
            return
        check_invariants(self.sched)
        # Every token a caller saw is the one the model sampled at that position.
        for rid, outs in self.outputs.items():
            base = len(self.prompts[rid])
            want = [sample_token(rid, base + i, eos_period=9) for i in range(len(outs))]
            got = [t for t in outs]
            # Resumed requests' carried outputs were sampled without EOS.
            for i, (g, w) in enumerate(zip(got, want, strict=True)):
                if g != w:
                    assert g == sample_token(rid, base + i, eos_period=0), (rid, i, got, want)

    def teardown(self) -> None:
        if not hasattr(self, "sched"):
            return
        for _ in range(400):
            if not self.sched.has_unfinished_requests() and not self.inflight:
                break
            self.step()
            check_invariants(self.sched)
        while self.inflight:
            self._update_oldest()
        assert not self.sched.has_unfinished_requests()
        check_invariants(self.sched)
        kv = self.sched.kv_cache_manager
        assert kv.num_free_blocks == kv.num_usable_blocks
        assert set(self.outputs) == self.finished
        stats = self.sched.statistics()
        event(f"preempted: {stats.num_preemptions > 0}")
        event(f"prefix hits: {stats.prefix_cache_hits > 0}")
        event(f"finished: {min(len(self.finished), 5)}+")


SETTINGS = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class AsyncSchedulerMachine(SchedulerMachine):
    async_scheduling = True


TestScheduler = SchedulerMachine.TestCase
TestScheduler.settings = SETTINGS
TestAsyncScheduler = AsyncSchedulerMachine.TestCase
TestAsyncScheduler.settings = SETTINGS
