"""Test helpers for the scheduler: a fake worker with a shadow KV cache, and invariants.

``FakeWorker`` behaves like the real worker as far as the scheduler can tell: it keeps
per-request state from ``NewRequestData`` / ``CachedRequestData``, computes exactly the
scheduled positions, "writes" each position's token id into a shadow KV cache
(``{block_id: {offset: token_id}}``) and samples a deterministic token, a function of
(request id, position). Reading a prefix-cache hit checks the shadow contents against the
request's tokens, so a hit that returns a block with different tokens fails loudly.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from dataclasses import dataclass, field

from actorllm.core.model_runner_output import ModelRunnerOutput
from actorllm.core.request import Request, RequestStatus
from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler import Scheduler
from actorllm.core.scheduler_output import SchedulerOutput

EOS = 0


def make_request(
    rid: str,
    prompt: list[int],
    *,
    eos_token_id: int | None = EOS,
    arrival_time: float = 0.0,
    priority: int = 0,
    output_token_ids: list[int] | None = None,
    cache_salt: str | None = None,
    **params: object,
) -> Request:
    params.setdefault("max_tokens", 16)
    return Request(
        rid,
        prompt,
        SamplingParams(**params),  # type: ignore[arg-type]
        eos_token_id=eos_token_id,
        arrival_time=arrival_time,
        priority=priority,
        output_token_ids=output_token_ids or [],
        cache_salt=cache_salt,
    )


def sample_token(rid: str, position: int, vocab: int = 50, eos_period: int = 0) -> int:
    """The token the fake model samples at ``position``: deterministic, never EOS unless
    ``eos_period`` > 0 (then about one position in ``eos_period`` yields EOS)."""
    h = zlib.crc32(f"{rid}:{position}".encode())
    if eos_period and h % eos_period == 0:
        return EOS
    return 1 + h % (vocab - 1)


@dataclass
class _WorkerReq:
    tokens: list[int]
    block_ids: list[list[int]]  # one table per KV cache group
    num_computed: int


@dataclass
class FakeWorker:
    """Checks every KV read and write against a shadow cache, per KV cache group."""

    block_size: int
    eos_period: int = 0
    fixed_token: int | None = None  # when set, always sample this token
    # With a sliding window, every scheduled query must still find the KV its window
    # reads (handed-back slots are never read, so they may be reused by then).
    sliding_window: int | None = None
    # A hybrid model's group windows (None entries: full attention); overrides the above.
    group_windows: tuple[int | None, ...] | None = None
    reqs: dict[str, _WorkerReq] = field(default_factory=dict)
    shadow: dict[int, dict[int, int]] = field(default_factory=lambda: defaultdict(dict))
    steps: int = 0

    @property
    def windows(self) -> tuple[int | None, ...]:
        return self.group_windows or (self.sliding_window,)

    def _window_start(self, num_computed: int, window: int | None) -> int:
        """The first position the next query reads."""
        if window is None:
            return 0
        return max(num_computed - window + 1, 0)

    def execute(self, so: SchedulerOutput) -> ModelRunnerOutput:
        bs = self.block_size
        windows = self.windows
        for rid in [*so.finished_req_ids, *so.preempted_req_ids]:
            self.reqs.pop(rid, None)
        for nd in so.scheduled_new_reqs:
            tokens = [*nd.prompt_token_ids, *nd.output_token_ids]
            assert len(nd.block_ids) == len(windows), "one table per KV cache group"
            for table, window in zip(nd.block_ids, windows, strict=True):
                window_start = self._window_start(nd.num_computed_tokens, window)
                for p in range(window_start, nd.num_computed_tokens):  # a hit: contents match
                    got = self.shadow[table[p // bs]].get(p % bs)
                    assert got == tokens[p], (
                        f"{nd.req_id}: prefix hit at {p} holds {got}, not {tokens[p]}"
                    )
                for b in table[nd.num_computed_tokens // bs :]:
                    self.shadow[b].clear()  # freshly allocated: old contents are garbage
            self.reqs[nd.req_id] = _WorkerReq(
                tokens, [list(t) for t in nd.block_ids], nd.num_computed_tokens
            )
        for cd in so.scheduled_cached_reqs:
            st = self.reqs[cd.req_id]
            assert cd.num_computed_tokens == st.num_computed, (cd, st.num_computed)
            for table, added in zip(st.block_ids, cd.new_block_ids, strict=True):
                for b in added:
                    self.shadow[b].clear()
                table += added
            assert len({len(t) for t in st.block_ids}) == 1, "group tables differ in length"
        req_ids: list[str] = []
        sampled: list[list[int]] = []
        for rid, n in so.num_scheduled_tokens.items():
            st = self.reqs[rid]
            assert n > 0
            assert st.num_computed + n <= len(st.tokens), "scheduled a position with no token"
            for table, window in zip(st.block_ids, windows, strict=True):
                reads = range(self._window_start(st.num_computed, window), st.num_computed)
                for p in reads if window is not None else ():
                    got = self.shadow[table[p // bs]].get(p % bs)
                    assert got == st.tokens[p], f"{rid}: KV at {p} in its window is {got}"
                for p in range(st.num_computed, st.num_computed + n):
                    assert table[p // bs] > 0, "wrote into the null block"
                    slot = self.shadow[table[p // bs]]
                    old = slot.get(p % bs)
                    assert old is None or old == st.tokens[p], f"{rid} overwrote shared KV at {p}"
                    slot[p % bs] = st.tokens[p]
            st.num_computed += n
            req_ids.append(rid)
            if st.num_computed == len(st.tokens):
                tok = self.fixed_token
                if tok is None:
                    tok = sample_token(rid, len(st.tokens), eos_period=self.eos_period)
                st.tokens.append(tok)
                sampled.append([tok])
            else:
                sampled.append([])
        self.steps += 1
        return ModelRunnerOutput(step_id=so.step_id, req_ids=req_ids, sampled_token_ids=sampled)


def run_step(sched: Scheduler, worker: FakeWorker) -> tuple[SchedulerOutput, list]:  # type: ignore[type-arg]
    so = sched.schedule()
    eco = sched.update_from_output(so, worker.execute(so))
    return so, eco.outputs


def check_invariants(sched: Scheduler) -> None:
    """Block accounting, request/block consistency and queue membership."""
    kv = sched.kv_cache_manager
    pool = kv.block_pool
    holders: dict[int, int] = defaultdict(int)
    for group in kv.groups:
        assert group.req_to_blocks.keys() == kv.req_to_blocks.keys(), "groups hold other requests"
        for rid, blocks in group.req_to_blocks.items():
            assert rid in sched.requests, f"finished request {rid} still holds blocks"
            assert len(blocks) == len(kv.req_to_blocks[rid]), f"{rid}: tables differ in length"
            ids = [b.block_id for b in blocks]
            if group.window is not None:  # handed-back slots lead with nulls
                skipped = group.num_skipped_blocks[rid]
                assert ids[:skipped] == [0] * skipped, f"{rid}: null slots not leading"
                ids = ids[skipped:]
            assert len(set(ids)) == len(ids), f"{rid} holds a block twice"
            assert 0 not in ids, f"{rid} holds the null block"
            for b in ids:
                holders[b] += 1
    free_ids = {b.block_id for b in pool.free_queue}
    assert len(free_ids) == pool.num_free_blocks
    for block in pool.blocks[1:]:
        assert block.ref_cnt == holders.get(block.block_id, 0), (block, holders.get(block.block_id))
        assert (block.ref_cnt == 0) == (block.block_id in free_ids), block
    assert 0 not in free_ids
    used = sum(1 for b in pool.blocks[1:] if b.ref_cnt > 0)
    assert used + pool.num_free_blocks == pool.num_usable_blocks
    for g, cached in enumerate(pool.cached_by_group):
        for h, block in cached.items():
            assert block.block_hash == h and block.group == g
    bs = kv.block_size
    for r in sched.running:
        assert r.status is RequestStatus.RUNNING
        assert len(kv.get_blocks(r.request_id)) * bs >= r.num_computed_tokens
    for r in sched.waiting:
        assert r.status in (RequestStatus.WAITING, RequestStatus.PREEMPTED)
        assert r.request_id not in kv.req_to_blocks, f"waiting {r.request_id} holds blocks"
        assert r.num_computed_tokens == 0
    assert len(sched.running) + len(sched.waiting) == len(sched.requests)
    assert len(sched.running) <= sched.config.max_num_seqs
    if not sched.requests:
        assert pool.num_free_blocks == pool.num_usable_blocks
