"""Each family's config.json dialect, read into :class:`CheckpointConfig`'s per-family switches.

The decoder (``models/llama.py``) is one implementation with switches; this module is
where a family's HF config says which switches it sets. Families by ``model_type``:

* llama, mistral, qwen2, qwen3, phi3: pre-norm RMSNorm decoders (Phi-3's fused
  ``qkv_proj`` / ``gate_up_proj`` are our own packed layout; LongRoPE lives in rotary.py);
* granite: Llama plus embedding / residual / attention / logits multipliers; granitemoe:
  the same with a sparse MoE MLP (its stacked ``input_linear`` / ``output_linear``
  experts, the softmax over the top-k router logits);
* gemma, gemma2, gemma3_text: ``(1 + w)`` RMSNorm, embeddings scaled by sqrt(hidden),
  GELU-tanh MLP; 2 and 3 add sandwich norms, ``query_pre_attn_scalar``, sliding layers,
  soft-capping (2) and per-head q/k norms with a local RoPE base (3);
* olmo2: norms after each sublayer instead of before, q/k norm over the whole projection;
* mixtral, qwen2_moe, qwen3_moe, olmoe, granitemoe: sparse MoE MLPs (``models/moe.py``);
* gpt_oss: attention sinks, sliding and full layers alternating, q/k/v/o biases, YaRN, and
  a sparse MoE with biases and a clamped SwiGLU ("swigluoai"); its own stacked expert
  layout is read by ``models/gpt_oss.py``;
* smollm3: Llama with RoPE skipped on the layers ``no_rope_layers`` marks 0;
* ernie4_5: Llama with GPT-J-style (interleaved) RoPE; ``use_bias`` biases every
  projection;
* arcee: Llama with an un-gated ReLU^2 MLP (``up_proj``, ``down_proj``);
* olmo3: OLMo 2 plus sliding-window layers, whose RoPE may differ from the full layers';
* exaone4: OLMo 2's post-norms with per-head q/k norms, sliding layers, and no RoPE on
  the full-attention layers;
* glm, glm4: q/k/v biases, interleaved partial RoPE (half the head by default), the
  checkpoint's own fused ``gate_up_proj``; glm4 adds Gemma 2's four norms (other names);
* seed_oss: Llama with q/k/v biases by default and ``attention_out_bias`` for o_proj;
* starcoder2: LayerNorms with biases, an un-gated GELU MLP (``c_fc`` / ``c_proj``),
  ``use_bias`` on every projection, Mistral's sliding window on every layer;
* apertus: Llama with per-head q/k norms, its own norm names and an un-gated MLP with
  xIELU (learned scalars per layer);
* cohere (Command R): one LayerNorm without a bias, attention and MLP side by side on it
  (``norm_layout`` "parallel"), interleaved RoPE, logits times ``logit_scale``, tied by
  default, ``use_qk_norm``: a LayerNorm on each head of q and k with a weight per head
  (``qk_norm_kind`` "layer_heads"); cohere2 adds sliding layers, the full ones without
  RoPE;
* stablelm: Llama with LayerNorms, RoPE on a quarter of each head by default and
  ``use_qkv_bias``; ``qk_layernorm``: one LayerNorm per head of q and k
  ("layer_head_list"), ``use_parallel_residual``: Cohere's block;
* opt: learned positions (row ``p + 2``) added to the embeddings and no RoPE, pre-norm
  LayerNorms under its own names (``norm_layout`` "opt"), an un-gated ReLU MLP
  (``fc1`` / ``fc2``), ``enable_bias`` on every projection, tied; its checkpoint names
  (``model.decoder.*``, ``out_proj``) are mapped in ``models/family_names.py``.
  opt-350m's ``do_layer_norm_before`` false puts each norm after its residual add
  (``norm_layout`` "opt_post") and drops the final norm; its ``word_embed_proj_dim`` <
  hidden_size embeds (and reads the LM head) that narrow, with ``project_in`` /
  ``project_out`` around the layers;
* phi (Phi-1 / 1.5 / 2): Cohere's block (one LayerNorm, attention and MLP side by side)
  with a biased LayerNorm, NeoX RoPE on the first ``partial_rotary_factor`` of each head
  (half by default), biases on every projection and the LM head, an un-gated GELU MLP
  (``fc1`` / ``fc2``); ``qk_layernorm``: one LayerNorm (with a bias) for every head of q
  and k ("layer");
* gpt_neox (Pythia): LayerNorms with biases, NeoX RoPE on ``rotary_pct`` of each head (a
  quarter by default), ``attention_bias`` (true by default) on q/k/v and ``dense``, a
  biased un-gated GELU MLP, untied ``embed_out``; ``use_parallel_residual`` (true by
  default) runs attention and MLP side by side, each on its own norm (``norm_layout``
  "parallel2"), false runs them in turn; its fused ``query_key_value`` stays in its
  per-head order (``qkv_head_major``);
* gptj: Phi's block with GPT-J's interleaved RoPE on ``rotary_dim`` lanes; gpt2 and
  gpt_bigcode: OPT's learned positions (from row 0), pre-norm LayerNorms, biases, fused
  q/k/v (GPT-2's Conv1D weights transposed at load); all three read with GPT-2's key
  spellings (``models/gpt_families.py``);
* phimoe (Phi-3.5-MoE): Mixtral's layout with LayerNorms (biased), q/k/v/o biases by
  ``attention_bias``, an LM head bias by ``lm_head_bias``, LongRoPE, and its sparsemixer
  routing (``sparsemixer_eps``: ``router_jitter_noise``); a top-k other than 2 is refused;
* falcon: its three fused q/k/v layouts (grouped by KV head, multi-query, head by head)
  and three blocks, read in ``models/falcon_family.py``.

Which layers slide and which skip RoPE: ``models/layer_pattern.py``.

    >>> f = family_fields({"model_type": "gemma2", "query_pre_attn_scalar": 16,
    ...     "attn_logit_softcapping": 50.0}, num_layers=2, hidden=64)
    >>> f["norm_offset"], f["embedding_multiplier"], f["attention_scale"], f["norm_layout"]
    (1.0, 8.0, 0.25, 'sandwich')
"""

