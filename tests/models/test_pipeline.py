"""The pipeline split (models/pipeline.py): vLLM's partition, the environment override,
what a stage builds and loads (its layers, the embedding first, the norm and head last; a
tied head keeps the embedding on the last stage) and its KV cache (its layers only)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from actorllm.models.config import CheckpointConfig
from actorllm.models.loader import load_model
from actorllm.models.pipeline import (
    PARTITION_ENV,
    PipelineParallelError,
    PPMissingLayer,
    get_pp_indices,
    stage_config,
)
from actorllm.worker.model_runner import ModelRunner
from tests.helpers.models import make_tiny_checkpoint


def test_even_split_and_vllm_remainder_placement(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PARTITION_ENV, raising=False)
    assert [get_pp_indices(4, r, 2) for r in range(2)] == [(0, 2), (2, 4)]
    # The remainder goes to the stages before the last (vLLM: the last has the norm).
    assert [get_pp_indices(5, r, 2) for r in range(2)] == [(0, 3), (3, 5)]
    assert [get_pp_indices(8, r, 3) for r in range(3)] == [(0, 3), (3, 6), (6, 8)]


def test_partition_env_is_honoured_or_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PARTITION_ENV, "1,3")
    assert [get_pp_indices(4, r, 2) for r in range(2)] == [(0, 1), (1, 4)]
    assert get_pp_indices(4, 0, 2, partition="3,1") == (0, 3)  # the engine's, passed on
    for bad, why in [("1,2", "sums to 3"), ("4", "names 1 stages"), ("a,b", "not a comma")]:
        monkeypatch.setenv(PARTITION_ENV, bad)
        with pytest.raises(PipelineParallelError, match=f"{PARTITION_ENV}.*{why}"):
            get_pp_indices(4, 0, 2)
    monkeypatch.setenv(PARTITION_ENV, "0,4")
    with pytest.raises(PipelineParallelError, match="no layer"):
        get_pp_indices(4, 0, 2)
    monkeypatch.delenv(PARTITION_ENV)
    with pytest.raises(PipelineParallelError, match="no layer"):
        get_pp_indices(2, 0, 3)


@pytest.mark.parametrize("tied", [False, True])
def test_each_stage_holds_and_loads_only_its_part(tmp_path: Path, tied: bool) -> None:
    path = make_tiny_checkpoint(
        tmp_path, "llama", vocab_size=128, num_hidden_layers=3, tie_word_embeddings=tied
    )
    cfg = CheckpointConfig.from_pretrained(path)
    first = load_model(path, stage_config(cfg, 0, 2, partition="2,1"), dtype="float32")
    last = load_model(path, stage_config(cfg, 1, 2, partition="2,1"), dtype="float32")
    full = load_model(path, cfg, dtype="float32")
    layers = lambda m: [not isinstance(x, PPMissingLayer) for x in m.model.layers]  # noqa: E731
    assert layers(first) == [True, True, False] and layers(last) == [False, False, True]
    assert isinstance(first.lm_head, PPMissingLayer) and isinstance(
        first.model.norm, PPMissingLayer
    )
    assert isinstance(last.model.embed_tokens, PPMissingLayer) is not tied
    if tied:  # the last stage keeps the embedding as its head (vLLM does the same)
        assert last.lm_head.weight is last.model.embed_tokens.weight
    full_params = dict(full.named_parameters())
    for stage in (first, last):  # what a stage holds is the full model's, bit for bit
        for name, p in stage.named_parameters():
            assert torch.equal(p, full_params[name]), name
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(first) + count(last) < count(full) + (128 * 64 if tied else 0) + 1


def test_a_stage_kv_cache_covers_its_layers_only(tmp_path: Path) -> None:
    path = make_tiny_checkpoint(tmp_path, "llama", vocab_size=128, num_hidden_layers=3)
    whole = ModelRunner(path, dtype="float32")
    stage0 = ModelRunner(path, dtype="float32", pp_rank=1, pp_size=2)  # rank 1: stage 0
    stage1 = ModelRunner(path, dtype="float32", pp_rank=0, pp_size=2)  # rank 0: the last
    per_layer = whole.kv_cache_bytes_per_block() // 3
    assert stage0.kv_cache_bytes_per_block() == 2 * per_layer
    assert stage1.kv_cache_bytes_per_block() == per_layer
    stage1.load_model()
    stage1.initialize_kv_cache(4)
    assert len(stage1.kv_caches) == 1


def test_what_a_stage_is_not_built_with_is_refused_by_name(tmp_path: Path) -> None:
    path = make_tiny_checkpoint(tmp_path, "llama", vocab_size=128, num_hidden_layers=2)
    with pytest.raises(NotImplementedError, match="pipeline_parallel_size > 1 with tensor_"):
        ModelRunner(path, pp_size=2, tp_size=2)
    with pytest.raises(NotImplementedError, match="speculative_config"):
        ModelRunner(path, pp_size=2, num_speculative_tokens=2)
    gemma = make_tiny_checkpoint(tmp_path / "g", "gemma2", vocab_size=128, num_hidden_layers=2)
    with pytest.raises(PipelineParallelError, match="sliding-window and full-attention"):
        ModelRunner(gemma, pp_size=2)
