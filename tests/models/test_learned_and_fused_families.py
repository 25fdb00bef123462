"""OPT, Phi and GPT-NeoX: each config dialect read into the decoder's switches (the files
real checkpoints ship, transformers 5's and the older keys), their checkpoint names mapped
onto ours, and what is refused by name. Greedy parity with transformers through the engine:
tests/models/test_family_engine_parity.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from actorllm.models.config import CheckpointConfig, ModelConfigError
from actorllm.models.loader import load_model
from tests.helpers.models import make_tiny_checkpoint

# facebook/opt-125m's config.json, at tiny sizes.
OPT_125M = {
    "architectures": ["OPTForCausalLM"], "model_type": "opt", "vocab_size": 128,
    "hidden_size": 64, "ffn_dim": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "max_position_embeddings": 64, "do_layer_norm_before": True, "word_embed_proj_dim": 64,
    "activation_function": "relu", "enable_bias": True, "dropout": 0.1,
    "bos_token_id": 2, "eos_token_id": 2, "pad_token_id": 1, "torch_dtype": "float16",
}  # fmt: skip


def test_opt_learned_positions_relu_mlp_biases_tied() -> None:
    cfg = CheckpointConfig.from_dict(OPT_125M)
    assert cfg.learned_positions and cfg.learned_position_offset == 2
    assert cfg.nope_layers == [True, True] and cfg.sliding_windows == [None, None]
    assert (cfg.intermediate_size, cfg.hidden_act, cfg.rms_norm_eps) == (128, "relu", 1e-5)
    assert cfg.norm_type == "layer" and cfg.norm_layout == "opt" and not cfg.mlp_gated
    assert cfg.attention_bias and cfg.o_proj_bias and cfg.mlp_bias and cfg.tie_word_embeddings
    unbiased = CheckpointConfig.from_dict({**OPT_125M, "enable_bias": False})
    assert not (unbiased.attention_bias or unbiased.o_proj_bias or unbiased.mlp_bias)


def test_opt_350m_post_norms_and_narrow_embeddings() -> None:
    """facebook/opt-350m: do_layer_norm_before false (no final norm then) and
    word_embed_proj_dim 512 < hidden_size 1024."""
    raw = {**OPT_125M, "do_layer_norm_before": False, "word_embed_proj_dim": 32}
    cfg = CheckpointConfig.from_dict(raw)
    assert cfg.norm_layout == "opt_post" and not cfg.final_norm
    assert (cfg.word_embed_proj_dim, cfg.embed_size, cfg.hidden_size) == (32, 32, 64)
    model = load_model("/nonexistent", cfg, load_format="dummy")
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    assert shapes["model.embed_tokens.weight"] == (128, 32)
    assert shapes["model.project_in.weight"] == (64, 32)
    assert shapes["model.project_out.weight"] == (32, 64)
    assert not any(n.startswith("model.norm.") for n in shapes)
    assert CheckpointConfig.from_dict(OPT_125M).embed_size == 64  # 125m: 768 both
    removed = CheckpointConfig.from_dict({**OPT_125M, "_remove_final_layer_norm": True})
    assert removed.norm_layout == "opt" and not removed.final_norm


def test_opt_without_norm_weights_is_refused_by_name() -> None:
    with pytest.raises(ModelConfigError, match="OPT layer_norm_elementwise_affine=false"):
        CheckpointConfig.from_dict({**OPT_125M, "layer_norm_elementwise_affine": False})


@pytest.mark.parametrize("prefix", ["model.", ""])
def test_opt_checkpoint_names(tmp_path: Path, prefix: str) -> None:
    """OPTForCausalLM saves ``model.decoder.*``; facebook/opt-* were saved from OPTModel
    (``decoder.*``, no head): both load."""
    path = make_tiny_checkpoint(tmp_path, "opt", num_layers=1, tie_word_embeddings=True)
    sd = load_file(str(path / "model.safetensors"))
    if not prefix:  # rewrite as OPTModel's
        from safetensors.torch import save_file

        sd = {k.removeprefix("model."): v for k, v in sd.items() if k != "lm_head.weight"}
        save_file(sd, str(path / "model.safetensors"))
    model = load_model(path, CheckpointConfig.from_pretrained(path))
    params = dict(model.named_parameters())
    hf = f"{prefix}decoder"
    pairs = {
        "model.embed_positions.weight": f"{hf}.embed_positions.weight",
        "model.layers.0.self_attn.o_proj.bias": f"{hf}.layers.0.self_attn.out_proj.bias",
        "model.layers.0.mlp.fc1.weight": f"{hf}.layers.0.fc1.weight",
        "model.layers.0.mlp.fc2.bias": f"{hf}.layers.0.fc2.bias",
        "model.layers.0.final_layer_norm.weight": f"{hf}.layers.0.final_layer_norm.weight",
        "model.norm.bias": f"{hf}.final_layer_norm.bias",
    }
    for ours, theirs in pairs.items():
        assert torch.equal(params[ours], sd[theirs]), ours
    assert model.lm_head.weight is model.model.embed_tokens.weight


def test_opt_serves_no_position_past_its_table() -> None:
    model = load_model("/nonexistent", CheckpointConfig.from_dict(OPT_125M), load_format="dummy")
    with pytest.raises(ValueError, match="learned positions for 64 tokens; cannot serve 65"):
        model.init_rotary("cpu", 65)


# microsoft/phi-2's config.json (transformers 4.x keys), at tiny sizes.
PHI_2 = {
    "architectures": ["PhiForCausalLM"], "model_type": "phi", "vocab_size": 128,
    "hidden_size": 80, "intermediate_size": 160, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": None, "hidden_act": "gelu_new",
    "layer_norm_eps": 1e-5, "partial_rotary_factor": 0.4, "rope_theta": 10000.0,
    "qk_layernorm": False, "tie_word_embeddings": False, "max_position_embeddings": 64,
}  # fmt: skip


def test_phi_parallel_block_partial_rotary_and_biases_everywhere() -> None:
    cfg = CheckpointConfig.from_dict(PHI_2)
    assert cfg.norm_layout == "parallel" and cfg.norm_type == "layer"
    assert (cfg.num_kv_heads, cfg.head_dim, cfg.partial_rotary_factor) == (4, 20, 0.4)
    assert int(cfg.head_dim * cfg.partial_rotary_factor) == 8  # phi-2: 32 of 80 lanes
    assert cfg.attention_bias and cfg.o_proj_bias and cfg.mlp_bias and cfg.lm_head_bias
    assert not cfg.mlp_gated and cfg.hidden_act == "gelu_new" and not cfg.tie_word_embeddings
    half = {k: v for k, v in PHI_2.items() if k != "partial_rotary_factor"}
    assert CheckpointConfig.from_dict(half).partial_rotary_factor == 0.5  # PhiConfig's
    assert not cfg.qk_norm
    qk = CheckpointConfig.from_dict({**PHI_2, "qk_layernorm": True})
    assert qk.qk_norm and qk.qk_norm_kind == "layer"


def test_phi_checkpoint_names(tmp_path: Path) -> None:
    path = make_tiny_checkpoint(tmp_path, "phi", num_layers=1, qk_layernorm=True)
    sd = load_file(str(path / "model.safetensors"))
    params = dict(load_model(path, CheckpointConfig.from_pretrained(path)).named_parameters())
    pairs = {
        "model.layers.0.self_attn.o_proj.bias": "model.layers.0.self_attn.dense.bias",
        "model.layers.0.mlp.fc1.weight": "model.layers.0.mlp.fc1.weight",
        "model.layers.0.input_layernorm.bias": "model.layers.0.input_layernorm.bias",
        "model.norm.weight": "model.final_layernorm.weight",
        "model.layers.0.self_attn.k_norm.bias": "model.layers.0.self_attn.k_layernorm.bias",
        "lm_head.bias": "lm_head.bias",
    }
    for ours, theirs in pairs.items():
        assert torch.equal(params[ours], sd[theirs]), ours


# EleutherAI/pythia-70m's config.json (transformers 4.x keys), at tiny sizes.
PYTHIA = {
    "architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", "vocab_size": 128,
    "hidden_size": 64, "intermediate_size": 256, "num_hidden_layers": 2,
    "num_attention_heads": 4, "hidden_act": "gelu", "layer_norm_eps": 1e-5,
    "rotary_pct": 0.25, "rotary_emb_base": 10000, "use_parallel_residual": True,
    "tie_word_embeddings": False, "max_position_embeddings": 64, "bos_token_id": 0,
    "eos_token_id": 0,
}  # fmt: skip


def test_gpt_neox_dialect() -> None:
    cfg = CheckpointConfig.from_dict(PYTHIA)
    assert cfg.norm_layout == "parallel2" and cfg.norm_type == "layer" and cfg.qkv_head_major
    assert (cfg.partial_rotary_factor, cfg.rope_theta) == (0.25, 10000.0)
    assert cfg.attention_bias and cfg.o_proj_bias and cfg.mlp_bias and not cfg.lm_head_bias
    assert not cfg.mlp_gated and cfg.hidden_act == "gelu" and not cfg.tie_word_embeddings
    sequential = CheckpointConfig.from_dict({**PYTHIA, "use_parallel_residual": False})
    assert sequential.norm_layout == "pre"
    full = CheckpointConfig.from_dict({**PYTHIA, "rotary_pct": 1.0, "rotary_emb_base": 500})
    assert (full.partial_rotary_factor, full.rope_theta) == (1.0, 500.0)
    unbiased = CheckpointConfig.from_dict({**PYTHIA, "attention_bias": False})
    assert not (unbiased.attention_bias or unbiased.o_proj_bias) and unbiased.mlp_bias


def test_gpt_neox_query_key_value_loads_in_its_own_per_head_order(tmp_path: Path) -> None:
    path = make_tiny_checkpoint(tmp_path, "gpt_neox", num_layers=1)
    sd = load_file(str(path / "model.safetensors"))
    sd["gpt_neox.layers.0.attention.bias"] = torch.ones(1, 1, 4, 4, dtype=torch.bool)
    from safetensors.torch import save_file

    save_file(sd, str(path / "model.safetensors"))  # an older file's causal-mask buffer
    model = load_model(path, CheckpointConfig.from_pretrained(path))
    assert model.packed_modules == {}
    params = dict(model.named_parameters())
    pre = "gpt_neox.layers.0"
    pairs = {
        "model.embed_tokens.weight": "gpt_neox.embed_in.weight",
        "model.layers.0.self_attn.qkv_proj.weight": f"{pre}.attention.query_key_value.weight",
        "model.layers.0.self_attn.o_proj.bias": f"{pre}.attention.dense.bias",
        "model.layers.0.mlp.dense_h_to_4h.weight": f"{pre}.mlp.dense_h_to_4h.weight",
        "model.norm.bias": "gpt_neox.final_layer_norm.bias",
        "lm_head.weight": "embed_out.weight",
    }
    for ours, theirs in pairs.items():
        assert torch.equal(params[ours], sd[theirs]), ours


@pytest.mark.slow
def test_opt_350m_embedding_prompts_are_as_wide_as_its_embeddings(tmp_path: Path) -> None:
    """As HF's (and vLLM's) inputs_embeds: [T, word_embed_proj_dim] rows, before
    project_in and the positions."""
    import transformers

    from actorllm import LLM, SamplingParams
    from tests.models.test_family_engine_parity import _checkpoint

    path = _checkpoint(tmp_path / "opt", "opt_350m", {"tie_word_embeddings": True})
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    embeds = torch.randn(12, 32, generator=torch.Generator().manual_seed(0)) * 0.5  # [T, E]
    with torch.no_grad():
        ref = hf.generate(
            inputs_embeds=embeds[None], attention_mask=torch.ones(1, 12, dtype=torch.long),
            max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=1,
        )[0].tolist()  # fmt: skip
    greedy = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    with LLM(str(path), enable_prompt_embeds=True, dtype="float32", max_model_len=64) as llm:
        out = llm.generate({"prompt_embeds": embeds}, greedy, use_tqdm=False)[0]
    assert list(out.outputs[0].token_ids) == ref[-8:]
