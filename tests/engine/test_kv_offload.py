"""The KV offload tier: index (LRU, tiers, capacities, pins), connector (hits after the local
prefix hit, loads into the right blocks, saves on eviction, write-through, toggling), and
end to end with the real core
``Scheduler`` and a tiny real ``ModelRunner``: a prompt whose cached blocks were evicted is
served from host memory or disk and yields the same greedy tokens as its first run. The
store alone (the worker half) is tests/worker/test_offload_store.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from actorllm.core.kv_cache.block_hash import BlockHash, BlockHasher
from actorllm.core.request import Request
from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler import Scheduler, SchedulerConfig
from actorllm.core.scheduler_output import SchedulerOutput
from actorllm.engine.config.engine_config import EngineConfig
from actorllm.engine.kv_offload import (
    OffloadConnector,
    OffloadIndex,
    OffloadMetadata,
    OffloadOp,
    OffloadStore,
    Tier,
    make_offload_connector,
)
from actorllm.testing.scripted_model import ScriptedModel
from actorllm.worker.model_runner import ModelRunner
from tests.helpers.models import make_tiny_checkpoint

BS = 4
GREEDY = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)


def kinds(ops: list[OffloadOp]) -> list[tuple[str, bytes]]:
    return [(o.kind, o.block_hash) for o in ops]


def prompt(seed: int, n: int = 14) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, 128, (n,), generator=g).tolist()


def hashes_of(tokens: list[int]) -> list[BlockHash]:
    out: list[BlockHash] = []
    BlockHasher(BS).extend(out, tokens, None)
    return out


# -- index ------------------------------------------------------------------------------


def test_index_lru_host_only() -> None:
    idx = OffloadIndex(host_blocks=2)
    assert idx.save(b"a", 1) and idx.save(b"b", 2)
    assert not idx.save(b"a", 5)  # already held: only touched (a is now most recent)
    assert idx.save(b"c", 3)  # evicts the LRU: b
    assert kinds(idx.take_ops()) == [("save", b"a"), ("save", b"b"), ("drop", b"b"), ("save", b"c")]
    assert idx.hashes(Tier.HOST) == [b"a", b"c"]
    assert idx.match([b"a", b"b", b"c"]) == 1  # consecutive only; touches a
    idx.save(b"d", 4)
    assert idx.hashes(Tier.HOST) == [b"a", b"d"]  # c was the LRU after the match
    assert idx.take_ops()[-2:] == [OffloadOp("drop", b"c"), OffloadOp("save", b"d", 4)]


def test_index_spills_to_disk_and_drops_from_disk() -> None:
    idx = OffloadIndex(host_blocks=1, disk_blocks=2)
    for i, h in enumerate([b"a", b"b", b"c", b"d"]):
        idx.save(h, i + 1)
    assert kinds(idx.take_ops()) == [
        ("save", b"a"),
        ("spill", b"a"), ("save", b"b"),
        ("spill", b"b"), ("save", b"c"),
        ("drop", b"a"), ("spill", b"c"), ("save", b"d"),
    ]  # fmt: skip
    assert idx.hashes(Tier.HOST) == [b"d"]
    assert idx.hashes(Tier.DISK) == [b"b", b"c"]
    assert idx.tier(b"a") is None and idx.tier(b"b") is Tier.DISK
    s = idx.statistics()
    assert (s.host_used, s.disk_used, s.num_saves, s.num_spills, s.num_drops) == (1, 2, 4, 3, 1)
    idx.clear()
    assert len(idx) == 0 and kinds(idx.take_ops()) == [
        ("drop", b"b"), ("drop", b"c"), ("drop", b"d"),
    ]  # fmt: skip


def test_index_without_host_room_goes_straight_to_disk_and_without_any_declines() -> None:
    idx = OffloadIndex(host_blocks=0, disk_blocks=1)
    idx.save(b"a", 1)
    assert kinds(idx.take_ops()) == [("save", b"a"), ("spill", b"a")]
    assert idx.tier(b"a") is Tier.DISK
    none = OffloadIndex(host_blocks=0)
    assert not none.save(b"a", 1) and none.take_ops() == []
    with pytest.raises(ValueError):
        OffloadIndex(host_blocks=-1)


def test_index_pins_protect_promised_blocks() -> None:
    idx = OffloadIndex(host_blocks=1)
    idx.save(b"a", 1)
    idx.pin([b"a"])
    assert not idx.save(b"b", 2)  # the only room is pinned: declined, a stays
    assert b"a" in idx and b"b" not in idx
    assert idx.statistics().num_declined == 1
    idx.unpin_all()
    assert idx.save(b"b", 2) and b"a" not in idx
    # With a disk tier a pinned block may spill (its load reads the file), never drop.
    tiers = OffloadIndex(host_blocks=1, disk_blocks=1)
    tiers.save(b"a", 1)
    tiers.pin([b"a"])
    assert tiers.save(b"b", 2) and tiers.tier(b"a") is Tier.DISK
    tiers.pin([b"b"])
    assert not tiers.save(b"c", 3)  # b would spill, but the disk's only block is pinned
    assert (tiers.tier(b"a"), tiers.tier(b"b"), tiers.tier(b"c")) == (Tier.DISK, Tier.HOST, None)
    tiers.unpin_all()
    tiers.pin([b"a"])
    assert tiers.save(b"c", 3)  # b (unpinned) has nowhere to spill: dropped
    assert kinds(tiers.take_ops()) == [
        ("save", b"a"), ("spill", b"a"), ("save", b"b"), ("drop", b"b"), ("save", b"c"),
    ]  # fmt: skip


def test_index_forgets_lost_blocks_and_unsent_saves() -> None:
    idx = OffloadIndex(host_blocks=4)
    idx.save(b"a", 1)
    idx.take_ops()
    idx.report_lost(b"a")  # the worker could not find it
    assert b"a" in idx  # forgotten at the next lookup, not before
    assert idx.match([b"a"]) == 0 and b"a" not in idx
    assert kinds(idx.take_ops()) == [("drop", b"a")]
    idx.save(b"b", 2)
    idx.save(b"c", 3)
    idx.load(b"b", 7)
    OffloadConnector(idx, BS)  # a new core: a crashed one decided these, never sent them
    assert len(idx) == 0
    assert kinds(idx.take_ops()) == [("drop", b"b"), ("drop", b"c")]


# -- connector ------------------------------------------------------------------------


def test_connector_counts_consecutive_hits_after_the_local_hit() -> None:
    tokens = prompt(1, 14)  # 3 full blocks + 2 tokens
    h = hashes_of(tokens)
    req = Request("r", tokens, GREEDY)
    req.attach_block_hasher(BlockHasher(BS))
    idx = OffloadIndex(host_blocks=8)
    conn = OffloadConnector(idx, BS)
    idx.save(h[1], 1)
    idx.save(h[2], 2)
    assert conn.get_num_new_matched_tokens(req, 4) == 8  # block 0 local, blocks 1-2 stored
    assert conn.get_num_new_matched_tokens(req, 0) == 0  # block 0 is not stored
    assert conn.get_num_new_matched_tokens(req, 8) == 4
    idx.save(h[0], 3)
    assert conn.get_num_new_matched_tokens(req, 0) == 12
    # 12 tokens: the third block holds the last token, which must be computed.
    short = Request("s", tokens[:12], GREEDY)
    short.attach_block_hasher(BlockHasher(BS))
    assert conn.get_num_new_matched_tokens(short, 0) == 8
    plp = Request("p", tokens, SamplingParams(prompt_logprobs=1))
    plp.attach_block_hasher(BlockHasher(BS))
    assert conn.get_num_new_matched_tokens(plp, 0) == 0  # needs every position's logits


def _scripted_run(
    sched: Scheduler, runner: Any, store: OffloadStore, rid: str, tokens: list[int]
) -> tuple[list[int], list[OffloadMetadata]]:
    """Run one request to completion; apply the connector's ops before every step."""
    sched.add_request(Request(rid, tokens, GREEDY))
    out: list[int] = []
    metas: list[OffloadMetadata] = []
    while sched.has_unfinished_requests():
        so = sched.schedule()
        meta = sched.take_connector_metadata()
        if meta is not None:
            assert isinstance(meta, OffloadMetadata)
            metas.append(meta)
            store.apply(runner, meta)
        for o in sched.update_from_output(so, runner.execute(so)).outputs:
            out += o.new_token_ids
    return out, metas


