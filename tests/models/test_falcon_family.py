"""Falcon's config dialect (models/falcon_family.py): each of its attention layouts and
blocks read into the decoder's switches, its checkpoint names, and what is refused by
name. Greedy parity with transformers: tests/models/test_family_engine_parity.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from actorllm.models.config import CheckpointConfig, ModelConfigError
from actorllm.models.loader import load_model
from actorllm.models.parallel import TensorParallelError, check_tensor_parallel
from tests.helpers.models import make_tiny_checkpoint

# tiiuae/falcon-7b's config.json (4.x keys), at tiny sizes.
FALCON_7B = {
    "architectures": ["FalconForCausalLM"], "model_type": "falcon", "vocab_size": 128,
    "hidden_size": 64, "n_head": 4, "n_layer": 2, "multi_query": True, "parallel_attn": True,
    "bias": False, "alibi": False, "new_decoder_architecture": False,
    "layer_norm_epsilon": 1e-5, "bos_token_id": 11, "eos_token_id": 11,
}  # fmt: skip
# tiiuae/falcon-40b's: the new architecture, 8 KV heads (2 here).
FALCON_40B = {**FALCON_7B, "new_decoder_architecture": True, "n_head_kv": 2}


@pytest.mark.parametrize(
    ("extra", "kv_heads", "head_major", "layout"),
    [
        ({}, 1, False, "parallel"),  # Falcon-7B: q | k | v around one KV head
        ({"multi_query": False}, 4, True, "parallel"),  # [H, 3, D]
        ({"multi_query": False, "parallel_attn": False}, 4, True, "pre"),
        ({"new_decoder_architecture": True, "n_head_kv": 2}, 2, True, "parallel2"),
        ({"new_decoder_architecture": True, "num_kv_heads": 2, "num_ln_in_parallel_attn": 1},
         2, True, "parallel"),
    ],
)  # fmt: skip
def test_falcon_layouts(
    extra: dict[str, Any], kv_heads: int, head_major: bool, layout: str
) -> None:
    cfg = CheckpointConfig.from_dict({**FALCON_7B, **extra})
    assert (cfg.num_heads, cfg.num_kv_heads, cfg.num_layers) == (4, kv_heads, 2)
    assert cfg.qkv_head_major == head_major and cfg.norm_layout == layout
    assert cfg.norm_type == "layer" and not cfg.mlp_gated and cfg.hidden_act == "gelu"
    assert cfg.intermediate_size == 256 and cfg.tie_word_embeddings
    assert not (cfg.attention_bias or cfg.o_proj_bias or cfg.mlp_bias)
    assert cfg.partial_rotary_factor == 1.0 and not cfg.rope_interleaved
    biased = CheckpointConfig.from_dict({**FALCON_7B, **extra, "bias": True})
    assert biased.attention_bias and biased.o_proj_bias and biased.mlp_bias


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"alibi": True}, "Falcon alibi=true"),
        ({"new_decoder_architecture": True, "parallel_attn": False}, "parallel_attn=false"),
        ({"new_decoder_architecture": True, "num_ln_in_parallel_attn": 3},
         "num_ln_in_parallel_attn=3"),
    ],
)  # fmt: skip
def test_falcon_options_not_run_are_refused_by_name(extra: dict[str, Any], named: str) -> None:
    with pytest.raises(ModelConfigError, match=named):
        CheckpointConfig.from_dict({**FALCON_7B, **extra})


def test_a_grouped_query_key_value_is_not_split_over_more_ranks_than_kv_heads() -> None:
    cfg = CheckpointConfig.from_dict(FALCON_40B)
    check_tensor_parallel(cfg, 2)
    with pytest.raises(TensorParallelError, match="grouped by 2 KV heads"):
        check_tensor_parallel(cfg, 4)
    check_tensor_parallel(CheckpointConfig.from_dict(FALCON_7B), 4)  # q | k | v: one head


def test_falcon_checkpoint_names(tmp_path: Path) -> None:
    path = make_tiny_checkpoint(tmp_path, "falcon_new", num_layers=1)
    sd = load_file(str(path / "model.safetensors"))
    model = load_model(path, CheckpointConfig.from_pretrained(path))
    params = dict(model.named_parameters())
    h = "transformer.h.0"
    pairs = {
        "model.embed_tokens.weight": "transformer.word_embeddings.weight",
        "model.layers.0.self_attn.qkv_proj.weight": f"{h}.self_attention.query_key_value.weight",
        "model.layers.0.self_attn.o_proj.bias": f"{h}.self_attention.dense.bias",
        "model.layers.0.input_layernorm.weight": f"{h}.ln_attn.weight",
        "model.layers.0.post_attention_layernorm.bias": f"{h}.ln_mlp.bias",
        "model.layers.0.mlp.dense_h_to_4h.weight": f"{h}.mlp.dense_h_to_4h.weight",
        "model.norm.weight": "transformer.ln_f.weight",
    }
    for ours, theirs in pairs.items():
        assert torch.equal(params[ours], sd[theirs]), ours
    assert model.packed_modules == {}
