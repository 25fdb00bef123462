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


# bigcode/starcoder's config.json (santacoder's alike), at tiny sizes.
STARCODER = {
    "architectures": ["GPTBigCodeForCausalLM"], "model_type": "gpt_bigcode",
    "vocab_size": 128, "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 64,
    "n_inner": 256, "multi_query": True, "activation_function": "gelu_pytorch_tanh",
    "layer_norm_epsilon": 1e-5, "scale_attn_weights": True,
    "attention_softmax_in_fp32": True, "bos_token_id": 0, "eos_token_id": 0,
}  # fmt: skip


def test_bigcode_learned_positions_multi_query_biases_tied() -> None:
    cfg = CheckpointConfig.from_dict(STARCODER)
    assert (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.intermediate_size) == (4, 1, 16, 256)
    assert cfg.learned_positions and cfg.learned_position_offset == 0
    assert cfg.nope_layers == [True, True] and not cfg.qkv_head_major
    assert cfg.norm_layout == "pre" and cfg.norm_type == "layer" and not cfg.mlp_gated
    assert cfg.attention_bias and cfg.o_proj_bias and cfg.mlp_bias and cfg.tie_word_embeddings
    assert cfg.hidden_act == "gelu_pytorch_tanh"
    mha = CheckpointConfig.from_dict({**STARCODER, "multi_query": False})
    assert mha.num_kv_heads == 4 and mha.qkv_head_major  # c_attn: [H, 3, D] rows


@pytest.mark.parametrize(
    ("key", "value"), [("scale_attn_weights", False), ("add_cross_attention", True)]
)
def test_bigcode_options_not_run_are_refused_by_name(key: str, value: bool) -> None:
    with pytest.raises(ModelConfigError, match=f"GPTBigCode {key}="):
        CheckpointConfig.from_dict({**STARCODER, key: value})


def test_bigcode_checkpoint_names(tmp_path: Path) -> None:
    path = make_tiny_checkpoint(tmp_path, "gpt_bigcode", num_layers=1, tie_word_embeddings=True)
    sd = load_file(str(path / "model.safetensors"))
    model = load_model(path, CheckpointConfig.from_pretrained(path))
    params = dict(model.named_parameters())
    h = "transformer.h.0"
    pairs = {
        "model.embed_positions.weight": "transformer.wpe.weight",
        "model.layers.0.self_attn.qkv_proj.weight": f"{h}.attn.c_attn.weight",
        "model.layers.0.self_attn.o_proj.bias": f"{h}.attn.c_proj.bias",
        "model.layers.0.post_attention_layernorm.weight": f"{h}.ln_2.weight",
        "model.layers.0.mlp.c_fc.weight": f"{h}.mlp.c_fc.weight",
        "model.norm.bias": "transformer.ln_f.bias",
    }
    for ours, theirs in pairs.items():
        assert torch.equal(params[ours], sd[theirs]), ours
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert model.packed_modules == {}


# openai-community/gpt2's config.json, at tiny sizes.
GPT2 = {
    "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 128,
    "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 64, "n_ctx": 64,
    "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
    "scale_attn_weights": True, "bos_token_id": 0, "eos_token_id": 0,
}  # fmt: skip


def test_gpt2_is_bigcode_without_multi_query_in_conv1d_weights() -> None:
    cfg = CheckpointConfig.from_dict(GPT2)
    assert (cfg.num_heads, cfg.num_kv_heads, cfg.intermediate_size) == (4, 4, 256)
    assert cfg.learned_positions and cfg.learned_position_offset == 0
    assert not cfg.qkv_head_major  # c_attn: q | k | v
    assert cfg.norm_layout == "pre" and cfg.norm_type == "layer" and not cfg.mlp_gated
    assert cfg.attention_bias and cfg.o_proj_bias and cfg.mlp_bias and cfg.tie_word_embeddings
    model = load_model("/nonexistent", cfg, load_format="dummy")
    assert model.transposed_weights is not None and model.packed_modules == {}
    assert model.transposed_weights.search("model.layers.0.mlp.c_fc.weight")
    assert not model.transposed_weights.search("model.layers.0.mlp.c_fc.bias")


@pytest.mark.parametrize(
    "key",
    ["scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_cross_attention"],
)
def test_gpt2_options_not_run_are_refused_by_name(key: str) -> None:
    with pytest.raises(ModelConfigError, match=f"GPT-2 {key}=true"):
        CheckpointConfig.from_dict({**GPT2, key: True})


def test_gpt2_quantized_but_by_gptq_is_refused_by_name() -> None:
    from actorllm.models.quant.apply import checkpoint_quantization
    from actorllm.models.quant.spec import QuantizationError

    awq = {"quant_method": "awq", "bits": 4, "group_size": 32, "zero_point": True}
    cfg = CheckpointConfig.from_dict({**GPT2, "quantization_config": awq})
    with pytest.raises(QuantizationError, match="GPT-2's Conv1D weights in a awq"):
        checkpoint_quantization(cfg, None)


def test_gpt2_weight_updates_are_transposed_as_the_checkpoint(tmp_path: Path) -> None:
    from actorllm.models.loader import copy_weights

    path = make_tiny_checkpoint(tmp_path, "gpt2", num_layers=1)
    model = load_model(path, CheckpointConfig.from_pretrained(path))
    w = torch.randn(64, 64)  # c_proj [in, out]: square, so only the values tell
    copy_weights(model, [("transformer.h.0.attn.c_proj.weight", w)])
    assert torch.equal(model.get_parameter("model.layers.0.self_attn.o_proj.weight"), w.t())
