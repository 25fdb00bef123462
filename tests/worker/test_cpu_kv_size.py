"""The CPU KV cache's default size and its errors, with fake memory figures (nothing is
allocated)."""

from __future__ import annotations

import re

import pytest

from actorllm.worker.cpu_kv_size import (
    DEFAULT_CPU_KV_BYTES,
    KVCacheSizeError,
    KVShape,
    auto_kv_blocks,
    effective_max_model_len,
    explicit_kv_blocks,
)

GiB = 2**30
# Qwen3-0.6B in bfloat16: 2 (K, V) x 28 layers x 8 KV heads x head_dim 128 x 2 bytes a
# token, 32-token blocks, max_model_len 40960 (1280 blocks a request).
QWEN3_06B = KVShape(bytes_per_block=2 * 28 * 8 * 128 * 2 * 32, block_size=32, max_model_len=40960)
FLAGS = ("--max-model-len", "max_model_len", "--kv-cache-memory-bytes", "VLLM_CPU_KVCACHE_SPACE")


def test_a_small_model_keeps_the_256_mib_default() -> None:
    """Tiny test model, short context: the cache stays at 256 MiB (hundreds of test
    engines allocate it; growing it would cost them memory and time)."""
    shape = KVShape(bytes_per_block=16 * 2**10, block_size=32, max_model_len=1024)
    size = auto_kv_blocks(shape, max_num_seqs=256, available=16 * GiB)
    assert size.num_blocks == DEFAULT_CPU_KV_BYTES // (16 * 2**10)
    assert "256 MiB floor" in size.reason


def test_a_real_size_model_grows_to_four_full_length_requests() -> None:
    """Qwen3-0.6B's 40960-token context: 256 MiB would hold 73 blocks; the default holds
    min(max_num_seqs, 4) whole requests plus the null block, within the memory."""
    size = auto_kv_blocks(QWEN3_06B, max_num_seqs=256, available=64 * GiB)
    assert size.num_blocks == 4 * 1280 + 1
    assert "4 requests of max_model_len=40960" in size.reason
    # Never more requests than the scheduler runs at once.
    assert auto_kv_blocks(QWEN3_06B, max_num_seqs=2, available=64 * GiB).num_blocks == 2561
    assert auto_kv_blocks(QWEN3_06B, max_num_seqs=1, available=64 * GiB).num_blocks == 1281


def test_the_memory_caps_the_growth() -> None:
    """16 GiB available: 80 % of it (12.8 GiB, 3744 blocks) rather than 4 requests."""
    size = auto_kv_blocks(QWEN3_06B, max_num_seqs=256, available=16 * GiB)
    assert size.num_blocks == int(16 * GiB * 0.8) // QWEN3_06B.bytes_per_block == 3744
    assert "80% of the 16 GiB available" in size.reason
    # Two caches built on the host at once (tensor-parallel ranks) share it.
    shared = auto_kv_blocks(QWEN3_06B, max_num_seqs=256, available=32 * GiB, share=2)
    assert shared.num_blocks == 3744 and "shared by 2" in shared.reason
    # The cap binds the 256 MiB floor too, as long as one request fits.
    small = KVShape(bytes_per_block=2**20, block_size=32, max_model_len=64)
    assert auto_kv_blocks(small, max_num_seqs=8, available=10 * 2**20).num_blocks == 8


def test_unknown_memory_takes_the_rule_uncapped() -> None:
    size = auto_kv_blocks(QWEN3_06B, max_num_seqs=8, available=None)
    assert size.num_blocks == 5121 and "unknown" in size.reason


def test_memory_short_names_the_settings_and_the_context_that_fits() -> None:
    """4 GiB available: the cap (3.2 GiB, 936 blocks) holds 935 usable blocks, 29920
    tokens, not one 40960-token request."""
    with pytest.raises(KVCacheSizeError) as err:
        auto_kv_blocks(QWEN3_06B, max_num_seqs=256, available=4 * GiB)
    text = str(err.value)
    assert all(flag in text for flag in FLAGS), text
    assert "max_model_len=40960" in text
    assert re.search(r"--max-model-len to 29920 or less", text), text
    assert QWEN3_06B.longest_fitting(936) == 29920
    # Not even two blocks: nothing fits.
    with pytest.raises(KVCacheSizeError, match=r"to 0 or less"):
        auto_kv_blocks(QWEN3_06B, max_num_seqs=1, available=2**20)


def test_an_explicit_budget_is_taken_as_given_when_one_request_fits() -> None:
    assert explicit_kv_blocks(QWEN3_06B, 8 * GiB) == 8 * GiB // QWEN3_06B.bytes_per_block
    # Small, but the request is short: more blocks than one request needs is fine.
    small = KVShape(bytes_per_block=2**20, block_size=32, max_model_len=64)
    assert explicit_kv_blocks(small, 3 * 2**20) == 3


def test_an_explicit_budget_too_small_says_what_fits_and_what_is_needed() -> None:
    """256 MiB for Qwen3-0.6B: 73 blocks (72 usable, 2304 tokens); one 40960-token request
    needs 1281 blocks, 4.38 GiB."""
    with pytest.raises(KVCacheSizeError) as err:
        explicit_kv_blocks(QWEN3_06B, DEFAULT_CPU_KV_BYTES)
    text = str(err.value)
    assert all(flag in text for flag in FLAGS), text
    assert "holds 72 blocks of 32 tokens" in text
    assert "--max-model-len to 2304 or less" in text
    assert f"to {1281 * QWEN3_06B.bytes_per_block} bytes (4.38 GiB) or more" in text


def test_a_sliding_window_request_holds_fewer_blocks() -> None:
    """Every layer sliding (window 64, chunks of 128): a request holds at most 7 blocks of
    32, however long, so 256 MiB is plenty; a full layer group beside it holds all."""
    sliding = KVShape(
        bytes_per_block=2**20, block_size=32, max_model_len=40960, chunk=128, windows=(64,)
    )
    assert sliding.blocks_per_request == 7
    assert auto_kv_blocks(sliding, max_num_seqs=256, available=64 * GiB).num_blocks == 256
    hybrid = KVShape(
        bytes_per_block=2**20, block_size=32, max_model_len=4096, chunk=128, windows=(None, 64)
    )
    assert hybrid.blocks_per_request == 128 + 7
    assert hybrid.longest_fitting(1 + 128 + 7) == 4096


def test_the_effective_max_model_len_is_the_configured_one_within_the_model() -> None:
    assert effective_max_model_len(40960, None) == 40960
    assert effective_max_model_len(40960, 4096) == 4096
    assert effective_max_model_len(0, None) == 2048  # a runner that reports none
    assert effective_max_model_len(0, 512) == 512
