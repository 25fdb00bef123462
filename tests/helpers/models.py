"""Tiny random Hugging Face checkpoints, built in a temp dir, for parity and loader tests.

    path = make_tiny_checkpoint(tmp_path, "qwen3", num_kv_heads=1)
    hf = load_hf_model(path)          # transformers' own implementation, float32, eager

Every family is small enough (2 layers, hidden 64, vocab 128) to run in milliseconds on CPU.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import torch

Family = Literal[
    "llama", "llama3", "mistral", "qwen2", "qwen3",
    "mixtral", "qwen2_moe", "qwen3_moe", "olmoe",
    "gemma", "gemma2", "gemma3", "phi3", "phi3_longrope", "olmo2", "granite", "gpt2",
    "gpt_oss", "smollm3", "ernie4_5", "arcee", "olmo3", "exaone4", "glm", "glm4",
    "seed_oss", "granitemoe", "starcoder2", "stablelm", "apertus", "cohere", "cohere2",
    "opt", "opt_350m", "phi", "gpt_neox", "gpt_neox_sequential", "gptj",
    "gpt_bigcode", "gpt_bigcode_mha", "falcon", "falcon_mha", "falcon_new", "falcon_new_1ln",
    "phimoe",
]  # fmt: skip

LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 32,
}


def tiny_config(
    family: Family = "llama",
    *,
    vocab_size: int = 128,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    head_dim: int | None = None,
    tie_word_embeddings: bool = False,
    max_position_embeddings: int = 512,
    sliding_window: int | None = None,
    eos_token_id: int | list[int] = 2,
    **extra: Any,
) -> Any:
    """A transformers config object for ``family`` ("llama3" = Llama with llama3 rope scaling)."""
    import transformers

    common: dict[str, Any] = dict(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        intermediate_size=intermediate_size,
        tie_word_embeddings=tie_word_embeddings,
        max_position_embeddings=max_position_embeddings,
        eos_token_id=eos_token_id,
        bos_token_id=1,
        rms_norm_eps=1e-6,
    )
    if head_dim is not None:
        common["head_dim"] = head_dim
    common.update(extra)
    if family == "llama":
        return transformers.LlamaConfig(**common)
    if family == "llama3":
        return transformers.LlamaConfig(
            rope_scaling=dict(LLAMA3_ROPE), rope_theta=500000.0, **common
        )
    if family == "mistral":
        return transformers.MistralConfig(sliding_window=sliding_window, **common)
    if family == "qwen2":
        return transformers.Qwen2Config(**common)
    if family == "qwen3":
        common.setdefault("head_dim", 32)  # Qwen3: head_dim != hidden / heads
        return transformers.Qwen3Config(**common)
    return _other_family(family, common, sliding_window)


# Phi-3.5-style LongRoPE at tiny scale: per-dimension factors for head_dim 16 (8 pairs).
PHI3_LONGROPE = {
    "rope_type": "longrope",
    "short_factor": [1.0, 1.1, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0],
    "long_factor": [1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0],
    "original_max_position_embeddings": 64,
}


# gpt-oss's YaRN (truncate false, as its checkpoints say) at tiny scale: the ramp falls
# inside head_dim 16's 8 frequency pairs.
GPT_OSS_YARN = {
    "rope_type": "yarn",
    "rope_theta": 150000.0,
    "factor": 4.0,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "truncate": False,
    "original_max_position_embeddings": 128,  # max_position_embeddings 512 / factor 4
}


def _other_family(family: str, common: dict[str, Any], sliding_window: int | None) -> Any:
    """The families beyond the Llama shape: MoE, Gemma 1-3, Phi-3, OLMo 2, Granite, GPT-2."""
    import transformers

    moe = dict(num_experts_per_tok=2)
    if family == "mixtral":
        return transformers.MixtralConfig(
            num_local_experts=4, sliding_window=sliding_window, **moe, **common
        )
    if family == "qwen2_moe":  # the defaults below may be overridden
        common = dict(num_experts=4, moe_intermediate_size=32, shared_expert_intermediate_size=48,
                      decoder_sparse_step=1, mlp_only_layers=[1], **moe) | common  # fmt: skip
        return transformers.Qwen2MoeConfig(**common)
    if family == "qwen3_moe":
        common.setdefault("head_dim", 32)
        common.setdefault("norm_topk_prob", True)
        common = dict(num_experts=6, moe_intermediate_size=32, **moe) | common
        return transformers.Qwen3MoeConfig(**common)
    if family == "phimoe":  # LayerNorms, biases, sparsemixer routing over 4 experts
        common.setdefault("sliding_window", sliding_window)
        # A wide jitter_eps keeps several experts in each pick's softmax (weights < 1).
        return transformers.PhimoeConfig(
            num_local_experts=4, attention_bias=True, lm_head_bias=True,
            router_jitter_noise=0.3, **moe, **common,
        )  # fmt: skip
    if family == "olmoe":
        common.setdefault("clip_qkv", 3.0)
        return transformers.OlmoeConfig(num_experts=4, **moe, **common)
    if family == "gpt_oss":  # sliding and full layers alternate; a low limit that clamps
        common.setdefault("head_dim", 16)
        return transformers.GptOssConfig(
            num_local_experts=4, sliding_window=sliding_window or 8, swiglu_limit=3.0,
            rope_parameters=dict(GPT_OSS_YARN), **moe, **common,
        )  # fmt: skip
    gemma = dict(
        common, head_dim=common.get("head_dim") or 16, hidden_activation="gelu_pytorch_tanh"
    )
    gemma.setdefault("pad_token_id", 0)
    if family == "gemma":
        return transformers.GemmaConfig(**gemma)
    if family == "gemma2":
        return transformers.Gemma2Config(**(
            dict(sliding_window=sliding_window or 8, query_pre_attn_scalar=24,
                 attn_logit_softcapping=5.0, final_logit_softcapping=3.0) | gemma
        ))  # fmt: skip
    if family == "gemma3":
        return transformers.Gemma3TextConfig(**(
            dict(sliding_window=sliding_window or 8, query_pre_attn_scalar=24,
                 sliding_window_pattern=2, rope_parameters={
                "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 100000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            }) | gemma
        ))  # fmt: skip
    if family in ("phi3", "phi3_longrope"):
        common.setdefault("pad_token_id", 0)
        if family == "phi3_longrope":
            common["head_dim"] = 16
            common.update(original_max_position_embeddings=64, rope_parameters=dict(PHI3_LONGROPE))
        return transformers.Phi3Config(sliding_window=sliding_window, **common)
    if family == "olmo2":
        common.setdefault("pad_token_id", 0)
        return transformers.Olmo2Config(**common)
    if family == "granite":
        return transformers.GraniteConfig(
            embedding_multiplier=3.0, residual_multiplier=0.5, attention_multiplier=0.3,
            logits_scaling=2.0, attention_bias=True, mlp_bias=True, **common,
        )  # fmt: skip
    if family in NEWER:
        return _newer_family(family, common, sliding_window)
    if family in LEARNED_OR_FUSED:
        return _learned_or_fused_family(family, common)
    if family in FALCON:
        return _falcon_family(family, common)
    if family in GPT_KEYED:
        return _gpt_keyed_family(family, common)
    if family == "gpt2":
        return transformers.GPT2Config(
            vocab_size=common["vocab_size"], n_embd=common["hidden_size"],
            n_layer=common["num_hidden_layers"], n_head=common["num_attention_heads"],
            n_positions=common["max_position_embeddings"], n_inner=common["intermediate_size"],
            bos_token_id=1, eos_token_id=common["eos_token_id"],
            tie_word_embeddings=True, attn_pdrop=0.0, embd_pdrop=0.0, resid_pdrop=0.0,
        )  # fmt: skip
    raise ValueError(f"unknown family {family!r}")


NEWER = ("smollm3", "ernie4_5", "arcee", "olmo3", "exaone4", "glm", "glm4", "seed_oss",
         "granitemoe", "starcoder2", "stablelm", "apertus", "cohere", "cohere2")  # fmt: skip


def _newer_family(family: str, common: dict[str, Any], sliding_window: int | None) -> Any:
    """SmolLM3, ERNIE 4.5, Arcee, OLMo 3, EXAONE 4, GLM, GLM-4, Seed-OSS and GraniteMoE,
    each with every switch its family has turned on (a NoPE layer, a sliding layer, biases,
    local RoPE, multipliers)."""
    import transformers

    window = sliding_window or 8
    common.setdefault("pad_token_id", 0)
    n = common["num_hidden_layers"]
    if family == "smollm3":  # RoPE + full, NoPE + sliding, then NoPE + full (3 layers on)
        return transformers.SmolLM3Config(
            no_rope_layers=[1] + [0] * (n - 1), use_sliding_window=True, sliding_window=window,
            layer_types=["sliding_attention" if i == 1 else "full_attention" for i in range(n)],
            attention_bias=True, mlp_bias=True, **common,
        )  # fmt: skip
    if family == "ernie4_5":
        common.setdefault("head_dim", 16)
        return transformers.Ernie4_5Config(use_bias=True, **common)
    if family == "arcee":
        return transformers.ArceeConfig(hidden_act="relu2", mlp_bias=True, **common)
    pattern = dict(sliding_window=window, layer_types=_every_other_sliding(n))
    if family == "olmo3":  # the full layers' RoPE is scaled, the sliding layers' is not
        rope = {
            "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 500000.0},
        }
        return transformers.Olmo3Config(**(pattern | {"rope_parameters": rope} | common))
    if family == "exaone4":  # the full layers run without RoPE
        return transformers.Exaone4Config(**(pattern | common))
    if family == "starcoder2":  # LayerNorms, GELU without a gate, biases, a window
        return transformers.Starcoder2Config(**({"sliding_window": window} | common))
    if family == "cohere":  # attention and MLP side by side, logits scaled, q/k/v/o biases
        return transformers.CohereConfig(**({"logit_scale": 0.5, "attention_bias": True} | common))
    if family == "cohere2":  # Cohere's block, sliding layers, NoPE full layers
        return transformers.Cohere2Config(
            **(pattern | {"logit_scale": 0.5, "attention_bias": True} | common)
        )
    if family == "apertus":  # xIELU, per-head q/k norms, Llama 3's rope scaling
        return transformers.ApertusConfig(**common)
    if family == "stablelm":  # LayerNorms, RoPE on a quarter of each head, q/k/v biases
        return transformers.StableLmConfig(**({"use_qkv_bias": True} | common))
    if family == "seed_oss":  # q/k/v biases (its default), o_proj's and the MLP's too
        return transformers.SeedOssConfig(
            **({"head_dim": 16, "attention_out_bias": True, "mlp_bias": True} | common)
        )
    if family == "granitemoe":  # Granite's four multipliers around a sparse MoE MLP
        return transformers.GraniteMoeConfig(
            embedding_multiplier=3.0, residual_multiplier=0.5, attention_multiplier=0.3,
            logits_scaling=2.0, attention_bias=True, num_local_experts=4,
            num_experts_per_tok=2, **common,
        )  # fmt: skip
    common.setdefault("head_dim", 16)
    if family == "glm":  # interleaved RoPE on half of each head, q/k/v biases
        return transformers.GlmConfig(**common)
    return transformers.Glm4Config(**common)


LEARNED_OR_FUSED = ("opt", "opt_350m", "phi", "gpt_neox", "gpt_neox_sequential")
FALCON = ("falcon", "falcon_mha", "falcon_new", "falcon_new_1ln")


def _learned_or_fused_family(family: str, common: dict[str, Any]) -> Any:
    """OPT (learned positions, ReLU fc1 / fc2; "opt_350m": post-norm, embeddings half as
    wide as the layers), Phi (attention and MLP side by side, RoPE
    on half of each head, biases everywhere, the head's too), GPT-NeoX (the fused per-head
    query_key_value, RoPE on a quarter of each head, the parallel residual or not)."""
    import transformers

    if family.startswith("gpt_neox"):
        return transformers.GPTNeoXConfig(
            vocab_size=common["vocab_size"], hidden_size=common["hidden_size"],
            num_hidden_layers=common["num_hidden_layers"],
            num_attention_heads=common["num_attention_heads"],
            intermediate_size=common["intermediate_size"],
            max_position_embeddings=common["max_position_embeddings"],
            tie_word_embeddings=common["tie_word_embeddings"],
            eos_token_id=common["eos_token_id"], bos_token_id=1,
            use_parallel_residual=family == "gpt_neox", hidden_dropout=0.0,
        )  # fmt: skip
    if family == "phi":
        return transformers.PhiConfig(**({"resid_pdrop": 0.0, "embd_pdrop": 0.0} | common))
    return transformers.OPTConfig(
        vocab_size=common["vocab_size"], hidden_size=common["hidden_size"],
        num_hidden_layers=common["num_hidden_layers"], ffn_dim=common["intermediate_size"],
        num_attention_heads=common["num_attention_heads"],
        max_position_embeddings=common["max_position_embeddings"],
        tie_word_embeddings=common.get("tie_word_embeddings", True),
        eos_token_id=common["eos_token_id"], bos_token_id=1, pad_token_id=1,
        dropout=0.0, attention_dropout=0.0, do_layer_norm_before=family == "opt",
        word_embed_proj_dim=common["hidden_size"] // (2 if family == "opt_350m" else 1),
    )  # fmt: skip


GPT_KEYED = ("gptj", "gpt_bigcode", "gpt_bigcode_mha")


def _gpt_keyed_family(family: str, common: dict[str, Any]) -> Any:
    """GPT-J (interleaved RoPE on half of each head, attention and MLP side by side on one
    LayerNorm, biases on the MLP and the head only); GPTBigCode (learned positions, its
    fused c_attn: one KV head, or "gpt_bigcode_mha" a KV head per query head)."""
    import transformers

    if family.startswith("gpt_bigcode"):
        return transformers.GPTBigCodeConfig(
            vocab_size=common["vocab_size"], n_embd=common["hidden_size"],
            n_layer=common["num_hidden_layers"], n_head=common["num_attention_heads"],
            n_positions=common["max_position_embeddings"], n_inner=common["intermediate_size"],
            multi_query=family == "gpt_bigcode", tie_word_embeddings=common["tie_word_embeddings"],
            eos_token_id=common["eos_token_id"], bos_token_id=1,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        )  # fmt: skip

    head_dim = common["hidden_size"] // common["num_attention_heads"]
    return transformers.GPTJConfig(
        vocab_size=common["vocab_size"], n_embd=common["hidden_size"],
        n_layer=common["num_hidden_layers"], n_head=common["num_attention_heads"],
        n_positions=common["max_position_embeddings"], n_inner=common["intermediate_size"],
        rotary_dim=common.get("rotary_dim", head_dim // 2),
        tie_word_embeddings=common["tie_word_embeddings"], eos_token_id=common["eos_token_id"],
        bos_token_id=1, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip


def _falcon_family(family: str, common: dict[str, Any]) -> Any:
    """Falcon-7B's layout ("falcon": multi-query, attention and MLP side by side on one
    LayerNorm), a KV head per query head in turn ("falcon_mha"), and Falcon-40B's new
    architecture (grouped query_key_value, two LayerNorms; "falcon_new_1ln": one), all with
    biases."""
    import transformers

    new = family.startswith("falcon_new")
    return transformers.FalconConfig(
        vocab_size=common["vocab_size"], hidden_size=common["hidden_size"],
        num_hidden_layers=common["num_hidden_layers"],
        num_attention_heads=common["num_attention_heads"],
        num_kv_heads=common["num_key_value_heads"] if new else None,
        new_decoder_architecture=new, multi_query=family == "falcon",
        parallel_attn=family != "falcon_mha", bias=True,
        num_ln_in_parallel_attn=1 if family == "falcon_new_1ln" else None,
        ffn_hidden_size=common["intermediate_size"],
        max_position_embeddings=common["max_position_embeddings"],
        tie_word_embeddings=common["tie_word_embeddings"], eos_token_id=common["eos_token_id"],
        bos_token_id=1, hidden_dropout=0.0, attention_dropout=0.0,
    )  # fmt: skip


def _every_other_sliding(n: int) -> list[str]:
    return ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)]


def make_tiny_checkpoint(
    directory: str | Path,
    family: Family = "llama",
    *,
    seed: int = 0,
    max_shard_size: str | None = None,
    dtype: torch.dtype = torch.float32,
    safe_serialization: bool = True,
    **config: Any,
) -> Path:
    """Save a random ``family`` model (safetensors; ``safe_serialization=False``: PyTorch
    ``pytorch_model.bin``) into ``directory``; returns the path.

    Weights are N(0, 0.5) instead of HF's 0.02 so logits are far from flat and greedy ties
    are rare; biases and norm weights are random too so they are really exercised.
    ``max_shard_size`` (e.g. "40KB") writes a sharded checkpoint with an index.
    """
    import transformers

    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    cfg = tiny_config(family, **config)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("norm.weight", "ln_1.weight", "ln_2.weight", "ln_f.weight")):
                # Gemma scales by 1 + w: its w near 0 is the same norm
                base = 0.0 if cfg.model_type.startswith("gemma") else 1.0
                p.copy_(base + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                std = 0.5 if p.dim() == 1 else 1.0 / p.shape[-1] ** 0.5 * 2
                p.copy_(std * torch.randn(p.shape, generator=gen))
    model = model.to(dtype)
    kwargs: dict[str, Any] = {}
    if max_shard_size is not None:
        kwargs["max_shard_size"] = max_shard_size
    model.save_pretrained(path, **kwargs)
    if not safe_serialization:
        to_pytorch_bin(path)
    return path


def to_pytorch_bin(path: Path) -> None:
    """Rewrite a safetensors save as transformers 4's ``safe_serialization=False`` wrote it
    (transformers 5 saves safetensors only): ``pytorch_model.bin``, or the shards
    ``pytorch_model-0000i-of-0000n.bin`` with ``pytorch_model.bin.index.json``."""
    from safetensors.torch import load_file

    def bin_name(name: str) -> str:
        return "pytorch_model" + name.removeprefix("model").removesuffix(".safetensors") + ".bin"

    for f in sorted(path.glob("model*.safetensors")):
        torch.save(load_file(str(f)), path / bin_name(f.name))
        f.unlink()
    index = path / "model.safetensors.index.json"
    if index.is_file():
        raw = json.loads(index.read_text())
        raw["weight_map"] = {k: bin_name(v) for k, v in raw["weight_map"].items()}
        (path / "pytorch_model.bin.index.json").write_text(json.dumps(raw))
        index.unlink()


def load_hf_model(path: str | Path) -> Any:
    """transformers' reference implementation of the checkpoint, float32, eager attention."""
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float32, attn_implementation="eager"
    )
    return model.eval()


@torch.no_grad()
def hf_logprobs(model: Any, token_ids: list[int]) -> torch.Tensor:
    """[L, V] float32 log_softmax of HF's logits at every position of ``token_ids``."""
    out = model(torch.tensor([token_ids]))
    return out.logits[0].float().log_softmax(dim=-1)