def _scripted_setup(
    num_blocks: int = 12, **index_kw: int
) -> tuple[Scheduler, OffloadIndex, OffloadStore, ScriptedModel]:
    idx = OffloadIndex(**({"host_blocks": 64} | index_kw))
    store = OffloadStore(on_lost=idx.report_lost)
    cfg = SchedulerConfig(
        max_model_len=40, block_size=BS, num_blocks=num_blocks, max_num_batched_tokens=64
    )
    return Scheduler(cfg, OffloadConnector(idx, BS)), idx, store, ScriptedModel(vocab_size=128)


def test_saves_on_eviction_and_loads_into_the_right_blocks() -> None:
    sched, idx, store, runner = _scripted_setup()
    a = prompt(1)
    first, metas = _scripted_run(sched, runner, store, "a1", a)
    assert all(not m.saves and not m.loads for m in metas)  # nothing evicted yet
    a_blocks = {h: b.block_id for h, b in sched.kv_cache_manager.block_pool.cached.items()}
    a_hashes = hashes_of(a + first)
    saved: dict[BlockHash, int] = {}
    for i in range(2, 6):
        _, metas = _scripted_run(sched, runner, store, f"x{i}", prompt(i))
        for m in metas:
            saved.update(m.saves)
    # Every cached block of a was saved, from the block id it lived in, when it was evicted.
    assert a_hashes[0] in saved
    assert {h: saved[h] for h in a_blocks if h in a_hashes} == {
        h: b for h, b in a_blocks.items() if h in a_hashes
    }
    assert a_hashes[0] not in sched.kv_cache_manager.block_pool.cached  # gone locally
    again, metas = _scripted_run(sched, runner, store, "a2", a)
    assert again == first
    loads = metas[0].loads
    assert [h for h, _ in loads] == a_hashes[:3]  # (14 - 1) // 4 = 3 blocks, in order
    assert sched.statistics().connector_hits == 12
    assert store.statistics().num_loads_host == 3
    assert idx.statistics().num_loads_host == 3


