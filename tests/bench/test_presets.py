"""The named rows of the CPU table vs vLLM: deterministic workloads, models on disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from actorllm.bench.presets import PRESETS, get_preset
from actorllm.entrypoints.cli import main
from actorllm.models.config import CheckpointConfig


def test_requests_are_seeded_and_in_range() -> None:
    p = PRESETS["qwen3-75m-bf16"]
    reqs = p.requests()
    assert reqs == p.requests()  # same seed, same workload, every run and backend
    assert len(reqs) == p.num_prompts == 128
    assert all(64 <= len(r.prompt_token_ids) <= 256 for r in reqs)
    assert all(64 <= r.output_len <= 256 for r in reqs)
    assert max(max(r.prompt_token_ids) for r in reqs) < 32000
    assert p.max_model_len() >= max(len(r.prompt_token_ids) + r.output_len for r in reqs)


def test_fp32_and_bf16_rows_share_model_and_workload() -> None:
    bf16, fp32 = PRESETS["qwen3-75m-bf16"], PRESETS["qwen3-75m-fp32"]
    assert (bf16.dtype, fp32.dtype) == ("bfloat16", "float32")
    assert bf16.requests() == fp32.requests() and bf16.model_config == fp32.model_config


def test_model_dir_loads_as_the_named_shape(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACTORLLM_CACHE", str(tmp_path))
    d = PRESETS["qwen3-75m-fp32"].model_dir()
    assert d == PRESETS["qwen3-75m-fp32"].model_dir()  # built once
    cfg = CheckpointConfig.from_pretrained(d)
    assert (cfg.hidden_size, cfg.num_layers, cfg.num_heads, cfg.num_kv_heads) == (768, 8, 12, 4)
    assert cfg.vocab_size == 32000 and cfg.qk_norm and cfg.tie_word_embeddings
    assert json.loads((d / "config.json").read_text())["model_type"] == "qwen3"


def test_unknown_preset_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown preset 'nope'"):
        get_preset("nope")


def test_preset_refuses_workload_flags(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "throughput", "--preset", "llama-4l-256", "--num-prompts", "3"]
    assert main(argv) == 2
    assert "--preset fixes the workload; drop --num-prompts" in capsys.readouterr().out
