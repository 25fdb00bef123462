"""A small hand-rolled scheduler that drives a ``ModelRunner`` with real ``SchedulerOutput``s.

It exercises what the worker must get right without depending on ``core.scheduler``:
token-budget chunked prefill, block allocation, prefix-cache hits (full blocks whose token
prefix was computed before are handed to a new request as already computed), and
recompute-preemption (``preempt(req_id)``: the request's blocks are dropped and it comes
back later as a new request carrying its outputs so far). A hybrid model's KV cache groups
each get their own table: logical block ``b`` is physical block ``1 + (b - 1) * G + g`` in
group ``g`` (every block kept, as full attention).

    driver = SchedDriver(runner, token_budget=8)
    driver.add("a", [5, 6, 7], SamplingParams(temperature=0, max_tokens=4))
    driver.run()
    driver.outputs["a"]   # sampled tokens
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from actorllm.core.model_runner_output import ModelRunnerOutput, TokenLogprobs
from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler_output import CachedRequestData, NewRequestData, SchedulerOutput


@dataclass
class _Req:
    req_id: str
    prompt: list[int]
    params: SamplingParams
    outputs: list[int] = field(default_factory=list)
    num_computed: int = 0
    blocks: list[int] = field(default_factory=list)
    on_worker: bool = False  # the worker holds its state (send Cached, not New)
    logprobs: list[TokenLogprobs] = field(default_factory=list)
    prompt_logprobs: list[TokenLogprobs] = field(default_factory=list)

    @property
    def tokens(self) -> list[int]:
        return self.prompt + self.outputs


class SchedDriver:
    def __init__(
        self,
        runner: Any,
        *,
        token_budget: int = 2048,
        enable_prefix_caching: bool = True,
        eos_token_id: int | None = None,
    ) -> None:
        self.runner = runner
        self.bs: int = runner.block_size
        self.budget = token_budget
        self.prefix_caching = enable_prefix_caching
        self.eos_token_id = eos_token_id
        self.num_groups = len(getattr(runner, "kv_groups", (None,)))
        num_logical = (runner.num_blocks - 1) // self.num_groups
        self.free_blocks = list(range(num_logical, 0, -1))  # block 0 is null
        self.cache: dict[tuple[int, ...], int] = {}  # token prefix ending a full block -> block
        self.cached_blocks: set[int] = set()
        self.waiting: list[_Req] = []
        self.running: list[_Req] = []
        self.reqs: dict[str, _Req] = {}
        self.finished: list[str] = []
        self.preempted: list[str] = []
        self.step_id = 0
        self.prefix_hits = 0  # tokens served from the prefix cache
        self.steps: list[SchedulerOutput] = []

    # -- API ----------------------------------------------------------------------------

    def add(self, req_id: str, prompt: list[int], params: SamplingParams) -> None:
        r = _Req(req_id, list(prompt), params)
        self.reqs[req_id] = r
        self.waiting.append(r)

    def preempt(self, req_id: str) -> None:
        """Recompute-preempt a running request before the next step."""
        r = self.reqs[req_id]
        self.running.remove(r)
        self._release(r)
        r.num_computed = 0
        r.on_worker = False
        self.preempted.append(req_id)
        self.waiting.insert(0, r)

    @property
    def outputs(self) -> dict[str, list[int]]:
        return {k: r.outputs for k, r in self.reqs.items()}

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def step(self) -> ModelRunnerOutput:
        so = self.schedule()
        out = self.runner.execute(so)
        self.update(so, out)
        return out

    def run(self, max_steps: int = 1000, on_step: Any = None) -> None:
        for _ in range(max_steps):
            if not self.has_work():
                return
            self.step()
            if on_step is not None:
                on_step(self)
        raise AssertionError("requests did not finish")

    # -- scheduling ---------------------------------------------------------------------

    def schedule(self) -> SchedulerOutput:
        budget = self.budget
        num_sched: dict[str, int] = {}
        new: list[NewRequestData] = []
        cached: list[CachedRequestData] = []
        for r in self.running:
            if budget == 0:
                break
            n = min(len(r.tokens) - r.num_computed, budget)
            added = self._allocate(r, r.num_computed + n)
            cached.append(
                CachedRequestData(
                    req_id=r.req_id,
                    new_block_ids=self._tables(added),
                    num_computed_tokens=r.num_computed,
                )
            )
            num_sched[r.req_id] = n
            budget -= n
        while self.waiting and budget > 0:
            r = self.waiting.pop(0)
            self._prefix_hit(r)
            n = min(len(r.tokens) - r.num_computed, budget)
            self._allocate(r, r.num_computed + n)
            new.append(
                NewRequestData(
                    req_id=r.req_id,
                    prompt_token_ids=r.prompt,
                    output_token_ids=list(r.outputs),
                    sampling_params=r.params,
                    block_ids=self._tables(r.blocks),
                    num_computed_tokens=r.num_computed,
                    eos_token_id=self.eos_token_id,
                )
            )
            r.on_worker = True
            num_sched[r.req_id] = n
            budget -= n
            self.running.append(r)
        so = SchedulerOutput(
            step_id=self.step_id,
            scheduled_new_reqs=new,
            scheduled_cached_reqs=cached,
            num_scheduled_tokens=num_sched,
            total_num_scheduled_tokens=sum(num_sched.values()),
            finished_req_ids=self.finished,
            preempted_req_ids=self.preempted,
        )
        self.finished, self.preempted = [], []
        self.step_id += 1
        for req_id, n in num_sched.items():
            self.reqs[req_id].num_computed += n
        self.steps.append(so)
        return so

    def update(self, so: SchedulerOutput, out: ModelRunnerOutput) -> None:
        assert out.step_id == so.step_id
        assert sorted(out.req_ids) == sorted(so.num_scheduled_tokens)
        for req_id, toks in zip(out.req_ids, out.sampled_token_ids, strict=True):
            r = self.reqs[req_id]
            r.prompt_logprobs += out.prompt_logprobs.get(req_id, [])
            self._register_blocks(r)
            if not toks:
                continue
            r.outputs += toks
            if req_id in out.logprobs:
                r.logprobs.append(out.logprobs[req_id])
            stop = r.params.all_stop_token_ids(self.eos_token_id)
            assert r.params.max_tokens is not None
            if len(r.outputs) >= r.params.max_tokens or (
                toks[-1] in stop and len(r.outputs) > r.params.min_tokens
            ):
                self.running.remove(r)
                self._release(r)
                self.finished.append(req_id)

    # -- blocks -------------------------------------------------------------------------

    def _tables(self, blocks: list[int]) -> tuple[list[int], ...]:
        """One table per KV cache group for these logical blocks."""
        g_count = self.num_groups
        return tuple([1 + (b - 1) * g_count + g for b in blocks] for g in range(g_count))

    def _allocate(self, r: _Req, num_tokens: int) -> list[int]:
        need = -(-num_tokens // self.bs) - len(r.blocks)
        added = [self.free_blocks.pop() for _ in range(max(need, 0))]
        r.blocks += added
        return added

    def _release(self, r: _Req) -> None:
        self.free_blocks += [b for b in reversed(r.blocks) if b not in self.cached_blocks]
        r.blocks = []

    def _prefix_hit(self, r: _Req) -> None:
        if not self.prefix_caching:
            return
        toks = r.tokens
        # Leave at least one token to compute (its logits are needed).
        for i in range((len(toks) - 1) // self.bs):
            b = self.cache.get(tuple(toks[: (i + 1) * self.bs]))
            if b is None:
                break
            r.blocks.append(b)
            r.num_computed += self.bs
            self.prefix_hits += self.bs

    def _register_blocks(self, r: _Req) -> None:
        if not self.prefix_caching:
            return
        toks = r.tokens
        for i in range(min(r.num_computed, len(toks)) // self.bs):
            key = tuple(toks[: (i + 1) * self.bs])
            if key not in self.cache and r.blocks[i] not in self.cached_blocks:
                self.cache[key] = r.blocks[i]
                self.cached_blocks.add(r.blocks[i])
