"""Per-family config parsing and checkpoint layouts: stacked experts, GPT-2's names and
Conv1D weights, Phi-3's LongRoPE against transformers' own tables, typed refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from actorllm.kernels.rotary import longrope_inv_freq, rope_table
from actorllm.models.config import CheckpointConfig, ModelConfigError
from actorllm.models.loader import MissingWeightsError, load_model
from tests.helpers.models import PHI3_LONGROPE, make_tiny_checkpoint, tiny_config


def _raw(family: str) -> dict:  # type: ignore[type-arg]
    """config.json's dict for a tiny ``family`` config (architectures as save_pretrained adds)."""
    return {**tiny_config(family).to_dict(), "architectures": ["AnyForCausalLM"]}  # type: ignore[arg-type]


def _load(path: Path) -> torch.nn.Module:
    return load_model(path, CheckpointConfig.from_pretrained(path), progress=False)


def _rewrite(path: Path, rename: dict[str, torch.Tensor]) -> None:
    (path / "model.safetensors").unlink()
    save_file(rename, str(path / "model.safetensors"))


@pytest.fixture(scope="module")
def mixtral(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_checkpoint(tmp_path_factory.mktemp("mx"), "mixtral", num_layers=1)


def test_experts_stack_at_load_time(mixtral: Path) -> None:
    sd = load_file(str(mixtral / "model.safetensors"))
    model = _load(mixtral)
    w13 = model.get_parameter("model.layers.0.mlp.experts.w13")  # [E, 2I, H]
    w2 = model.get_parameter("model.layers.0.mlp.experts.w2")  # [E, H, I]
    assert w13.shape == (4, 2 * 128, 64) and w2.shape == (4, 64, 128)
    pre = "model.layers.0.block_sparse_moe.experts"
    for e in range(4):
        assert torch.equal(w13[e, :128], sd[f"{pre}.{e}.w1.weight"])  # gate
        assert torch.equal(w13[e, 128:], sd[f"{pre}.{e}.w3.weight"])  # up
        assert torch.equal(w2[e], sd[f"{pre}.{e}.w2.weight"])


def test_transformers5_stacked_expert_names_load_whole(mixtral: Path, tmp_path: Path) -> None:
    sd = load_file(str(mixtral / "model.safetensors"))
    pre = "model.layers.0.block_sparse_moe.experts"
    stacked = {k: v for k, v in sd.items() if ".experts." not in k}
    stacked["model.layers.0.mlp.experts.gate_up_proj"] = torch.stack(
        [torch.cat([sd[f"{pre}.{e}.w1.weight"], sd[f"{pre}.{e}.w3.weight"]]) for e in range(4)]
    )
    stacked["model.layers.0.mlp.experts.down_proj"] = torch.stack(
        [sd[f"{pre}.{e}.w2.weight"] for e in range(4)]
    )
    other = tmp_path / "stacked"
    other.mkdir()
    (other / "config.json").write_text((mixtral / "config.json").read_text())
    save_file(stacked, str(other / "model.safetensors"))
    a, b = dict(_load(mixtral).named_parameters()), dict(_load(other).named_parameters())
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_missing_expert_is_named(mixtral: Path, tmp_path: Path) -> None:
    sd = load_file(str(mixtral / "model.safetensors"))
    del sd["model.layers.0.block_sparse_moe.experts.2.w3.weight"]
    other = tmp_path / "missing"
    other.mkdir()
    (other / "config.json").write_text((mixtral / "config.json").read_text())
    save_file(sd, str(other / "model.safetensors"))
    with pytest.raises(MissingWeightsError) as e:
        _load(other)
    assert e.value.missing == ["model.layers.0.mlp.experts.2.w13[1]"]


def test_gpt2_loads_with_or_without_the_transformer_prefix(tmp_path: Path) -> None:
    path = make_tiny_checkpoint(tmp_path / "g", "gpt2", num_layers=1)
    sd = load_file(str(path / "model.safetensors"))
    model = _load(path)
    # Conv1D [in, out] -> Linear [out, in]
    c_attn = model.get_parameter("model.layers.0.self_attn.qkv_proj.weight")
    assert torch.equal(c_attn, sd["transformer.h.0.attn.c_attn.weight"].t())
    c_fc = model.get_parameter("model.layers.0.mlp.c_fc.weight")  # [I, H]: not square
    assert torch.equal(c_fc, sd["transformer.h.0.mlp.c_fc.weight"].t())
    bare = {k.removeprefix("transformer."): v for k, v in sd.items()}
    bare["h.0.attn.bias"] = torch.ones(1, 1, 4, 4)  # an old checkpoint's causal-mask buffer
    _rewrite(path, bare)
    again = dict(_load(path).named_parameters())
    assert all(torch.equal(again[k], v) for k, v in model.named_parameters())


@pytest.mark.parametrize("max_model_len", [64, 512])
def test_phi3_longrope_matches_transformers_tables(max_model_len: int) -> None:
    """Short factors while the engine serves <= original_max_position_embeddings tokens,
    long ones beyond (what HF uses once a sequence is longer), cos/sin scaled alike."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    hf_cfg = tiny_config("phi3_longrope", head_dim=16)  # type: ignore[arg-type]
    cfg = CheckpointConfig.from_dict({**hf_cfg.to_dict(), "architectures": ["Phi3ForCausalLM"]})
    assert cfg.rope_scaling is not None and cfg.rope_scaling["rope_type"] == "longrope"
    seq_len = None if max_model_len <= 64 else 65
    inv_freq, factor = ROPE_INIT_FUNCTIONS["longrope"](hf_cfg, "cpu", seq_len=seq_len)
    assert factor > 1.0
    t = torch.arange(100, dtype=torch.float32)
    freqs = torch.outer(t, inv_freq)
    want = torch.cat([freqs.cos(), freqs.sin()], dim=-1) * factor
    got = rope_table(
        16, cfg.rope_theta, cfg.rope_scaling, 100,
        max_position_embeddings=cfg.max_position_embeddings, max_model_len=max_model_len,
    )  # fmt: skip
    torch.testing.assert_close(got, want)


def test_phi3_longrope_picks_factors_once_from_max_model_len() -> None:
    """A long max_model_len rotates every position with the long factors (vLLM's choice:
    cached keys keep one rotation), even positions HF would rotate with the short ones;
    vLLM's short_mscale / long_mscale scale cos and sin when a config gives them."""
    hf_cfg = tiny_config("phi3_longrope", head_dim=16)  # type: ignore[arg-type]
    cfg = CheckpointConfig.from_dict({**hf_cfg.to_dict(), "architectures": ["Phi3ForCausalLM"]})
    assert cfg.rope_scaling is not None

    def table(max_model_len: int, **extra: float) -> torch.Tensor:
        return rope_table(
            16, cfg.rope_theta, {**cfg.rope_scaling, **extra}, 100,  # type: ignore[dict-item]
            max_position_embeddings=cfg.max_position_embeddings, max_model_len=max_model_len,
        )  # fmt: skip

    short, long = table(64), table(512)
    assert not torch.allclose(short[:10], long[:10])  # position 9 of a short prompt differs
    inv_long, _ = longrope_inv_freq(16, cfg.rope_theta, cfg.rope_scaling, 512, True)
    assert torch.allclose(long[9, :8] / long[0, 0], torch.cos(9 * inv_long))
    scaled = table(512, long_mscale=1.5, short_mscale=0.5)
    torch.testing.assert_close(scaled, long / long[0, 0] * 1.5)
    torch.testing.assert_close(
        table(64, long_mscale=1.5, short_mscale=0.5), short / short[0, 0] * 0.5
    )


def test_phi3_original_max_position_embeddings_beside_the_scaling_dict() -> None:
    """Phi-3 (4.x configs) keeps original_max_position_embeddings at the top level."""
    raw = _raw("phi3")
    raw.pop("rope_parameters", None)
    raw.update(
        rope_scaling={
            k: v for k, v in PHI3_LONGROPE.items() if k != "original_max_position_embeddings"
        }
    )
    raw["rope_scaling"]["type"] = "su"
    raw["original_max_position_embeddings"] = 64
    cfg = CheckpointConfig.from_dict(raw)
    assert (
        cfg.rope_scaling is not None and cfg.rope_scaling["original_max_position_embeddings"] == 64
    )


def test_family_switches_from_config() -> None:
    mi = CheckpointConfig.from_dict({**_raw("mixtral"), "sliding_window": 16})
    assert mi.uniform_sliding_window == 16
    g3 = CheckpointConfig.from_dict(_raw("gemma3"))
    assert g3.uniform_sliding_window is None  # hybrid: full layers keep every block
    assert g3.sliding_windows == [8, None] and g3.norm_offset == 1.0 and g3.qk_norm
    assert g3.local_rope_theta == 10000.0 and g3.rope_theta == 100000.0
    assert g3.rope_scaling is not None and g3.rope_scaling["rope_type"] == "linear"
    q2 = CheckpointConfig.from_dict(_raw("qwen2_moe"))
    assert q2.moe_layers == [True, False] and q2.shared_expert_intermediate_size == 48
    assert q2.attention_bias and not q2.o_proj_bias and not q2.norm_topk_prob
    mx = CheckpointConfig.from_dict(_raw("mixtral"))
    assert mx.num_experts == 4 and mx.norm_topk_prob and mx.moe_intermediate_size == 128
    o2 = CheckpointConfig.from_dict(_raw("olmo2"))
    assert o2.norm_layout == "post" and o2.qk_norm and not o2.qk_norm_per_head
    gr = CheckpointConfig.from_dict(_raw("granite"))
    assert (gr.embedding_multiplier, gr.residual_multiplier, gr.attention_scale) == (3.0, 0.5, 0.3)
    assert gr.logits_multiplier == 0.5 and gr.o_proj_bias and gr.mlp_bias


def test_unsupported_gpt2_options_are_refused() -> None:
    raw = _raw("gpt2")
    raw["scale_attn_by_inverse_layer_idx"] = True
    with pytest.raises(ModelConfigError, match="scale_attn_by_inverse_layer_idx"):
        CheckpointConfig.from_dict(raw)
    raw = _raw("gpt2")
    raw["activation_function"] = "quick_gelu"
    raw["architectures"] = ["GPT2LMHeadModel"]
    cfg = CheckpointConfig.from_dict(raw)
    with pytest.raises(ValueError, match="unsupported hidden_act 'quick_gelu'"):
        load_model("/nonexistent", cfg, load_format="dummy")


def test_gemma3_transformers4_rope_keys() -> None:
    """4.x configs: rope_theta / rope_scaling for full layers, rope_local_base_freq for
    sliding ones."""
    raw = _raw("gemma3")
    raw.pop("rope_parameters")
    raw.update(
        rope_theta=1_000_000.0,
        rope_scaling={"rope_type": "linear", "factor": 8.0},
        rope_local_base_freq=10_000.0,
    )
    cfg = CheckpointConfig.from_dict(raw)
    assert cfg.rope_theta == 1_000_000.0
    assert cfg.rope_scaling == {"rope_type": "linear", "factor": 8.0}
    assert (cfg.local_rope_theta, cfg.local_rope_scaling) == (10_000.0, None)


# gpt-oss-20b's config.json as OpenAI ships it (transformers 4.x spelling), layers cut to 4.
GPT_OSS_20B = {
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "attention_bias": True,
    "eos_token_id": 200002, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2880,
    "intermediate_size": 2880, "max_position_embeddings": 131072, "num_attention_heads": 64,
    "num_experts_per_tok": 4, "num_hidden_layers": 4, "num_key_value_heads": 8,
    "num_local_experts": 32, "rms_norm_eps": 1e-05, "rope_theta": 150000,
    "layer_types": ["sliding_attention", "full_attention"] * 2,
    "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                     "original_max_position_embeddings": 4096, "rope_type": "yarn",
                     "truncate": False},
    "sliding_window": 128, "swiglu_limit": 7.0, "tie_word_embeddings": False,
    "vocab_size": 201088,
}  # fmt: skip