def test_loads_name_the_blocks_of_the_new_request() -> None:
    sched, _, store, runner = _scripted_setup()
    a = prompt(1)
    _scripted_run(sched, runner, store, "a1", a)
    for i in range(2, 6):
        _scripted_run(sched, runner, store, f"x{i}", prompt(i))
    sched.add_request(Request("a2", a, GREEDY))
    so = sched.schedule()
    meta = sched.take_connector_metadata()
    assert isinstance(meta, OffloadMetadata)
    (new,) = so.scheduled_new_reqs
    assert new.num_computed_tokens == 12 and so.num_scheduled_tokens == {"a2": 2}
    assert meta.loads == list(zip(hashes_of(a)[:3], new.block_ids[0][:3], strict=True))
    store.apply(runner, meta)
    sched.update_from_output(so, runner.execute(so))
    while sched.has_unfinished_requests():
        so = sched.schedule()
        sched.update_from_output(so, runner.execute(so))
    # The scheduler registered the loaded blocks under their hashes (a later prompt hits them).
    cached = sched.kv_cache_manager.block_pool.cached
    assert [cached[h].block_id for h, _ in meta.loads] == new.block_ids[0][:3]


def test_toggle_off_means_no_lookups_no_hits_no_ops() -> None:
    sched, idx, store, runner = _scripted_setup()
    sched.set_kv_connector_enabled(False)
    a = prompt(1)
    _scripted_run(sched, runner, store, "a1", a)
    for i in range(2, 6):
        _scripted_run(sched, runner, store, f"x{i}", prompt(i))
    assert len(idx) == 0  # evictions were not saved
    sched.set_kv_connector_enabled(True)
    _scripted_run(sched, runner, store, "a2", a)  # now saved, but nothing was stored before
    st = sched.statistics()
    assert st.connector_hits == 0 and st.connector_queries > 0
    # Stored while on; switched off, a lookup that would hit is not even asked.
    for i in range(6, 10):
        _scripted_run(sched, runner, store, f"y{i}", prompt(i))
    assert hashes_of(a)[0] in idx
    sched.set_kv_connector_enabled(False)
    queries = sched.statistics().connector_queries
    _, metas = _scripted_run(sched, runner, store, "a3", a)
    assert metas == [] and sched.statistics().connector_queries == queries
    assert sched.statistics().connector_hits == 0