from __future__ import annotations

import math
from typing import Any

from actorllm.models.falcon_family import falcon_fields, falcon_problems, normalize_falcon_keys
from actorllm.models.gpt_families import (
    GPT_KEYS,
    bigcode_fields,
    gpt_problems,
    gptj_fields,
    normalize_gpt_keys,
)
from actorllm.models.layer_pattern import nope_layers, pattern_problems
from actorllm.models.moe_families import MOE, moe_fields

GEMMA = ("gemma", "gemma2", "gemma3_text")
GLM = ("glm", "glm4")
GRANITE = ("granite", "granitemoe")
# transformers' partial_rotary_factor where config.json leaves it out.
DEFAULT_PARTIAL_ROTARY = {"glm": 0.5, "glm4": 0.5, "stablelm": 0.25, "phi": 0.5, "gpt_neox": 0.25}
# attention_bias (q/k/v) is true when config.json leaves it out.
QKV_BIAS_BY_DEFAULT = (*GLM, "seed_oss", "gpt_neox")
# q / k normed over the whole projection, not per head.
WHOLE_QK_NORM = ("olmo2", "olmoe", "olmo3")
# Checkpoints whose q/k/v are one tensor that tensor parallel splits (GPT-NeoX's head by
# head, GPTBigCode's, GPT-2's and Falcon's head by head, by KV group or q | k | v): the
# loader packs nothing.
FUSED_QKV = ("gpt_neox", "gpt_bigcode", "gpt2", "falcon")
# Checkpoints that store projections already fused (ours are fused at load): they are
# neither split over tensor-parallel ranks nor built quantized.
FUSED_CHECKPOINTS = {
    "phi3": "Phi-3's fused qkv_proj / gate_up_proj checkpoints",
    "glm": "GLM's fused gate_up_proj checkpoints",
    "glm4": "GLM-4's fused gate_up_proj checkpoints",
}
# LayerNorm instead of RMSNorm: the key its eps is under, and which kind (Cohere's has no
# bias).
LAYER_NORM_EPS = {
    "starcoder2": "norm_epsilon",
    "stablelm": "layer_norm_eps",
    "cohere": "layer_norm_eps",
    "cohere2": "layer_norm_eps",
    "phi": "layer_norm_eps",
    "gpt_neox": "layer_norm_eps",
}
NORM_TYPES = {
    "starcoder2": "layer", "stablelm": "layer", "cohere": "layer_nobias",
    "cohere2": "layer_nobias", "opt": "layer", "phi": "layer", "gpt_neox": "layer",
    "gptj": "layer", "gpt_bigcode": "layer", "gpt2": "layer", "falcon": "layer",
    "phimoe": "layer",
}  # fmt: skip
# transformers' default for a config.json that leaves tie_word_embeddings out.
TIED_BY_DEFAULT = ("smollm3", "ernie4_5", "starcoder2", "cohere", "cohere2", "opt")
# The MLP has no gate: down(act(up(x))).
UNGATED = (
    "arcee", "starcoder2", "apertus", "opt", "phi", "gpt_neox", "gptj", "gpt_bigcode", "gpt2",
    "falcon",
)  # fmt: skip
# Every projection has a bias, whatever the config says.
ALWAYS_BIASED = ("gpt2", "phi", "gpt_bigcode")


