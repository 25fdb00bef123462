"""CheckpointConfig parsing: both rope dialects, eos ids, head_dim, sliding windows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from actorllm.models.config import CheckpointConfig, ModelConfigError

BASE: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 100,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "max_position_embeddings": 1024,
}
LLAMA3 = {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 256,
}


def test_transformers_5_rope_parameters() -> None:
    cfg = CheckpointConfig.from_dict(
        {**BASE, "rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5, **LLAMA3}}
    )
    assert cfg.rope_theta == 5e5
    assert cfg.rope_scaling is not None and cfg.rope_scaling["rope_type"] == "llama3"
    plain = CheckpointConfig.from_dict(
        {**BASE, "rope_parameters": {"rope_type": "default", "rope_theta": 1e4}}
    )
    assert plain.rope_scaling is None and plain.rope_theta == 1e4


def test_transformers_4_rope_theta_and_scaling() -> None:
    cfg = CheckpointConfig.from_dict(
        {**BASE, "rope_theta": 5e5, "rope_scaling": {"rope_type": "llama3", **LLAMA3}}
    )
    assert cfg.rope_theta == 5e5 and cfg.rope_scaling is not None
    assert cfg.rope_scaling["factor"] == 8.0


def test_derived_fields() -> None:
    cfg = CheckpointConfig.from_dict({**BASE, "torch_dtype": "bfloat16", "eos_token_id": 7})
    assert (cfg.head_dim, cfg.num_kv_heads, cfg.dtype, cfg.eos_token_ids) == (8, 2, "bfloat16", [7])
    assert cfg.max_model_len == 1024 and not cfg.tie_word_embeddings
    q3 = CheckpointConfig.from_dict({**BASE, "model_type": "qwen3", "head_dim": 32})
    assert q3.head_dim == 32 and q3.qk_norm
    q2 = CheckpointConfig.from_dict({**BASE, "model_type": "qwen2"})
    assert q2.attention_bias and q2.sliding_windows == [None, None]


def test_sliding_windows_per_family() -> None:
    mistral = CheckpointConfig.from_dict({**BASE, "model_type": "mistral", "sliding_window": 16})
    assert mistral.sliding_windows == [16, 16]
    qwen = {**BASE, "model_type": "qwen2", "sliding_window": 16, "use_sliding_window": True}
    assert CheckpointConfig.from_dict({**qwen, "max_window_layers": 1}).sliding_windows == [
        None,
        16,
    ]
    assert CheckpointConfig.from_dict({**qwen, "use_sliding_window": False}).sliding_windows == [
        None,
        None,
    ]


def test_generation_config_eos_wins(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({**BASE, "eos_token_id": 1}))
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [1, 9]}))
    cfg = CheckpointConfig.from_pretrained(tmp_path)
    assert cfg.eos_token_ids == [1, 9] and cfg.eos_token_id == 1


def test_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError, match=r"no config\.json"):
        CheckpointConfig.from_pretrained(tmp_path)
    with pytest.raises(ModelConfigError, match="vocab_size"):
        CheckpointConfig.from_dict({k: v for k, v in BASE.items() if k != "vocab_size"})