def test_write_through_saves_finished_blocks_first_in_the_next_step() -> None:
    idx = OffloadIndex(host_blocks=64)
    store = OffloadStore()
    cfg = SchedulerConfig(max_model_len=64, block_size=BS, num_blocks=40)
    sched = Scheduler(cfg, OffloadConnector(idx, BS, write_through=True))
    runner = ScriptedModel(vocab_size=128)
    a = prompt(1)
    first, _ = _scripted_run(sched, runner, store, "a1", a)
    assert len(idx) == 0  # held back until the next step is built
    _, metas = _scripted_run(sched, runner, store, "b", prompt(2))
    h = hashes_of(a + first)
    assert [hh for hh, _ in metas[0].saves] == h[:4]  # 19 of 20 positions computed
    assert metas[0].ops[: len(metas[0].saves)] == [
        OffloadOp("save", hh, b) for hh, b in metas[0].saves
    ]
    # The device cache is lost (e.g. a core restart); the tier still has a's blocks.
    sched.reset_prefix_cache()
    again, metas = _scripted_run(sched, runner, store, "a2", a)
    assert again == first and len(metas[0].loads) == 3


def test_write_through_skips_blocks_a_sliding_window_handed_back() -> None:
    """Slots behind the window hold the null block: saving them would save block 0."""
    idx = OffloadIndex(host_blocks=64)
    cfg = SchedulerConfig(max_model_len=64, block_size=BS, num_blocks=40, sliding_window=BS)
    sched = Scheduler(cfg, OffloadConnector(idx, BS, write_through=True))
    runner = ScriptedModel(vocab_size=128)
    _scripted_run(sched, runner, OffloadStore(), "a", prompt(1))
    _, metas = _scripted_run(sched, runner, OffloadStore(), "b", prompt(2))
    saves = metas[0].saves
    assert saves and all(b != 0 for _, b in saves)


def test_write_through_saves_are_dropped_across_a_switched_off_gap() -> None:
    idx = OffloadIndex(host_blocks=64)
    cfg = SchedulerConfig(max_model_len=64, block_size=BS, num_blocks=40)
    sched = Scheduler(cfg, OffloadConnector(idx, BS, write_through=True))
    runner, store = ScriptedModel(vocab_size=128), OffloadStore()
    _scripted_run(sched, runner, store, "a1", prompt(1))
    sched.set_kv_connector_enabled(False)  # steps run without the connector: blocks may change
    _scripted_run(sched, runner, store, "b", prompt(2))
    sched.set_kv_connector_enabled(True)
    _, metas = _scripted_run(sched, runner, store, "c", prompt(3))
    assert all(not m.saves for m in metas[:1]) and len(idx) == 0


def test_empty_step_keeps_its_ops_for_the_next_step() -> None:
    idx = OffloadIndex(host_blocks=4)
    conn = OffloadConnector(idx, BS)
    conn.on_block_evicted(b"a", 3)
    meta = conn.build_connector_meta(SchedulerOutput.empty(1))
    assert meta.ops == []  # the engine sends nothing for an empty step
    conn.on_block_evicted(b"b", 4)
    meta = conn.build_connector_meta(_nonempty(2))
    assert meta.ops == [OffloadOp("save", b"a", 3), OffloadOp("save", b"b", 4)]


