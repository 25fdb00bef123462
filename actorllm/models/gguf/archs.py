"""What a GGUF file of each architecture beyond the Llama shape adds to config.json, read
as llama.cpp's converter (``convert_hf_to_gguf.py``) writes it and its graph
(``src/models/*.cpp``) runs it; ``config.py`` reads the keys every architecture shares.

* phi3: Llama's shape; q/k/v stored fused as ``attn_qkv`` and gate/up as ``ffn_up``
  ``[2I, H]`` (read whole into our fused linears); ``rope_factors_long`` / ``_short``
  (LongRoPE) are refused in ``config.py``.
* gemma2: GELU-tanh MLP, Gemma's four norms, ``attn_logit_softcapping`` /
  ``final_logit_softcapping``, every other layer sliding over ``attention.sliding_window``
  (or as ``attention.sliding_window_pattern`` says, for both Gemmas).
* gemma3: no soft-capping, per-head q/k norms, one full layer in six (llama.cpp's
  default), the sliding layers' RoPE base ``rope.freq_base_swa`` (10000 where the file has
  none) without scaling (``rope.freq_base`` and ``rope.scaling`` are the full layers').
  For both Gemmas the converter stores every
  ``*norm.weight`` with 1 added (the ``(1 + w)`` RMSNorm folded in, :data:`NORM_PLUS_ONE`:
  the loader subtracts it, as transformers' GGUF reader does), and the attention scale is
  ``head_dim ** -0.5``, ``(hidden / heads) ** -0.5`` for the 27B models (llama.cpp's rule,
  by their layer count: the file has no ``query_pre_attn_scalar``).
* stablelm: LayerNorms with biases (``attention.layer_norm_epsilon``), RoPE on
  ``rope.dimension_count`` of each head, q/k/v biases when the file has them, the
  parallel residual when it has no ``ffn_norm``; its per-head q/k LayerNorms
  (``attn_q_norm``, StableLM 2 12B) are refused.
* starcoder2: LayerNorms with biases, an un-gated GELU-tanh MLP (``ffn_up`` / ``ffn_down``,
  our ``c_fc`` / ``c_proj``), biases on every projection, a window on every layer when
  the file has one (the converter writes none, and llama.cpp applies none).
* gpt2: learned positions (``position_embd``), fused ``attn_qkv`` (stored as ``nn.Linear``
  rows: the converter transposed HF's ``Conv1D``), GELU-tanh; our names are looked up
  under HF's (:func:`hf_name`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from actorllm.models.family_names import hf_module_name

Key = Callable[[str], Any]  # {arch}.name -> the value, or None

# GGUF architecture -> (HF architecture, model_type).
ARCHITECTURES = {
    "llama": ("LlamaForCausalLM", "llama"),
    "qwen2": ("Qwen2ForCausalLM", "qwen2"),
    "qwen3": ("Qwen3ForCausalLM", "qwen3"),
    "qwen3moe": ("Qwen3MoeForCausalLM", "qwen3_moe"),
    "qwen2moe": ("Qwen2MoeForCausalLM", "qwen2_moe"),
    "phi3": ("Phi3ForCausalLM", "phi3"),
    "gemma2": ("Gemma2ForCausalLM", "gemma2"),
    "gemma3": ("Gemma3ForCausalLM", "gemma3_text"),
    "stablelm": ("StableLmForCausalLM", "stablelm"),
    "starcoder2": ("Starcoder2ForCausalLM", "starcoder2"),
    "gpt2": ("GPT2LMHeadModel", "gpt2"),
}
# The converter adds 1 to these architectures' norm weights.
NORM_PLUS_ONE = frozenset({"gemma2", "gemma3"})
# Rotary on part of each head (rope.dimension_count < head size) is what these run.
PARTIAL_ROTARY = frozenset({"stablelm"})
# Layer counts of the 27B Gemmas, whose attention scale llama.cpp takes from hidden / heads.
_GEMMA_27B_LAYERS = {"gemma2": 46, "gemma3": 62}
_GELU_TANH = "gelu_pytorch_tanh"
# llama.cpp's sliding-window period where the file names none: one full layer in n.
_SWA_PERIOD = {"gemma2": 2, "gemma3": 6}
# The architectures whose sliding_window_pattern is read; others refuse one.
SWA_PATTERN = frozenset(_SWA_PERIOD)


class ArchError(ValueError):
    """A feature of the file's architecture not run here (config.py's GGUFError wraps it)."""


def _gemma(arch: str, key: Key, base: dict[str, Any]) -> dict[str, Any]:
    layers, hidden, heads = (
        base["num_hidden_layers"],
        base["hidden_size"],
        base["num_attention_heads"],
    )
    scalar = hidden // heads if layers == _GEMMA_27B_LAYERS[arch] else base["head_dim"]
    return {"hidden_activation": _GELU_TANH, "hidden_act": _GELU_TANH,
            "query_pre_attn_scalar": scalar, **_window(key),
            "layer_types": _layer_types(key, layers, _SWA_PERIOD[arch])}  # fmt: skip


def _layer_types(key: Key, layers: int, period: int) -> list[str]:
    """Which layers slide: ``attention.sliding_window_pattern`` as llama.cpp reads it (a
    period ``n``: layer ``i`` slides unless ``i % n == n - 1``; or one bool a layer), the
    architecture's fixed period where the file has none."""
    pattern = key("attention.sliding_window_pattern")
    if isinstance(pattern, list):
        if len(pattern) != layers:
            raise ArchError(f"GGUF attention.sliding_window_pattern has {len(pattern)} "
                            f"entries for {layers} layers")  # fmt: skip
        slides = [bool(p) for p in pattern]
    else:
        n = period if pattern is None else int(pattern)
        slides = [n == 0 or i % n < n - 1 for i in range(layers)]  # 0: every layer
    return ["sliding_attention" if s else "full_attention" for s in slides]


