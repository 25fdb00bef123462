"""The families served since SmolLM3 (SmolLM3, ERNIE 4.5, Arcee, OLMo 3, EXAONE 4, GLM,
GLM-4, Seed-OSS, GraniteMoE, StarCoder 2, StableLM, Apertus, Cohere 1 / 2): each config
dialect read into its switches (transformers 5 files and the 4.x spelling real
checkpoints ship), the GPT-J rotary and Apertus's xIELU against transformers' own,
GraniteMoE's and StarCoder 2's checkpoint names, and what is refused by name (tensor
parallel, quantized checkpoints, odd layer patterns)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from actorllm.kernels.rotary import apply_rotary_interleaved, rope_table
from actorllm.models.config import CheckpointConfig, ModelConfigError
from actorllm.models.loader import load_model
from actorllm.models.parallel import TensorParallelError, check_tensor_parallel
from actorllm.models.quant.spec import QuantizationError
from tests.helpers.models import make_tiny_checkpoint, tiny_config


def _cfg(family: str, arch: str, **extra: Any) -> CheckpointConfig:
    raw = {**tiny_config(family, **extra).to_dict(), "architectures": [arch]}  # type: ignore[arg-type]
    return CheckpointConfig.from_dict(raw)


def test_smollm3_nope_layers_and_opt_in_sliding() -> None:
    cfg = _cfg("smollm3", "SmolLM3ForCausalLM", num_layers=3)
    assert cfg.nope_layers == [False, True, True]
    assert cfg.sliding_windows == [None, 8, None]
    assert cfg.attention_bias and cfg.o_proj_bias and cfg.mlp_bias
    # SmolLM3-3B's own file (4.x keys): no sliding, every 4th layer NoPE, the head tied
    # by default when the key is left out.
    raw = {
        "architectures": ["SmolLM3ForCausalLM"], "model_type": "smollm3", "vocab_size": 128,
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 8,
        "num_attention_heads": 4, "num_key_value_heads": 2, "rope_theta": 5000000.0,
        "no_rope_layer_interval": 4, "use_sliding_window": False, "sliding_window": None,
    }  # fmt: skip
    cfg = CheckpointConfig.from_dict(raw)
    assert cfg.nope_layers == [False, False, False, True] * 2
    assert cfg.sliding_windows == [None] * 8 and cfg.tie_word_embeddings
    assert cfg.rope_theta == 5000000.0
    # use_sliding_window without layer_types: the NoPE layers slide (SmolLM3Config's rule).
    slide = CheckpointConfig.from_dict({**raw, "use_sliding_window": True, "sliding_window": 16})
    assert slide.sliding_windows == [None, None, None, 16] * 2


def test_ernie_use_bias_biases_every_projection_and_rope_pairs_adjacent_lanes() -> None:
    cfg = _cfg("ernie4_5", "Ernie4_5ForCausalLM")
    assert cfg.rope_interleaved and cfg.attention_bias and cfg.o_proj_bias and cfg.mlp_bias
    raw = {
        "architectures": ["Ernie4_5ForCausalLM"], "model_type": "ernie4_5",
        "vocab_size": 128, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "rope_theta": 500000.0, "use_bias": False,
    }  # fmt: skip
    plain = CheckpointConfig.from_dict(raw)
    assert not (plain.attention_bias or plain.o_proj_bias or plain.mlp_bias)
    assert plain.tie_word_embeddings  # Ernie4_5Config's default


def test_arcee_has_an_ungated_mlp() -> None:
    cfg = _cfg("arcee", "ArceeForCausalLM")
    assert not cfg.mlp_gated and cfg.hidden_act == "relu2"
    model = load_model("/nonexistent", cfg, load_format="dummy")
    names = {n for n, _ in model.named_parameters()}
    assert "model.layers.0.mlp.up_proj.weight" in names
    assert not any("gate" in n for n in names)
    assert "up_proj" not in model.packed_modules  # its up_proj is loaded as it is


def test_olmo3_sliding_layers_take_their_own_rope() -> None:
    cfg = _cfg("olmo3", "Olmo3ForCausalLM")
    assert cfg.sliding_windows == [8, None] and cfg.norm_layout == "post"
    assert cfg.qk_norm and not cfg.qk_norm_per_head
    assert cfg.rope_scaling is not None and cfg.rope_scaling["rope_type"] == "linear"
    assert (cfg.local_rope_theta, cfg.local_rope_scaling) == (500000.0, None)
    same = {"rope_type": "default", "rope_theta": 500000.0}
    one = _cfg(
        "olmo3", "Olmo3ForCausalLM",
        rope_parameters={"full_attention": dict(same), "sliding_attention": dict(same)},
    )  # fmt: skip
    assert one.local_rope_theta is None  # one table serves both kinds
    # 4.x spelling: rope_theta / rope_scaling are the full layers'; transformers gives the
    # sliding layers plain RoPE at 500000.
    raw = {
        "architectures": ["Olmo3ForCausalLM"], "model_type": "olmo3", "vocab_size": 128,
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
        "num_attention_heads": 4, "rope_theta": 10000.0, "sliding_window": 16,
        "rope_scaling": {"rope_type": "yarn", "factor": 8.0,
                         "original_max_position_embeddings": 8192},
    }  # fmt: skip
    old = CheckpointConfig.from_dict(raw)
    assert old.sliding_windows == [16, 16, 16, None]
    assert old.rope_theta == 10000.0 and old.rope_scaling is not None
    assert (old.local_rope_theta, old.local_rope_scaling) == (500000.0, None)


def test_exaone4_full_layers_skip_rope_only_with_a_window() -> None:
    cfg = _cfg("exaone4", "Exaone4ForCausalLM")
    assert cfg.sliding_windows == [8, None] and cfg.nope_layers == [False, True]
    assert cfg.norm_layout == "post" and cfg.qk_norm and cfg.qk_norm_per_head
    raw = {**tiny_config("exaone4").to_dict(), "architectures": ["Exaone4ForCausalLM"]}  # type: ignore[arg-type]
    raw.update(sliding_window=None, layer_types=["full_attention"] * 2)
    no_window = CheckpointConfig.from_dict(raw)  # EXAONE 4.0 1.2B: RoPE on every layer
    assert no_window.sliding_windows == [None, None] and no_window.nope_layers == []
    with pytest.raises(ModelConfigError, match="no sliding_attention layer"):
        _cfg("exaone4", "Exaone4ForCausalLM", layer_types=["full_attention"] * 2)


def test_glm_dialects() -> None:
    dialects = (("glm", "GlmForCausalLM", "pre"), ("glm4", "Glm4ForCausalLM", "glm4"))
    for family, arch, layout in dialects:
        cfg = _cfg(family, arch)
        assert cfg.norm_layout == layout and cfg.rope_interleaved
        assert cfg.partial_rotary_factor == 0.5
        assert cfg.attention_bias and not cfg.o_proj_bias
    # GLM-4-9B-0414's 4.x keys: partial_rotary_factor at the top; attention_bias left out
    # is true (Glm4Config's default).
    raw = {
        "architectures": ["Glm4ForCausalLM"], "model_type": "glm4", "vocab_size": 128,
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "partial_rotary_factor": 0.5, "rope_theta": 10000.0,
    }  # fmt: skip
    cfg = CheckpointConfig.from_dict(raw)
    assert cfg.partial_rotary_factor == 0.5 and cfg.attention_bias


@pytest.mark.parametrize("rot_dim", [16, 8])
def test_interleaved_rotary_matches_transformers(rot_dim: int) -> None:
    """GLM's apply_rotary_pos_emb (adjacent pairs, partial: the first rot_dim lanes)."""
    from transformers.models.glm.modeling_glm import apply_rotary_pos_emb

    t, hq, hk, d = 7, 4, 2, 16
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(t, hq, d, generator=g), torch.randn(t, hk, d, generator=g)
    positions = torch.tensor([0, 1, 2, 5, 9, 30, 63])
    table = rope_table(rot_dim, 10000.0, None, 64, max_position_embeddings=64, max_model_len=64)
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, rot_dim, 2).float() / rot_dim))
    freqs = torch.outer(positions.float(), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)  # HF's [cos | cos] layout, [T, rot_dim]
    want_q, want_k = apply_rotary_pos_emb(
        q.transpose(0, 1)[None], k.transpose(0, 1)[None], emb.cos()[None], emb.sin()[None]
    )
    r = rot_dim
    qr, kr = apply_rotary_interleaved(positions, q[..., :r], k[..., :r], table)
    got_q, got_k = torch.cat([qr, q[..., r:]], -1), torch.cat([kr, k[..., r:]], -1)
    torch.testing.assert_close(got_q, want_q[0].transpose(0, 1))
    torch.testing.assert_close(got_k, want_k[0].transpose(0, 1))


