"""KV cache sizing: a token costs exactly the model's minimum, K and V of every layer's KV
heads, through the real runner (what the CPU default sizes the cache from)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from actorllm.worker.model_runner import ModelRunner
from tests.helpers.models import make_tiny_checkpoint

LAYERS, HEADS, KV_HEADS, HEAD_DIM = 3, 4, 2, 32  # grouped-query: 2 query heads a KV head


@pytest.fixture(scope="module")
def gqa(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_checkpoint(
        tmp_path_factory.mktemp("gqa"), "qwen3", num_layers=LAYERS, num_heads=HEADS,
        num_kv_heads=KV_HEADS, head_dim=HEAD_DIM,
    )  # fmt: skip


@pytest.mark.parametrize(("dtype", "size"), [("float32", 4), ("bfloat16", 2)])
@pytest.mark.parametrize("block_size", [16, 32])
def test_kv_bytes_per_token_are_the_models_minimum(
    gqa: Path, dtype: str, size: int, block_size: int
) -> None:
    runner = ModelRunner(gqa, dtype=dtype, block_size=block_size, max_model_len=64)
    per_token = 2 * LAYERS * KV_HEADS * HEAD_DIM * size
    assert runner.kv_cache_bytes_per_block() == per_token * block_size


def test_the_allocated_cache_is_the_blocks_times_their_bytes(gqa: Path) -> None:
    """No padding or hidden copy: the tensors' storage is num_blocks x bytes per block."""
    runner = ModelRunner(gqa, dtype="float32", block_size=32, max_model_len=64)
    runner.load_model()
    runner.initialize_kv_cache(5)
    storages = {
        t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
        for pair in runner.kv_caches
        for t in pair
    }
    assert sum(storages.values()) == 5 * runner.kv_cache_bytes_per_block()
    assert all(t.dtype == torch.float32 for pair in runner.kv_caches for t in pair)


@pytest.mark.parametrize(("kv_cache_dtype", "size"), [("bfloat16", 2), ("fp8", 1), ("fp8_e5m2", 1)])
def test_kv_cache_dtype_sets_the_bytes_and_survives_sleep(
    gqa: Path, kv_cache_dtype: str, size: int
) -> None:
    """kv_cache_dtype, not the model's float32, sizes the blocks and the tensors, and the
    cache re-allocated on wake-up is in it again."""
    runner = ModelRunner(
        gqa, dtype="float32", block_size=16, max_model_len=64, kv_cache_dtype=kv_cache_dtype
    )
    assert runner.kv_cache_bytes_per_block() == 2 * LAYERS * KV_HEADS * HEAD_DIM * size * 16
    runner.load_model()
    runner.initialize_kv_cache(5)
    runner.sleep(1)
    runner.wake_up()
    assert runner.kv_caches and all(t.element_size() == size for p in runner.kv_caches for t in p)