@pytest.mark.parametrize("truncate", [False, True, None])
@pytest.mark.parametrize("head_dim", [64, 16])
def test_yarn_matches_transformers_tables(truncate: bool | None, head_dim: int) -> None:
    """gpt-oss's YaRN (truncate false) and the default (truncate true, or absent): the
    same inverse frequencies and cos/sin scale as transformers computes."""
    from transformers import GptOssConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    scaling = dict(GPT_OSS_20B["rope_scaling"], rope_theta=150000.0)  # type: ignore[call-overload]
    if truncate is None:
        scaling.pop("truncate")
    else:
        scaling["truncate"] = truncate
    hf_cfg = GptOssConfig(head_dim=head_dim, rope_parameters=scaling)
    inv_freq, factor = ROPE_INIT_FUNCTIONS["yarn"](hf_cfg, "cpu")
    assert factor > 1.0
    t = torch.arange(300, dtype=torch.float32)
    freqs = torch.outer(t, inv_freq)
    want = torch.cat([freqs.cos(), freqs.sin()], dim=-1) * factor
    got = rope_table(
        head_dim, 150000.0, scaling, 300, max_position_embeddings=131072, max_model_len=131072
    )
    torch.testing.assert_close(got, want, atol=0, rtol=0)


def test_gpt_oss_switches_from_its_config() -> None:
    cfg = CheckpointConfig.from_dict(GPT_OSS_20B)
    assert cfg.sliding_windows == [128, None, 128, None] and cfg.attention_sinks
    assert cfg.attention_bias and cfg.o_proj_bias and not cfg.tie_word_embeddings
    assert cfg.rope_theta == 150000.0 and cfg.rope_scaling is not None
    assert cfg.rope_scaling["rope_type"] == "yarn" and cfg.rope_scaling["truncate"] is False
    assert (cfg.num_experts, cfg.num_experts_per_tok, cfg.moe_intermediate_size) == (32, 4, 2880)
    assert cfg.moe_layers == [True] * 4 and cfg.moe_bias and cfg.norm_topk_prob
    assert (cfg.hidden_act, cfg.swiglu_limit, cfg.swiglu_alpha) == ("swigluoai", 7.0, 1.702)
    # No layer_types: sliding first, alternating (transformers' default).
    no_types = {k: v for k, v in GPT_OSS_20B.items() if k != "layer_types"}
    assert CheckpointConfig.from_dict(no_types).sliding_windows == [128, None, 128, None]