def normalize_keys(raw: dict[str, Any]) -> dict[str, Any]:
    """GPT-2, GPT-J and OPT spell the common keys their own way (n_embd, n_layer, ffn_dim,
    ...; models/gpt_families.py), the LayerNorm families their norm's eps: rename them."""
    mt = raw.get("model_type")
    eps_key = LAYER_NORM_EPS.get(str(mt))
    if eps_key is not None:
        raw = {**raw, "rms_norm_eps": raw.get(eps_key, 1e-5)}
    if mt == "gpt_neox":  # 4.x keys (5.x writes rope_parameters)
        out = {**raw, "rope_theta": raw.get("rope_theta", raw.get("rotary_emb_base", 10000.0))}
        if "rotary_pct" in raw:
            out.setdefault("partial_rotary_factor", raw["rotary_pct"])
        return out
    if mt == "opt":
        act = raw.get("activation_function", "relu")
        # OPT's config has no eps: its LayerNorms take nn.LayerNorm's 1e-5.
        return {**raw, "intermediate_size": raw.get("ffn_dim"), "hidden_act": act,
                "rms_norm_eps": 1e-5}  # fmt: skip
    if mt in GPT_KEYS:
        return normalize_gpt_keys(raw)
    if mt == "falcon":
        return normalize_falcon_keys(raw)
    return raw


def has_qkv_bias(raw: dict[str, Any]) -> bool:
    """Qwen2 (and Qwen2-MoE) always have q/k/v bias; GPT-2 biases everything; GLM's
    attention_bias defaults to true; ERNIE 4.5 says use_bias."""
    mt = raw.get("model_type")
    return (
        mt in ("qwen2", "qwen2_moe", *ALWAYS_BIASED)
        or bool(raw.get("attention_bias", mt in QKV_BIAS_BY_DEFAULT))
        or _ernie_bias(raw)
        or _starcoder2_bias(raw)
        or (mt == "stablelm" and bool(raw.get("use_qkv_bias")))
        or _opt_bias(raw)
        or (mt == "falcon" and bool(raw.get("bias")))
    )


# The key that turns q/k norms on, for the families where they are optional; and which
# LayerNorm they are (models/qk_layer_norm.py).
QK_NORM_SWITCH = {"phi": "qk_layernorm", "stablelm": "qk_layernorm", "cohere": "use_qk_norm"}
QK_NORM_KIND = {"phi": "layer", "stablelm": "layer_head_list", "cohere": "layer_heads"}


def has_qk_norm(raw: dict[str, Any]) -> bool:
    mt = raw.get("model_type")
    if mt in QK_NORM_SWITCH:
        return bool(raw.get(QK_NORM_SWITCH[mt]))
    return mt in (
        "qwen3", "qwen3_moe", "olmo2", "olmoe", "olmo3", "gemma3_text", "exaone4", "apertus",
    )  # fmt: skip


def default_tied(raw: dict[str, Any]) -> bool:
    return raw.get("model_type") in TIED_BY_DEFAULT


def unsupported_options(raw: dict[str, Any], num_layers: int) -> list[str]:
    """Config values this engine would otherwise silently ignore, as error messages."""
    problems = pattern_problems(raw, num_layers)
    problems += gpt_problems(raw)
    if raw.get("model_type") == "falcon":
        problems += falcon_problems(raw)
    if raw.get("model_type") == "phimoe" and int(raw.get("num_experts_per_tok") or 2) != 2:
        k = raw["num_experts_per_tok"]
        problems.append(f"PhiMoE num_experts_per_tok={k} is not supported (sparsemixer routes 2)")
    if raw.get("model_type") == "gemma3_text" and raw.get("use_bidirectional_attention"):
        problems.append("Gemma 3 use_bidirectional_attention=true is not supported")
    if raw.get("model_type") == "opt":
        problems += _opt_problems(raw)
    return problems


