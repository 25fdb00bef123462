"""The LoRA benches' pieces: random adapters of a bench model load onto it (every
attention and MLP projection, rank r), and chaos --lora spreads requests over the
adapters and the base model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from actorllm.bench.chaos_workloads import lora_workload
from actorllm.bench.lora_adapters import random_adapters
from actorllm.models.config import CheckpointConfig
from actorllm.models.loader import load_model
from actorllm.models.lora_adapter import read_adapter
from actorllm.testing.chaos import default_workload
from tests.helpers.models import make_tiny_checkpoint


def test_random_adapters_load_onto_the_model(tmp_path: Path) -> None:
    base = make_tiny_checkpoint(tmp_path / "m", "qwen3")
    paths = random_adapters(base, tmp_path / "a", count=2, rank=4)
    model = load_model(base, CheckpointConfig.from_pretrained(base), dtype=torch.float32)
    w = read_adapter("x", paths[1], model, max_rank=4, dtype=torch.float32)
    assert w.rank == 4 and w.scaling == 2.0
    leaves = {name.rsplit(".", 1)[-1] for name in w.modules}
    assert leaves == {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}
    assert len(w.modules["model.layers.0.self_attn.qkv_proj"]) == 3  # q, k, v slices


def test_random_adapters_refuse_moe(tmp_path: Path) -> None:
    base = make_tiny_checkpoint(tmp_path / "m", "qwen3_moe")
    with pytest.raises(ValueError, match="MoE"):
        random_adapters(base, tmp_path / "a", count=1, rank=4)


def test_chaos_lora_workload_spreads_over_adapters_and_base() -> None:
    w = lora_workload(default_workload(8), ["/a0", "/a1", "/a2"])
    names = [r.lora_request.lora_name if r.lora_request else None for r in w]
    assert names == ["lora0", "lora1", "lora2", None] * 2


def test_throughput_lora_adapters_smoke(tmp_path: Path) -> None:
    import json

    from actorllm.entrypoints.cli import main

    out = tmp_path / "r.json"
    argv = ["bench", "throughput", "--num-prompts", "4", "--input-len", "8", "--output-len",
            "4", "--lora-adapters", "2", "--lora-rank", "4", "--load-format", "dummy",
            "--max-model-len", "128", "--output-json", str(out)]  # fmt: skip
    assert main(argv) == 0
    doc = json.loads(out.read_text())
    fig = doc["figures"]
    assert doc["benchmark"] == "throughput_lora" and doc["machine"]["cpu_count"] >= 1
    assert fig["lora_adapters"] == 2 and fig["lora_rank"] == 4
    for kind in ("base", "lora"):
        (run,) = fig[kind]["rounds"]
        assert run["output_tokens"] == 16 and run["step_ms"] > 0
    assert fig["step_time_ratio_lora_vs_base"] > 0