def gemma2(key: Key, names: set[str], base: dict[str, Any]) -> dict[str, Any]:
    def cap(name: str) -> float | None:
        value = key(name)
        return None if value is None else float(value)

    return _gemma("gemma2", key, base) | {
        "attn_logit_softcapping": cap("attn_logit_softcapping"),
        "final_logit_softcapping": cap("final_logit_softcapping"),
    }


def gemma3(key: Key, names: set[str], base: dict[str, Any]) -> dict[str, Any]:
    swa_base = key("rope.freq_base_swa")  # newer llama.cpp files; 10000 is its default
    local = {"rope_type": "default", "rope_theta": 10000.0 if swa_base is None else float(swa_base)}
    return _gemma("gemma3", key, base) | {
        "rope_parameters": {"full_attention": base["rope_parameters"], "sliding_attention": local},
        "attn_logit_softcapping": None,
        "final_logit_softcapping": None,
    }


def _window(key: Key) -> dict[str, Any]:
    """``sliding_window`` where the file has one (else the family's default stands)."""
    window = key("attention.sliding_window")
    return {} if window is None else {"sliding_window": int(window)}


def phi3(key: Key, names: set[str], base: dict[str, Any]) -> dict[str, Any]:
    return _window(key)


def _layer_norm_eps(key: Key) -> float:
    eps = key("attention.layer_norm_epsilon")
    return 1e-5 if eps is None else float(eps)


def stablelm(key: Key, names: set[str], base: dict[str, Any]) -> dict[str, Any]:
    if "blk.0.attn_q_norm.weight" in names:
        raise ArchError("GGUF stablelm per-head q/k LayerNorms (attn_q_norm) are not supported")
    return {
        "layer_norm_eps": _layer_norm_eps(key),
        "use_qkv_bias": "blk.0.attn_q.bias" in names,
        "attention_bias": False,  # Llama's key would give o_proj a bias too
        "use_parallel_residual": "blk.0.ffn_norm.weight" not in names,
        "qk_layernorm": False,
    }


def starcoder2(key: Key, names: set[str], base: dict[str, Any]) -> dict[str, Any]:
    return {
        "norm_epsilon": _layer_norm_eps(key),
        "use_bias": "blk.0.attn_q.bias" in names,
        "hidden_act": _GELU_TANH,
        **_window(key),
    }


def gpt2(key: Key, names: set[str], base: dict[str, Any]) -> dict[str, Any]:
    return {
        "n_inner": base["intermediate_size"],  # GPT-2's config would take 4 * hidden
        "layer_norm_epsilon": _layer_norm_eps(key),
        "activation_function": "gelu_new",
    }


def hf_name(arch: str, ours: str) -> str:
    """``ours`` as the HF checkpoint names it, which gguf's tensor-name map knows (the
    family's renames, ``models/family_names.py``: GPT-2's ``model.layers.0.self_attn.
    qkv_proj.weight`` -> ``transformer.h.0.attn.c_attn.weight``; the same name where the
    family's names are ours)."""
    model_type = ARCHITECTURES[arch][1]
    module, _, leaf = ours.rpartition(".")
    if leaf in ("weight", "bias"):
        return f"{hf_module_name(model_type, module)}.{leaf}"
    return hf_module_name(model_type, ours)


FIELDS: dict[str, Callable[[Key, set[str], dict[str, Any]], dict[str, Any]]] = {
    "phi3": phi3, "gemma2": gemma2, "gemma3": gemma3, "stablelm": stablelm,
    "starcoder2": starcoder2, "gpt2": gpt2,
}  # fmt: skip