def _opt_problems(raw: dict[str, Any]) -> list[str]:
    if raw.get("layer_norm_elementwise_affine") is False:
        return ["OPT layer_norm_elementwise_affine=false is not supported"]
    return []


def family_fields(raw: dict[str, Any], num_layers: int, hidden: int) -> dict[str, Any]:
    """The per-family keyword arguments of :class:`CheckpointConfig` for this config.json."""
    mt = raw.get("model_type", "")
    f: dict[str, Any] = {
        "hidden_act": str(raw.get("hidden_act") or "silu"),
        "o_proj_bias": _o_proj_bias(raw),
        "mlp_bias": mt in (*ALWAYS_BIASED, "gpt_neox")
        or bool(raw.get("mlp_bias"))
        or _ernie_bias(raw)
        or _starcoder2_bias(raw)
        or _opt_bias(raw),
        "qk_norm_per_head": mt not in WHOLE_QK_NORM,
        "clip_qkv": _float_or_none(raw.get("clip_qkv")),
        "partial_rotary_factor": _partial_rotary(raw, DEFAULT_PARTIAL_ROTARY.get(mt, 1.0)),
        "nope_layers": nope_layers(raw, num_layers),
        "rope_interleaved": mt in ("ernie4_5", "cohere", "cohere2", *GLM),
        "mlp_gated": mt not in UNGATED,
        "norm_type": NORM_TYPES.get(mt, "rms"),
        "qk_norm_kind": QK_NORM_KIND.get(mt, "rms"),
    }
    if mt in GEMMA:
        f["hidden_act"] = str(raw.get("hidden_activation") or raw.get("hidden_act") or "")
        if f["hidden_act"] in ("", "gelu"):  # HF Gemma runs the tanh approximation
            f["hidden_act"] = "gelu_pytorch_tanh"
        f["norm_offset"] = 1.0
        f["embedding_multiplier"] = math.sqrt(hidden)
        if mt != "gemma":
            f["norm_layout"] = "sandwich"
            f["attention_scale"] = float(raw.get("query_pre_attn_scalar") or 256) ** -0.5
            f["attn_logit_softcap"] = _float_or_none(raw.get("attn_logit_softcapping"))
            f["final_logit_softcap"] = _float_or_none(raw.get("final_logit_softcapping"))
        if mt == "gemma3_text":
            f["local_rope_theta"], f["local_rope_scaling"] = _gemma3_local_rope(raw)
    elif mt in ("olmo2", "exaone4"):
        f["norm_layout"] = "post"
    elif mt == "olmo3":
        f["norm_layout"] = "post"
        f["local_rope_theta"], f["local_rope_scaling"] = _olmo3_sliding_rope(raw)
    elif mt == "glm4":
        f["norm_layout"] = "glm4"
    elif mt == "apertus":
        f["norm_layout"] = "apertus"
    elif mt == "phi":
        f["norm_layout"] = "parallel"
        f["lm_head_bias"] = True
    elif mt == "gpt_neox":
        f["norm_layout"] = "parallel2" if raw.get("use_parallel_residual", True) else "pre"
        f["qkv_head_major"] = True
    elif mt == "stablelm" and raw.get("use_parallel_residual"):
        f["norm_layout"] = "parallel"
    elif mt in ("cohere", "cohere2"):
        f["norm_layout"] = "parallel"
        f["logits_multiplier"] = float(raw.get("logit_scale") or 0.0625)
    elif mt == "opt":
        f.update(_opt_fields(raw, hidden))
    elif mt == "gptj":
        f.update(gptj_fields(raw))
    elif mt in ("gpt_bigcode", "gpt2"):
        f.update(bigcode_fields(raw))
    elif mt == "falcon":
        f.update(falcon_fields(raw))
    elif mt == "phimoe":
        f["lm_head_bias"] = bool(raw.get("lm_head_bias", False))
    elif mt in GRANITE:
        f["embedding_multiplier"] = float(raw.get("embedding_multiplier", 1.0))
        f["residual_multiplier"] = float(raw.get("residual_multiplier", 1.0))
        f["attention_scale"] = float(raw.get("attention_multiplier", 1.0))
        f["logits_multiplier"] = 1.0 / float(raw.get("logits_scaling", 1.0))
    elif mt == "gpt_oss":
        f["attention_sinks"] = True
        f["hidden_act"] = "swigluoai"  # the experts' clamped SwiGLU (config's hidden_act unused)
        f["swiglu_limit"] = float(raw.get("swiglu_limit", 7.0))
        f["swiglu_alpha"] = float(raw.get("swiglu_alpha", 1.702))
    if mt in MOE:
        f.update(moe_fields(raw, num_layers))
    return f


