"""The KV offload tier's worker half (worker/offload_store.py): ordered ops, same-step save
then load, misses, placeholders for runners without KV tensors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from actorllm.engine.kv_offload import OffloadIndex
from actorllm.testing.scripted_model import ScriptedModel
from actorllm.worker.offload_ops import OffloadMetadata, OffloadOp
from actorllm.worker.offload_store import OffloadMissError, OffloadStateError, OffloadStore

BS = 4


class TensorRunner:
    """Just the KV tensors: 2 layers of [num_blocks=8, bs, Hkv=2, D=3]."""

    def __init__(self, dtype: torch.dtype = torch.float32) -> None:
        g = torch.Generator().manual_seed(0)
        self.kv_caches = [
            tuple(torch.randn(8, BS, 2, 3, generator=g).to(dtype) for _ in range(2))
            for _ in range(2)
        ]

    def block(self, b: int) -> torch.Tensor:  # [L, 2, bs, Hkv, D] (fp8: its bytes)
        raw = [(k.view(torch.uint8), v.view(torch.uint8)) if k.element_size() == 1 else (k, v)
               for k, v in self.kv_caches]  # fmt: skip
        return torch.stack([torch.stack((k[b], v[b])) for k, v in raw])


def _apply(store: OffloadStore, runner: Any, *ops: OffloadOp) -> None:
    store.apply(runner, OffloadMetadata.from_ops(1, list(ops)))


def test_store_saves_before_loading_in_one_step(tmp_path: Path) -> None:
    runner = TensorRunner()
    old3 = runner.block(3).clone()
    store = OffloadStore(tmp_path)
    # Block 3 is evicted (saved) and its hash loaded into block 5 by another request.
    _apply(store, runner, OffloadOp("save", b"h", 3), OffloadOp("load", b"h", 5))
    assert torch.equal(runner.block(5), old3)
    assert store.statistics().host_bytes == old3.numel() * 4  # float32
    runner.kv_caches[0][0][3].zero_()  # the step's forward overwrites block 3
    assert torch.equal(store._host[b"h"], old3)  # the copy does not alias the device block
    _apply(store, runner, OffloadOp("spill", b"h"))
    assert (tmp_path / f"{b'h'.hex()}.safetensors").is_file() and not store._host
    _apply(store, runner, OffloadOp("load", b"h", 6))
    assert torch.equal(runner.block(6), old3)
    _apply(store, runner, OffloadOp("drop", b"h"))
    assert list(tmp_path.iterdir()) == [] and b"h" not in store
    assert store.statistics().host_bytes == 0
    s = store.statistics()
    assert (s.num_saves, s.num_loads_host, s.num_loads_disk, s.num_spills, s.num_drops) == (
        1, 1, 1, 1, 1,
    )  # fmt: skip


def test_store_plain_metadata_saves_then_loads() -> None:
    from actorllm.core.scheduler.kv_connector import KVConnectorMetadata

    runner, store = TensorRunner(), OffloadStore()
    old2 = runner.block(2).clone()
    store.apply(runner, KVConnectorMetadata(step_id=1, loads=[(b"x", 4)], saves=[(b"x", 2)]))
    assert torch.equal(runner.block(4), old2)


def test_store_miss_raises_and_reports_lost(tmp_path: Path) -> None:
    idx = OffloadIndex(host_blocks=4)
    idx.save(b"h", 1)
    idx.take_ops()  # handed out, but "lost" with a crashed actor: the store never saw it
    store = OffloadStore(tmp_path, on_lost=idx.report_lost)
    with pytest.raises(OffloadMissError):
        _apply(store, TensorRunner(), OffloadOp("load", b"h", 2))
    assert idx.match([b"h"]) == 0 and b"h" not in idx


def test_store_placeholders_for_runners_without_tensors(tmp_path: Path) -> None:
    (tmp_path / f"{'ab' * 16}.safetensors").write_bytes(b"stale")  # an older engine's file
    (tmp_path / "model.safetensors").write_bytes(b"keep")
    store = OffloadStore(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"]
    scripted = ScriptedModel()
    _apply(store, scripted, OffloadOp("save", b"h", 3), OffloadOp("spill", b"h"))
    _apply(store, scripted, OffloadOp("load", b"h", 4))  # a hit, nothing to copy
    assert store.statistics().num_loads_disk == 1
    with pytest.raises(OffloadStateError):  # a placeholder never lands in real tensors
        _apply(store, TensorRunner(), OffloadOp("load", b"h", 4))
    asleep = TensorRunner()
    asleep.kv_caches = []
    with pytest.raises(OffloadStateError):
        _apply(store, asleep, OffloadOp("save", b"g", 1))


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2], ids=["e4m3", "e5m2"])
def test_an_fp8_cache_round_trips_through_host_and_disk(tmp_path: Path, dtype: torch.dtype) -> None:
    """An fp8 KV cache (kv_cache_dtype fp8): its blocks saved, spilled and loaded back bit
    for bit, at one byte an element."""
    runner = TensorRunner(dtype)
    old3 = runner.block(3).clone()
    store = OffloadStore(tmp_path)
    _apply(store, runner, OffloadOp("save", b"h", 3), OffloadOp("load", b"h", 5))
    assert torch.equal(runner.block(5), old3) and store._host[b"h"].dtype == dtype
    assert store.statistics().host_bytes == old3.numel()
    _apply(store, runner, OffloadOp("spill", b"h"))
    _apply(store, runner, OffloadOp("load", b"h", 6))
    assert torch.equal(runner.block(6), old3)