def _nonempty(step_id: int) -> SchedulerOutput:
    return SchedulerOutput(
        step_id=step_id,
        scheduled_new_reqs=[],
        scheduled_cached_reqs=[],
        num_scheduled_tokens={"r": 1},
        total_num_scheduled_tokens=1,
        finished_req_ids=[],
        preempted_req_ids=[],
    )


def test_factory_builds_one_index_per_engine(tmp_path: Path) -> None:
    runner = ScriptedModel(kv_bytes_per_block=1000)
    cfg = EngineConfig(
        block_size=BS, kv_offload_host_bytes=10_500, kv_offload_disk_dir=str(tmp_path)
    )
    tier = make_offload_connector(cfg, runner.kv_cache_bytes_per_block(), disk_bytes=50_000)
    c1, c2 = tier.new_connector(), tier.new_connector()
    assert c1.index is c2.index and c1 is not c2
    assert (c1.index.host_blocks, c1.index.disk_blocks) == (10, 50)
    assert isinstance(tier.store, OffloadStore)
    assert tier.store.disk_dir == tmp_path and tier.index is c1.index
    no_disk = EngineConfig(kv_offload_host_bytes=4096)
    assert make_offload_connector(no_disk, 1000).new_connector().index.disk_blocks == 0


# -- end to end: real scheduler, real tiny model ---------------------------------------


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_checkpoint(
        tmp_path_factory.mktemp("llama"), "llama", vocab_size=128, max_position_embeddings=256
    )


def _kv_block(runner: ModelRunner, b: int) -> torch.Tensor:
    """[L, 2, bs, Hkv, D]: block ``b`` of every layer."""
    return torch.stack([torch.stack((k[b], v[b])) for k, v in runner.kv_caches])


class Driver:
    """The real scheduler and runner in a loop, with the store applied before every step,
    checking bit for bit that saves copy the pre-step block and loads restore it."""

    def __init__(
        self,
        checkpoint: Path,
        idx: OffloadIndex | None,
        store: OffloadStore,
        *,
        budget: int = 64,
        skip_loads: bool = False,
        runner: ModelRunner | None = None,
    ) -> None:
        num_blocks = 12  # 11 usable: a few 5-block requests cycle through the whole pool
        if runner is None:
            runner = ModelRunner(
                checkpoint, dtype="float32", block_size=BS, max_num_seqs=4, max_model_len=40
            )
            runner.load_model()
            runner.initialize_kv_cache(num_blocks)
        cfg = SchedulerConfig(
            max_model_len=40, block_size=BS, num_blocks=num_blocks, max_num_batched_tokens=budget
        )
        conn = OffloadConnector(idx, BS) if idx is not None else None
        self.sched, self.runner, self.store = Scheduler(cfg, conn), runner, store
        self.skip_loads = skip_loads
        self.snapshots: dict[BlockHash, torch.Tensor] = {}  # block KV at save time
        self.num_checked_loads = 0
        self.metas: list[OffloadMetadata] = []

    def run(self, *reqs: tuple[str, list[int]]) -> dict[str, list[int]]:
        sched, runner = self.sched, self.runner
        for rid, tokens in reqs:
            sched.add_request(Request(rid, tokens, GREEDY))
        out: dict[str, list[int]] = {rid: [] for rid, _ in reqs}
        while sched.has_unfinished_requests():
            so = sched.schedule()
            meta = sched.take_connector_metadata()
            if meta is not None:
                self._apply(meta)
            for o in sched.update_from_output(so, runner.execute(so)).outputs:
                out[o.req_id] += o.new_token_ids
        return out

    def _apply(self, meta: Any) -> None:
        assert isinstance(meta, OffloadMetadata)
        self.metas.append(meta)
        for h, b in meta.saves:
            self.snapshots[h] = _kv_block(self.runner, b)
        if self.skip_loads:
            meta = OffloadMetadata.from_ops(meta.step_id, [o for o in meta.ops if o.kind != "load"])
        self.store.apply(self.runner, meta)
        for h, _ in meta.saves:  # the copy is the block as it was before this step's loads
            if h in self.store._host:
                assert torch.equal(self.store._host[h], self.snapshots[h])
        for h, b in meta.loads:  # the loaded KV is the KV that was saved, bit for bit
            assert torch.equal(_kv_block(self.runner, b), self.snapshots[h])
            self.num_checked_loads += 1


