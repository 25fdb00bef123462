"""Each family's checkpoint names onto the decoder's and back: the loader reads one way,
a quantized checkpoint's module lists are matched the other."""

from __future__ import annotations

import pytest

from actorllm.models.family_names import family_name, hf_module_name

# (model_type, the checkpoint's module, ours)
MODULES = [
    ("opt", "model.decoder.layers.0.self_attn.q_proj", "model.layers.0.self_attn.q_proj"),
    ("opt", "model.decoder.layers.1.self_attn.out_proj", "model.layers.1.self_attn.o_proj"),
    ("opt", "model.decoder.layers.2.fc1", "model.layers.2.mlp.fc1"),
    ("opt", "model.decoder.layers.2.fc2", "model.layers.2.mlp.fc2"),
    ("opt", "model.decoder.final_layer_norm", "model.norm"),
    ("opt", "model.decoder.layers.0.final_layer_norm", "model.layers.0.final_layer_norm"),
    ("opt", "model.decoder.embed_positions", "model.embed_positions"),
    ("opt", "model.decoder.project_in", "model.project_in"),
    ("phi", "model.layers.0.self_attn.dense", "model.layers.0.self_attn.o_proj"),
    ("phi", "model.layers.0.mlp.fc2", "model.layers.0.mlp.fc2"),
    ("phi", "model.final_layernorm", "model.norm"),
    ("gpt_neox", "gpt_neox.embed_in", "model.embed_tokens"),
    (
        "gpt_neox",
        "gpt_neox.layers.1.attention.query_key_value",
        "model.layers.1.self_attn.qkv_proj",
    ),
    ("gpt_neox", "gpt_neox.layers.1.attention.dense", "model.layers.1.self_attn.o_proj"),
    ("gpt_neox", "gpt_neox.layers.1.mlp.dense_h_to_4h", "model.layers.1.mlp.dense_h_to_4h"),
    (
        "gpt_neox",
        "gpt_neox.layers.1.post_attention_layernorm",
        "model.layers.1.post_attention_layernorm",
    ),
    ("gpt_neox", "gpt_neox.final_layer_norm", "model.norm"),
    ("gpt_neox", "embed_out", "lm_head"),
    ("gptj", "transformer.wte", "model.embed_tokens"),
    ("gptj", "transformer.h.1.ln_1", "model.layers.1.input_layernorm"),
    ("gptj", "transformer.h.1.attn.q_proj", "model.layers.1.self_attn.q_proj"),
    ("gptj", "transformer.h.1.attn.out_proj", "model.layers.1.self_attn.o_proj"),
    ("gptj", "transformer.h.1.mlp.fc_out", "model.layers.1.mlp.fc_out"),
    ("gptj", "transformer.ln_f", "model.norm"),
    ("gpt_bigcode", "transformer.wpe", "model.embed_positions"),
    ("gpt_bigcode", "transformer.h.1.attn.c_attn", "model.layers.1.self_attn.qkv_proj"),
    ("gpt_bigcode", "transformer.h.1.attn.c_proj", "model.layers.1.self_attn.o_proj"),
    ("gpt_bigcode", "transformer.h.1.mlp.c_proj", "model.layers.1.mlp.c_proj"),
    ("gpt_bigcode", "transformer.h.1.ln_2", "model.layers.1.post_attention_layernorm"),
    ("gpt2", "transformer.h.0.attn.c_attn", "model.layers.0.self_attn.qkv_proj"),
    ("gpt2", "transformer.ln_f", "model.norm"),
    ("falcon", "transformer.word_embeddings", "model.embed_tokens"),
    (
        "falcon",
        "transformer.h.1.self_attention.query_key_value",
        "model.layers.1.self_attn.qkv_proj",
    ),
    ("falcon", "transformer.h.1.self_attention.dense", "model.layers.1.self_attn.o_proj"),
    ("falcon", "transformer.h.1.mlp.dense_4h_to_h", "model.layers.1.mlp.dense_4h_to_h"),
    ("llama", "model.layers.0.mlp.down_proj", "model.layers.0.mlp.down_proj"),
]


@pytest.mark.parametrize(("model_type", "hf", "ours"), MODULES)
def test_names_map_both_ways(model_type: str, hf: str, ours: str) -> None:
    assert family_name(model_type, f"{hf}.weight") == f"{ours}.weight"
    assert hf_module_name(model_type, ours) == hf


def test_gpt_neox_causal_mask_buffers_are_not_weights() -> None:
    assert family_name("gpt_neox", "gpt_neox.layers.0.attention.bias") is None
    assert family_name("gpt_neox", "gpt_neox.layers.0.attention.masked_bias") is None
    assert family_name("gpt_neox", "gpt_neox.layers.0.attention.dense.bias") is not None


def test_opt_model_saved_without_its_head_prefix() -> None:
    assert family_name("opt", "decoder.layers.0.fc2.bias") == "model.layers.0.mlp.fc2.bias"
    assert family_name("opt", "decoder.final_layer_norm.weight") == "model.norm.weight"


@pytest.mark.parametrize("model_type", ["phi", "stablelm"])
def test_q_and_k_layernorms_are_our_q_and_k_norms(model_type: str) -> None:
    name = "model.layers.0.self_attn.k_layernorm.norms.1.weight"
    assert family_name(model_type, name) == "model.layers.0.self_attn.k_norm.norms.1.weight"