@pytest.mark.parametrize(
    ("family", "arch", "named"),
    [
        ("olmo3", "Olmo3ForCausalLM", "q/k norm over the whole projection"),
        ("glm", "GlmForCausalLM", "GLM's fused gate_up_proj checkpoints are not split"),
        ("glm4", "Glm4ForCausalLM", "GLM-4's fused gate_up_proj checkpoints are not split"),
    ],
)
def test_what_tensor_parallel_cannot_split_is_named(family: str, arch: str, named: str) -> None:
    with pytest.raises(TensorParallelError, match=named):
        check_tensor_parallel(_cfg(family, arch), 2)


@pytest.mark.parametrize(
    ("family", "arch"),
    [("smollm3", "SmolLM3ForCausalLM"), ("ernie4_5", "Ernie4_5ForCausalLM"),
     ("arcee", "ArceeForCausalLM"), ("exaone4", "Exaone4ForCausalLM")],
)  # fmt: skip
def test_tensor_parallel_splits_the_others(family: str, arch: str) -> None:
    check_tensor_parallel(_cfg(family, arch), 2)  # tests/distributed: TP=2 tokens == TP=1


@pytest.mark.parametrize("family", ["glm", "glm4"])
def test_quantized_glm_checkpoints_are_refused_by_name(family: str) -> None:
    raw = {**tiny_config(family).to_dict(), "architectures": ["GlmForCausalLM"]}  # type: ignore[arg-type]
    raw["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 32}
    with pytest.raises(QuantizationError, match="fused gate_up_proj checkpoints"):
        load_model("/nonexistent", CheckpointConfig.from_dict(raw), load_format="dummy")


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"layer_types": ["sliding_attention"] * 3}, "layer_types has 3 entries for 2"),
        ({"layer_types": ["chunked_attention"] * 2}, r"layer_types \['chunked_attention'\]"),
    ],
)
def test_odd_layer_patterns_are_refused_by_name(extra: dict[str, Any], named: str) -> None:
    raw = {**tiny_config("olmo3").to_dict(), "architectures": ["Olmo3ForCausalLM"], **extra}  # type: ignore[arg-type]
    with pytest.raises(ModelConfigError, match=named):
        CheckpointConfig.from_dict(raw)


