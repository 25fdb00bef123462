"""The scheduler-side KV connector interface, with a counting test double."""

from __future__ import annotations

from collections.abc import Sequence

from sched_helpers import FakeWorker, make_request, run_step

from actorllm.core.kv_cache.block_hash import BlockHash
from actorllm.core.kv_cache.free_queue import KVCacheBlock
from actorllm.core.request import Request
from actorllm.core.scheduler import KVConnectorBase, KVConnectorMetadata, Scheduler, SchedulerConfig
from actorllm.core.scheduler_output import SchedulerOutput


class CountingConnector(KVConnectorBase):
    """Claims it can load ``available`` tokens of every request; records every call."""

    def __init__(self, available: int) -> None:
        self.available = available
        self.calls: dict[str, int] = {}
        self.loads: list[tuple[BlockHash, int]] = []
        self.finished: list[str] = []
        self.evicted: list[int] = []

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def get_num_new_matched_tokens(self, request: Request, num_computed_tokens: int) -> int:
        self._count("match")
        return self.available

    def update_state_after_alloc(
        self, request: Request, blocks: Sequence[KVCacheBlock], num_external_tokens: int
    ) -> None:
        self._count("alloc")
        n = num_external_tokens // 4
        self.loads += [(request.block_hashes[i], blocks[i].block_id) for i in range(n)]

    def request_finished(self, request: Request, block_ids: list[int]) -> None:
        self.finished.append(request.request_id)

    def on_block_evicted(self, block_hash: BlockHash, block_id: int) -> None:
        self.evicted.append(block_id)

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> KVConnectorMetadata:
        self._count("meta")
        loads, self.loads = self.loads, []
        return KVConnectorMetadata(step_id=scheduler_output.step_id, loads=loads)


def make(conn: CountingConnector) -> Scheduler:
    cfg = SchedulerConfig(max_model_len=32, block_size=4, num_blocks=9, max_num_batched_tokens=64)
    return Scheduler(cfg, kv_connector=conn)


def test_external_tokens_are_computed_and_loaded() -> None:
    conn = CountingConnector(available=100)  # capped: the last token is always computed
    s = make(conn)
    s.add_request(make_request("a", list(range(1, 11)), max_tokens=1))
    so = s.schedule()
    assert so.scheduled_new_reqs[0].num_computed_tokens == 9 and so.num_scheduled_tokens == {"a": 1}
    meta = s.take_connector_metadata()
    assert meta is not None and meta.step_id == so.step_id
    assert [bid for _, bid in meta.loads] == so.scheduled_new_reqs[0].block_ids[0][:2]
    assert s.take_connector_metadata() is None  # taken once
    stats = s.statistics()
    assert (stats.connector_queries, stats.connector_hits) == (10, 9)
    w = FakeWorker(4)
    w.shadow.update(
        {
            b: dict(enumerate(range(1 + 4 * i, 5 + 4 * i)))
            for i, b in enumerate(so.scheduled_new_reqs[0].block_ids[0][:2])
        }
    )
    w.shadow[so.scheduled_new_reqs[0].block_ids[0][2]] = {0: 9}
    s.update_from_output(so, w.execute(so))
    assert conn.finished == ["a"]


def test_disabled_connector_is_never_called() -> None:
    conn = CountingConnector(available=4)
    s = make(conn)
    s.set_kv_connector_enabled(False)
    assert not s.kv_connector_enabled
    s.add_request(make_request("a", list(range(1, 11)), max_tokens=2))
    w = FakeWorker(4)
    while s.has_unfinished_requests():
        run_step(s, w)
    assert conn.calls == {} and conn.finished == []
    assert s.take_connector_metadata() is None
    s.set_kv_connector_enabled(True)
    s.add_request(make_request("b", list(range(50, 60)), max_tokens=1))
    s.schedule()
    assert conn.calls == {"match": 1, "alloc": 1, "meta": 1}


def test_without_a_connector_it_cannot_be_enabled() -> None:
    s = Scheduler(SchedulerConfig(max_model_len=32, block_size=4, num_blocks=9))
    try:
        s.set_kv_connector_enabled(True)
    except ValueError:
        return
    raise AssertionError("expected ValueError")