def test_gpt_oss_refusals_name_what_is_not_run() -> None:
    from actorllm.models.parallel import TensorParallelError, check_tensor_parallel

    odd = dict(GPT_OSS_20B, layer_types=["sliding_attention", "chunked_attention"] * 2)
    with pytest.raises(ModelConfigError, match=r"layer_types.*chunked_attention"):
        CheckpointConfig.from_dict(odd)
    short = dict(GPT_OSS_20B, layer_types=["sliding_attention", "full_attention"])
    with pytest.raises(ModelConfigError, match="layer_types has 2 entries for 4"):
        CheckpointConfig.from_dict(short)
    with pytest.raises(TensorParallelError, match="gpt-oss"):
        check_tensor_parallel(CheckpointConfig.from_dict(GPT_OSS_20B), 2)


def test_gpt_oss_experts_load_from_their_interleaved_layout(tmp_path: Path) -> None:
    """gate_up_proj [E, H, 2I] with gate / up interleaved lands in w13 [E, 2I, H] as gate
    rows then up rows; down_proj [E, I, H] in w2 [E, H, I]; the router in mlp.gate."""
    path = make_tiny_checkpoint(tmp_path / "g", "gpt_oss", num_layers=1)
    sd = load_file(str(path / "model.safetensors"))
    model = _load(path)
    params = dict(model.named_parameters())
    gu = sd["model.layers.0.mlp.experts.gate_up_proj"]  # [E, H, 2I]
    w13 = params["model.layers.0.mlp.experts.w13"]
    i = w13.shape[1] // 2
    torch.testing.assert_close(w13[2, :i], gu[2, :, 0::2].t())  # gate
    torch.testing.assert_close(w13[2, i:], gu[2, :, 1::2].t())  # up
    b = sd["model.layers.0.mlp.experts.gate_up_proj_bias"]
    torch.testing.assert_close(params["model.layers.0.mlp.experts.w13_bias"][1, i:], b[1, 1::2])
    torch.testing.assert_close(
        params["model.layers.0.mlp.experts.w2"][3],
        sd["model.layers.0.mlp.experts.down_proj"][3].t(),
    )
    torch.testing.assert_close(
        params["model.layers.0.mlp.gate.bias"], sd["model.layers.0.mlp.router.bias"]
    )
    torch.testing.assert_close(
        params["model.layers.0.self_attn.sinks"], sd["model.layers.0.self_attn.sinks"]
    )