def test_seed_oss_biases() -> None:
    cfg = _cfg("seed_oss", "SeedOssForCausalLM")
    assert cfg.attention_bias and cfg.o_proj_bias and cfg.mlp_bias
    raw = {
        "architectures": ["SeedOssForCausalLM"], "model_type": "seed_oss", "vocab_size": 128,
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    }  # fmt: skip
    cfg = CheckpointConfig.from_dict(raw)  # SeedOssConfig's defaults: q/k/v biased, o not
    assert cfg.attention_bias and not cfg.o_proj_bias and not cfg.mlp_bias
    assert cfg.sliding_windows == [None, None]


def test_granitemoe_multipliers_experts_and_its_checkpoint_names(tmp_path: Path) -> None:
    cfg = _cfg("granitemoe", "GraniteMoeForCausalLM")
    multipliers = (cfg.embedding_multiplier, cfg.residual_multiplier, cfg.attention_scale)
    assert multipliers == (3.0, 0.5, 0.3)
    assert cfg.logits_multiplier == 0.5 and cfg.o_proj_bias
    assert (cfg.num_experts, cfg.num_experts_per_tok, cfg.moe_intermediate_size) == (4, 2, 128)
    assert cfg.moe_layers == [True, True] and cfg.norm_topk_prob
    path = make_tiny_checkpoint(tmp_path / "g", "granitemoe", num_layers=1)
    sd = load_file(str(path / "model.safetensors"))
    params = dict(load_model(path, CheckpointConfig.from_pretrained(path)).named_parameters())
    pre = "model.layers.0.block_sparse_moe"
    assert torch.equal(params["model.layers.0.mlp.experts.w13"], sd[f"{pre}.input_linear.weight"])
    assert torch.equal(params["model.layers.0.mlp.experts.w2"], sd[f"{pre}.output_linear.weight"])
    assert torch.equal(params["model.layers.0.mlp.gate.weight"], sd[f"{pre}.router.layer.weight"])