def _gemma3_local_rope(raw: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    """Gemma 3's sliding layers: rope_parameters["sliding_attention"] (5.x) or
    rope_local_base_freq (4.x, no scaling)."""
    params = raw.get("rope_parameters")
    if isinstance(params, dict) and isinstance(params.get("sliding_attention"), dict):
        local = params["sliding_attention"]
        rope_type = local.get("rope_type", local.get("type", "default"))
        scaling = None if rope_type in (None, "default") else dict(local)
        return float(local.get("rope_theta", 10000.0)), scaling
    return float(raw.get("rope_local_base_freq", 10000.0)), None


def _olmo3_sliding_rope(raw: dict[str, Any]) -> tuple[float | None, dict[str, Any] | None]:
    """OLMo 3's sliding layers' RoPE where it differs from the full layers' (None: the same
    table). 5.x: ``rope_parameters["sliding_attention"]``. 4.x (``rope_theta`` and
    ``rope_scaling`` beside it): those are the full layers'; the sliding layers get plain
    RoPE at Olmo3Config's default theta 500000, as transformers reads such a file."""
    params = raw.get("rope_parameters")
    if isinstance(params, dict) and isinstance(params.get("sliding_attention"), dict):
        local = params["sliding_attention"]
        full = params.get("full_attention") or {}
        if local == full:
            return None, None
        rope_type = local.get("rope_type", local.get("type", "default"))
        scaling = None if rope_type in (None, "default") else dict(local)
        return float(local.get("rope_theta", 500000.0)), scaling
    scaling = raw.get("rope_scaling")
    scaled = isinstance(scaling, dict) and scaling.get(
        "rope_type", scaling.get("type", "default")
    ) not in (None, "default")
    if not scaled and float(raw.get("rope_theta", 500000.0)) == 500000.0:
        return None, None
    return 500000.0, None


def _o_proj_bias(raw: dict[str, Any]) -> bool:
    mt = raw.get("model_type")
    if mt in ALWAYS_BIASED:
        return True
    if mt == "ernie4_5":
        return _ernie_bias(raw)
    if mt == "seed_oss":
        return bool(raw.get("attention_out_bias", False))
    if mt == "starcoder2":
        return _starcoder2_bias(raw)
    if mt == "opt":
        return _opt_bias(raw)
    if mt == "gpt_neox":
        return bool(raw.get("attention_bias", True))
    return bool(raw.get("attention_bias")) and mt not in ("qwen2", *GLM)


def _starcoder2_bias(raw: dict[str, Any]) -> bool:
    """StarCoder 2's use_bias (true by default) biases every projection."""
    return raw.get("model_type") == "starcoder2" and bool(raw.get("use_bias", True))


def _opt_fields(raw: dict[str, Any], hidden: int) -> dict[str, Any]:
    pre_norm = raw.get("do_layer_norm_before", True)
    proj = int(raw.get("word_embed_proj_dim") or hidden)
    return {
        "norm_layout": "opt" if pre_norm else "opt_post",
        # OPTDecoder has a final norm only while the layers' norms come first.
        "final_norm": bool(pre_norm) and not raw.get("_remove_final_layer_norm", False),
        "word_embed_proj_dim": 0 if proj == hidden else proj,
        "learned_positions": True,
        "learned_position_offset": 2,  # OPTLearnedPositionalEmbedding's offset
    }


def _opt_bias(raw: dict[str, Any]) -> bool:
    """OPT's enable_bias (true by default) biases every projection."""
    return raw.get("model_type") == "opt" and bool(raw.get("enable_bias", True))


def _ernie_bias(raw: dict[str, Any]) -> bool:
    return raw.get("model_type") == "ernie4_5" and bool(raw.get("use_bias"))


def _partial_rotary(raw: dict[str, Any], default: float = 1.0) -> float:
    params = raw.get("rope_parameters")
    if isinstance(params, dict) and "partial_rotary_factor" in params:
        return float(params["partial_rotary_factor"])
    return float(raw.get("partial_rotary_factor", default))


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)
