"""The families spelled as GPT-2 is (models/gpt_families.py): each config dialect read into
the decoder's switches, their checkpoint names mapped onto ours, and what is refused by
name. Greedy parity with transformers: tests/models/test_family_engine_parity.py (through
``LLM``) and tests/models/test_family_parity.py (the runner)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from actorllm.models.config import CheckpointConfig, ModelConfigError
from actorllm.models.loader import load_model
from tests.helpers.models import make_tiny_checkpoint

# EleutherAI/gpt-j-6b's config.json, at tiny sizes.
GPT_J = {
    "architectures": ["GPTJForCausalLM"], "model_type": "gptj", "vocab_size": 128,
    "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 64, "n_inner": None,
    "rotary_dim": 8, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
    "bos_token_id": 0, "eos_token_id": 0, "tie_word_embeddings": False,
}  # fmt: skip


def test_gptj_parallel_block_interleaved_partial_rotary_biases_on_mlp_and_head() -> None:
    cfg = CheckpointConfig.from_dict(GPT_J)
    assert (cfg.hidden_size, cfg.num_layers, cfg.num_heads, cfg.num_kv_heads) == (64, 2, 4, 4)
    assert (cfg.intermediate_size, cfg.max_position_embeddings) == (256, 64)
    assert cfg.norm_layout == "parallel" and cfg.norm_type == "layer"
    assert cfg.rope_interleaved and cfg.partial_rotary_factor == 0.5  # 8 of 16 lanes
    assert not (cfg.attention_bias or cfg.o_proj_bias) and cfg.mlp_bias and cfg.lm_head_bias
    assert not cfg.mlp_gated and cfg.hidden_act == "gelu_new" and not cfg.tie_word_embeddings
    assert cfg.sliding_windows == [None, None] and cfg.rms_norm_eps == 1e-5


@pytest.mark.parametrize("rotary_dim", [None, 7])
def test_gptj_without_an_even_rotary_dim_is_refused_by_name(rotary_dim: int | None) -> None:
    with pytest.raises(ModelConfigError, match="GPT-J rotary_dim"):
        CheckpointConfig.from_dict({**GPT_J, "rotary_dim": rotary_dim})


def test_gptj_checkpoint_names(tmp_path: Path) -> None:
    path = make_tiny_checkpoint(tmp_path, "gptj", num_layers=1)
    sd = load_file(str(path / "model.safetensors"))
    sd["transformer.h.0.attn.bias"] = torch.ones(1, 1, 4, 4, dtype=torch.bool)
    save_file(sd, str(path / "model.safetensors"))  # an older file's causal-mask buffer
    params = dict(load_model(path, CheckpointConfig.from_pretrained(path)).named_parameters())
    h = "transformer.h.0"
    pairs = {
        "model.embed_tokens.weight": "transformer.wte.weight",
        "model.layers.0.input_layernorm.bias": f"{h}.ln_1.bias",
        "model.layers.0.self_attn.o_proj.weight": f"{h}.attn.out_proj.weight",
        "model.layers.0.mlp.fc_in.bias": f"{h}.mlp.fc_in.bias",
        "model.layers.0.mlp.fc_out.weight": f"{h}.mlp.fc_out.weight",
        "model.norm.weight": "transformer.ln_f.weight",
        "lm_head.bias": "lm_head.bias",
    }
    for ours, theirs in pairs.items():
        assert torch.equal(params[ours], sd[theirs]), ours
    qkv = params["model.layers.0.self_attn.qkv_proj.weight"]  # [3H, H]: q | k | v
    assert torch.equal(qkv[64:128], sd[f"{h}.attn.k_proj.weight"])