def test_quantized_granitemoe_is_refused_by_name() -> None:
    raw = {**tiny_config("granitemoe").to_dict(), "architectures": ["GraniteMoeForCausalLM"]}  # type: ignore[arg-type]
    raw["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 32}
    with pytest.raises(QuantizationError, match="GraniteMoE's stacked experts"):
        load_model("/nonexistent", CheckpointConfig.from_dict(raw), load_format="dummy")


def test_starcoder2_layernorms_ungated_mlp_under_its_own_names() -> None:
    raw = {
        "architectures": ["Starcoder2ForCausalLM"], "model_type": "starcoder2",
        "vocab_size": 128, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "hidden_act": "gelu_pytorch_tanh", "norm_epsilon": 1e-5, "sliding_window": 16,
    }  # fmt: skip
    cfg = CheckpointConfig.from_dict(raw)  # Starcoder2Config's defaults: biased, tied
    assert cfg.norm_type == "layer" and cfg.rms_norm_eps == 1e-5 and not cfg.mlp_gated
    assert cfg.attention_bias and cfg.o_proj_bias and cfg.mlp_bias and cfg.tie_word_embeddings
    assert cfg.sliding_windows == [16, 16]
    unbiased = CheckpointConfig.from_dict({**raw, "use_bias": False})
    assert not (unbiased.attention_bias or unbiased.o_proj_bias or unbiased.mlp_bias)
    model = load_model("/nonexistent", cfg, load_format="dummy")
    names = {n for n, _ in model.named_parameters()}
    assert {"model.layers.0.mlp.c_fc.bias", "model.layers.0.mlp.c_proj.weight"} <= names
    assert {"model.norm.bias", "model.layers.1.post_attention_layernorm.bias"} <= names


def test_stablelm_layernorms_quarter_rotary_qk_layernorm_and_parallel_residual() -> None:
    raw = {
        "architectures": ["StableLmForCausalLM"], "model_type": "stablelm", "vocab_size": 128,
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 4, "layer_norm_eps": 1e-5,
        "rope_theta": 10000.0, "use_qkv_bias": True,
    }  # fmt: skip
    cfg = CheckpointConfig.from_dict(raw)  # StableLmConfig's partial_rotary_factor: 0.25
    assert cfg.norm_type == "layer" and cfg.rms_norm_eps == 1e-5
    assert cfg.partial_rotary_factor == 0.25 and cfg.attention_bias and not cfg.o_proj_bias
    assert not cfg.qk_norm and cfg.norm_layout == "pre"
    # stablelm-2-1_6b / -12b: per-head q/k LayerNorms, attention and MLP side by side.
    switched = CheckpointConfig.from_dict({**raw, "qk_layernorm": True,
                                           "use_parallel_residual": True})  # fmt: skip
    assert switched.qk_norm and switched.qk_norm_kind == "layer_head_list"
    assert switched.norm_layout == "parallel"
    model = load_model("/nonexistent", switched, load_format="dummy")
    names = {n for n, _ in model.named_parameters()}
    assert "model.layers.0.self_attn.k_norm.norms.3.weight" in names
    assert "model.layers.0.post_attention_layernorm.weight" not in names
    with pytest.raises(TensorParallelError, match="StableLM's q/k LayerNorms"):
        check_tensor_parallel(switched, 2)


def test_apertus_xielu_matches_transformers() -> None:
    from transformers.activations import XIELUActivation

    from actorllm.models.layers import XIELU

    hf = XIELUActivation(alpha_p_init=0.7, alpha_n_init=0.9, beta=0.4, dtype=torch.float32)
    ours = XIELU()
    with torch.no_grad():
        for name in ("alpha_p", "alpha_n", "beta", "eps"):
            getattr(ours, name).copy_(getattr(hf, name))
    x = torch.linspace(-6.0, 6.0, 241)
    torch.testing.assert_close(ours(x), hf._xielu_python(x))
    cfg = _cfg("apertus", "ApertusForCausalLM")
    assert not cfg.mlp_gated and cfg.hidden_act == "xielu" and cfg.norm_layout == "apertus"
    assert cfg.qk_norm and cfg.qk_norm_per_head
    assert cfg.rope_scaling is not None and cfg.rope_scaling["rope_type"] == "llama3"


def test_cohere_parallel_block_unbiased_layernorm_and_logit_scale() -> None:
    cfg = _cfg("cohere", "CohereForCausalLM")
    assert cfg.norm_layout == "parallel" and cfg.norm_type == "layer_nobias"
    assert cfg.rope_interleaved and cfg.logits_multiplier == 0.5
    assert cfg.attention_bias and cfg.o_proj_bias
    model = load_model("/nonexistent", cfg, load_format="dummy")
    names = {n for n, _ in model.named_parameters()}
    assert "model.layers.0.input_layernorm.weight" in names
    assert not any(n.endswith("layernorm.bias") or n == "model.norm.bias" for n in names)
    assert "model.layers.0.post_attention_layernorm.weight" not in names
    assert not cfg.qk_norm
    raw = {**tiny_config("cohere").to_dict(), "architectures": ["CohereForCausalLM"]}  # type: ignore[arg-type]
    qk = CheckpointConfig.from_dict({**raw, "use_qk_norm": True})  # Command R+
    assert qk.qk_norm and qk.qk_norm_kind == "layer_heads"
    model = load_model("/nonexistent", qk, load_format="dummy")
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    assert shapes["model.layers.0.self_attn.q_norm.weight"] == (4, 16)  # [Hq, D]
    assert shapes["model.layers.0.self_attn.k_norm.weight"] == (2, 16)  # [Hk, D]
    check_tensor_parallel(qk, 2)  # split by heads as q and k


def test_cohere2_rotates_only_its_sliding_layers() -> None:
    cfg = _cfg("cohere2", "Cohere2ForCausalLM", num_layers=4)
    assert cfg.sliding_windows == [8, None, 8, None]
    assert cfg.nope_layers == [False, True, False, True]
    assert cfg.norm_layout == "parallel" and cfg.logits_multiplier == 0.5
    raw = {**tiny_config("cohere2").to_dict(), "architectures": ["Cohere2ForCausalLM"]}  # type: ignore[arg-type]
    raw.update(sliding_window=None)  # transformers: no window, then no layer rotates
    cfg = CheckpointConfig.from_dict(raw)
    assert cfg.sliding_windows == [None, None] and cfg.nope_layers == [True, True]