# microsoft/Phi-3.5-MoE-instruct's config.json keys, at tiny sizes (its LongRoPE aside).
PHI_35_MOE = {
    "architectures": ["PhiMoEForCausalLM"], "model_type": "phimoe", "vocab_size": 128,
    "hidden_size": 64, "intermediate_size": 32, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4,
    "num_experts_per_tok": 2, "router_jitter_noise": 0.01, "input_jitter_noise": 0.01,
    "attention_bias": True, "lm_head_bias": True, "rms_norm_eps": 1e-5,
    "sliding_window": 128, "hidden_act": "silu", "tie_word_embeddings": False,
}  # fmt: skip


def test_phimoe_mixtral_with_layernorms_biases_and_sparsemixer_routing() -> None:
    cfg = CheckpointConfig.from_dict(PHI_35_MOE)
    assert cfg.num_experts == 4 and cfg.num_experts_per_tok == 2 and cfg.moe_layers == [True] * 2
    assert cfg.moe_intermediate_size == 32 and cfg.sparsemixer_eps == 0.01
    assert not cfg.norm_topk_prob  # sparsemixer's weights are not renormalised
    assert cfg.norm_type == "layer" and cfg.rms_norm_eps == 1e-5
    assert cfg.attention_bias and cfg.o_proj_bias and cfg.lm_head_bias
    assert cfg.sliding_windows == [128, 128]  # as transformers masks every layer
    assert CheckpointConfig.from_dict(_raw("mixtral")).sparsemixer_eps is None


def test_phimoe_other_than_top_2_is_refused_by_name() -> None:
    with pytest.raises(ModelConfigError, match="PhiMoE num_experts_per_tok=1"):
        CheckpointConfig.from_dict({**PHI_35_MOE, "num_experts_per_tok": 1})
