"""``CheckpointConfig``: what the model code needs to know about a checkpoint, parsed from
config.json. (vLLM's ``ModelConfig``, the engine's view of the model that
``LLMEngine.get_model_config()`` returns, is :mod:`actorllm.engine.config.model_config`.)

Both config dialects are accepted:

* transformers 5.x writes ``rope_parameters = {"rope_type", "rope_theta", ...}``;
* transformers 4.x writes ``rope_theta`` at the top level and ``rope_scaling`` beside it.

``eos_token_id`` may be an int or a list in either config.json or generation_config.json;
generation_config.json wins when it has one (that is what ``generate()`` uses).

    >>> cfg = CheckpointConfig.from_dict({"architectures": ["LlamaForCausalLM"], "vocab_size": 32,
    ...     "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
    ...     "num_attention_heads": 2, "eos_token_id": [2, 3]})
    >>> cfg.head_dim, cfg.num_kv_heads, cfg.eos_token_ids
    (4, 2, [2, 3])
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from actorllm.models.families import (
    default_tied,
    family_fields,
    has_qk_norm,
    has_qkv_bias,
    normalize_keys,
    unsupported_options,
)
from actorllm.models.layer_pattern import sliding_windows


def llama_config_json(
    shape: dict[str, Any], *, tie_word_embeddings: bool = False, eos_token_id: int = 0
) -> dict[str, Any]:
    """A Llama checkpoint's config.json (transformers 5.x ``rope_parameters`` and the 4.x
    keys) with ``shape``'s keys (sizes, or another family's ``architectures``) on top; for
    checkpoints written by scripts and benchmarks.

    >>> cfg = llama_config_json({"vocab_size": 32, "hidden_size": 8, "num_attention_heads": 2})
    >>> cfg["head_dim"], cfg["eos_token_id"], cfg["tie_word_embeddings"]
    (4, 0, False)
    """
    full: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": tie_word_embeddings,
        "bos_token_id": None,
        "eos_token_id": eos_token_id,
        "pad_token_id": eos_token_id,
        "dtype": "float32",
        "initializer_range": 0.02,
        **shape,
    }
    full.setdefault("head_dim", full["hidden_size"] // full["num_attention_heads"])
    return full


class ModelConfigError(ValueError):
    """config.json is missing or lacks a field the model needs."""


class CheckpointConfig(msgspec.Struct, frozen=True, kw_only=True):
    architecture: str
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    # HF rope scaling dict ({"rope_type": "llama3", "factor": ...}) or None for plain RoPE.
    rope_scaling: dict[str, Any] | None
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool  # Qwen2: bias on q/k/v
    qk_norm: bool  # Qwen3: per-head RMSNorm on q and k before RoPE
    # Per layer: None (full attention) or the window in tokens.
    sliding_windows: list[int | None]
    # dtype name from the checkpoint ("float32", "bfloat16", "float16").
    dtype: str
    eos_token_ids: list[int]
    bos_token_id: int | None = None
    # Longest sequence the engine serves: max_position_embeddings unless the runner lowers it.
    max_model_len: int = 0
    # -- per-family switches (defaults are Llama's; models/families.py reads them) --------
    hidden_act: str = "silu"  # the MLP's activation: silu, gelu_pytorch_tanh, gelu_new, ...
    o_proj_bias: bool = False  # Llama with attention_bias, Granite, OLMo: o_proj has a bias
    mlp_bias: bool = False  # Granite's mlp_bias
    qk_norm_per_head: bool = True  # False: OLMo 2 / OLMoE norm the whole q / k projection
    # "rms", or a LayerNorm per head (models/qk_layer_norm.py): "layer" (Phi), "layer_heads"
    # (Cohere), "layer_head_list" (StableLM).
    qk_norm_kind: str = "rms"
    clip_qkv: float | None = None  # OLMoE: clamp q, k, v to [-clip, clip]
    # Gemma: RMSNorm scales by (offset + w), offset 1.0.
    norm_offset: float = 0.0
    # Which norms a layer has, by HF name: "pre" (Llama), "sandwich" (Gemma 2/3: also
    # post-attention and post-feedforward norms), "post" (OLMo 2: norms after each sublayer),
    # "parallel" (Cohere: one norm, attention and MLP both read it; their outputs are added),
    # "parallel2" (GPT-NeoX: attention and MLP side by side, each on its own norm), "opt"
    # (Llama's two norms under OPT's names), "opt_post" (OPT-350m: the same norms, each after
    # its sublayer's residual add).
    norm_layout: str = "pre"
    embedding_multiplier: float = 1.0  # Gemma: sqrt(hidden); Granite: embedding_multiplier
    residual_multiplier: float = 1.0  # Granite: sublayer outputs scaled before the add
    attention_scale: float | None = None  # None: head_dim ** -0.5
    attn_logit_softcap: float | None = None  # Gemma 2: cap * tanh(score / cap)
    final_logit_softcap: float | None = None  # Gemma 2
    logits_multiplier: float = 1.0  # Granite: 1 / logits_scaling
    partial_rotary_factor: float = 1.0  # RoPE on the first head_dim * factor dims only
    # Gemma 3: sliding layers use their own RoPE base (and scaling).
    local_rope_theta: float | None = None
    local_rope_scaling: dict[str, Any] | None = None
    # gpt-oss: a learned logit per query head (``self_attn.sinks``) joins every softmax
    # denominator and contributes no value.
    attention_sinks: bool = False
    # Per layer: True where the layer applies no RoPE at all (SmolLM3's no_rope_layers
    # zeros, EXAONE 4's full-attention layers); empty: every layer rotates.
    nope_layers: list[bool] = []
    # RoPE pairs adjacent lanes (2i, 2i + 1) (GPT-J style: ERNIE 4.5, GLM) instead of the
    # two halves (NeoX style).
    rope_interleaved: bool = False
    # False: the MLP is down(act(up(x))), no gate (Arcee's ReLU^2 MLP).
    mlp_gated: bool = True
    # "rms" (RMSNorm), "layer" (LayerNorm with a bias: StarCoder 2, StableLM) or
    # "layer_nobias" (Cohere); eps: rms_norm_eps.
    norm_type: str = "rms"
    # OPT, GPTBigCode: learned absolute positions (``model.embed_positions``, no RoPE on
    # any layer); position p reads row p + learned_position_offset (OPT's 2, BigCode's 0).
    learned_positions: bool = False
    learned_position_offset: int = 0
    lm_head_bias: bool = False  # Phi: the LM head has a bias
    # OPT-350m: token embeddings (and the LM head's input) are this wide, projected to and
    # from hidden_size by model.project_in / project_out; 0: hidden_size wide.
    word_embed_proj_dim: int = 0
    final_norm: bool = True  # False: no model.norm (OPT-350m's layers end normed)
    # GPT-NeoX: qkv_proj's rows are [H, 3, D] (each head's q, k, v side by side), as its
    # checkpoints store query_key_value; Falcon's new architecture: [Hk, Hq / Hk + 2, D]
    # (each KV group's query heads, then its k and v). A rank's heads are one block of rows.
    qkv_head_major: bool = False
    # -- Mixture of Experts (num_experts == 0: dense) ---------------------------------------
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    norm_topk_prob: bool = False  # renormalise the top-k routing weights to sum to 1
    # PhiMoE: its sparsemixer routes each token to 2 experts with this jitter_eps
    # (router_jitter_noise; kernels/moe.py::route_sparsemixer); None: softmax top-k.
    sparsemixer_eps: float | None = None
    shared_expert_intermediate_size: int = 0  # Qwen2-MoE: a sigmoid-gated shared expert
    # Per layer: True where the MLP is the sparse MoE block (Qwen MoE's mlp_only_layers and
    # decoder_sparse_step make some layers dense).
    moe_layers: list[bool] = []
    moe_bias: bool = False  # gpt-oss: the router and each expert's projections have biases
    # gpt-oss's clamped SwiGLU (hidden_act "swigluoai"): gate clamped to <= limit, up to
    # [-limit, limit], out = (up + 1) * gate * sigmoid(alpha * gate).
    swiglu_limit: float = 7.0
    swiglu_alpha: float = 1.702
    # -- tensor parallel (models/parallel.py's shard_config sets them on a rank's config) ---
    tp_rank: int = 0
    tp_size: int = 1  # 1: the whole model; >1: head and intermediate counts are per rank
    full_num_heads: int = 0  # the checkpoint's counts (0: not sharded, see num_heads)
    full_num_kv_heads: int = 0
    # -- pipeline parallel (models/pipeline.py's stage_config sets it on a stage's config) --
    # [start, end): the decoder layers this stage holds (None: every layer, one stage).
    pp_layers: tuple[int, int] | None = None
    # config.json's quantization_config (or AutoGPTQ's quantize_config.json), as written;
    # models/quant/spec.py reads it (None: an unquantized checkpoint).
    quantization_config: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.max_model_len <= 0:
            msgspec.structs.force_setattr(self, "max_model_len", self.max_position_embeddings)

    @property
    def embed_size(self) -> int:
        """The width of token embeddings, embedding prompts and the LM head's input."""
        return self.word_embed_proj_dim or self.hidden_size

    @property
    def eos_token_id(self) -> int | None:
        """The primary EOS id (the first one), as the scheduler's ``Request`` wants it."""
        return self.eos_token_ids[0] if self.eos_token_ids else None

    @property
    def uniform_sliding_window(self) -> int | None:
        """The window when every layer has the same one (the scheduler can then hand back
        blocks behind it: ``SchedulerConfig.sliding_window``), else None."""
        windows = set(self.sliding_windows)
        if len(windows) == 1:
            return next(iter(windows))
        return None

    @classmethod
    def from_pretrained(cls, path: str | Path) -> CheckpointConfig:
        """Read ``config.json`` (and ``generation_config.json`` if present) from ``path``.

        Raises :class:`ModelConfigError` if config.json is missing or malformed.
        """
        path = Path(path)
        if path.suffix.lower() == ".gguf":  # a GGUF file: its metadata (models/gguf/)
            from actorllm.models.gguf.config import gguf_config_dict, open_reader

            return cls.from_dict(gguf_config_dict(open_reader(path)))
        cfg_file = path / "config.json"
        if not cfg_file.is_file():
            raise ModelConfigError(f"no config.json in {path}")
        try:
            raw = json.loads(cfg_file.read_text())
        except json.JSONDecodeError as e:
            raise ModelConfigError(f"{cfg_file} is not valid JSON: {e}") from e
        quant_file = path / "quantize_config.json"  # AutoGPTQ's own file (vLLM reads it)
        if raw.get("quantization_config") is None and quant_file.is_file():
            raw["quantization_config"] = {"quant_method": "gptq"} | json.loads(
                quant_file.read_text()
            )
        if isinstance(raw.get("quantization_config"), dict):
            from actorllm.models.quant.gptq_modules import with_quantized_modules

            raw["quantization_config"] = with_quantized_modules(raw["quantization_config"], path)
        gen_file = path / "generation_config.json"
        gen = json.loads(gen_file.read_text()) if gen_file.is_file() else {}
        return cls.from_dict(raw, generation_config=gen)

    @classmethod
    def from_dict(
        cls, raw: dict[str, Any], generation_config: dict[str, Any] | None = None
    ) -> CheckpointConfig:
        def need(key: str) -> Any:
            if raw.get(key) is None:
                raise ModelConfigError(f"config.json lacks {key!r}")
            return raw[key]

        archs = raw.get("architectures") or []
        if not archs:
            raise ModelConfigError("config.json lacks 'architectures'")
        raw = normalize_keys(raw)
        num_heads = int(need("num_attention_heads"))
        hidden = int(need("hidden_size"))
        num_layers = int(need("num_hidden_layers"))
        problems = unsupported_options(raw, num_layers)
        if problems:
            raise ModelConfigError("; ".join(problems))
        theta, scaling = _rope(raw)
        eos = _eos_ids((generation_config or {}).get("eos_token_id"))
        if not eos:
            eos = _eos_ids(raw.get("eos_token_id"))
        dtype = raw.get("dtype") or raw.get("torch_dtype") or "float32"
        return cls(
            architecture=str(archs[0]),
            model_type=str(raw.get("model_type", "")),
            vocab_size=int(need("vocab_size")),
            hidden_size=hidden,
            intermediate_size=int(need("intermediate_size")),
            num_layers=num_layers,
            num_heads=num_heads,
            num_kv_heads=int(raw.get("num_key_value_heads") or num_heads),
            head_dim=int(raw.get("head_dim") or hidden // num_heads),
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
            rope_theta=theta,
            rope_scaling=scaling,
            max_position_embeddings=int(raw.get("max_position_embeddings", 2048)),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", default_tied(raw))),
            attention_bias=has_qkv_bias(raw),
            qk_norm=has_qk_norm(raw),
            sliding_windows=sliding_windows(raw, num_layers),
            dtype=str(dtype).removeprefix("torch."),
            eos_token_ids=eos,
            bos_token_id=raw.get("bos_token_id"),
            quantization_config=_quantization_config(raw),
            **family_fields(raw, num_layers, hidden),
        )


def _quantization_config(raw: dict[str, Any]) -> dict[str, Any] | None:
    value = raw.get("quantization_config")
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ModelConfigError(f"config.json quantization_config is not an object: {value!r}")
    return dict(value)


def _rope(raw: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    """(theta, scaling dict or None) from either the 5.x or the 4.x spelling.

    Phi-3 keeps ``original_max_position_embeddings`` beside its LongRoPE ("su" in old
    configs) scaling dict; it is copied in so the dict says everything RoPE needs.
    """
    theta, scaling = _rope_dict(raw)
    original = raw.get("original_max_position_embeddings")
    if scaling is not None and original is not None:
        scaling.setdefault("original_max_position_embeddings", original)
    return theta, scaling


def _rope_dict(raw: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    params = raw.get("rope_parameters")
    if isinstance(params, dict) and "full_attention" in params:  # Gemma 3: per layer type
        return _rope_dict({"rope_parameters": params["full_attention"]})
    if isinstance(params, dict) and params:
        theta = float(params.get("rope_theta", raw.get("rope_theta", 10000.0)))
        rope_type = params.get("rope_type", params.get("type", "default"))
        scaling = None if rope_type in (None, "default") else dict(params)
        return theta, scaling
    theta = float(raw.get("rope_theta", 10000.0))
    scaling = raw.get("rope_scaling")
    if isinstance(scaling, dict):
        rope_type = scaling.get("rope_type", scaling.get("type", "default"))
        if rope_type not in (None, "default"):
            return theta, dict(scaling)
    return theta, None


def _eos_ids(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [int(v) for v in value]