def _evict_and_rerun(
    checkpoint: Path, idx: OffloadIndex, store: OffloadStore, *, skip_loads: bool = False
) -> tuple[list[int], list[int], Driver]:
    d = Driver(checkpoint, idx, store, skip_loads=skip_loads)
    a = prompt(1)
    first = d.run(("a1", a))["a1"]
    for i in range(2, 6):
        d.run((f"x{i}", prompt(i)))
    assert hashes_of(a)[0] not in d.sched.kv_cache_manager.block_pool.cached
    second = d.run(("a2", a))["a2"]
    assert skip_loads or d.num_checked_loads == 3
    return first, second, d


def test_evicted_prompt_is_served_from_host_with_the_same_tokens(checkpoint: Path) -> None:
    idx = OffloadIndex(host_blocks=64)
    store = OffloadStore(on_lost=idx.report_lost)
    first, second, d = _evict_and_rerun(checkpoint, idx, store)
    assert d.sched.statistics().connector_hits == 12
    assert store.statistics().num_loads_host == 3 and store.statistics().num_loads_disk == 0
    assert second == first
    # The check has teeth: without the loads, the same schedule yields other tokens.
    idx2 = OffloadIndex(host_blocks=64)
    _, broken, _ = _evict_and_rerun(checkpoint, idx2, OffloadStore(), skip_loads=True)
    assert broken != first


def test_evicted_prompt_is_served_from_disk_with_the_same_tokens(
    checkpoint: Path, tmp_path: Path
) -> None:
    idx = OffloadIndex(host_blocks=1, disk_blocks=64)
    store = OffloadStore(tmp_path, on_lost=idx.report_lost)
    first, second, d = _evict_and_rerun(checkpoint, idx, store)
    assert second == first
    assert d.sched.statistics().connector_hits == 12
    st = store.statistics()
    assert st.num_loads_disk >= 2 and st.num_spills >= 2 and st.num_misses == 0
    assert len(list(tmp_path.glob("*.safetensors"))) == st.disk_blocks > 0


def test_block_saved_and_loaded_in_the_same_step(checkpoint: Path) -> None:
    idx = OffloadIndex(host_blocks=64)
    d = Driver(checkpoint, idx, OffloadStore(on_lost=idx.report_lost), budget=20)
    a = prompt(1)
    full = a + d.run(("a1", a))["a1"]  # 20 tokens: a's 4 full blocks stay cached
    d.run(("y", prompt(2)))  # y's blocks are freed after a's: a's go first
    # x's allocation evicts a's 4th block (saved); a2 = a + outputs hits a's first 3 blocks
    # locally and the 4th in the tier, and its own allocation evicts y's blocks, one of
    # which receives that 4th block: save it, then load into it, in one step.
    out = d.run(("x", prompt(3)), ("a2", full))
    meta = next(m for m in d.metas if m.loads)
    ((h3, target),) = meta.loads
    assert h3 == hashes_of(full)[3] and (h3, target) != meta.saves[0]
    kinds_in_order = [(o.kind, o.block_hash) for o in meta.ops]
    assert kinds_in_order.index(("save", h3)) < kinds_in_order.index(("load", h3))
    assert any(b == target for _, b in meta.saves)  # the load target's old KV was saved first
    # a2's tokens equal those of the same prompt computed from scratch.
    ref = Driver(checkpoint, None, OffloadStore(), runner=d.runner).run(("ref", full))
    assert out["a2"] == ref["ref"]
