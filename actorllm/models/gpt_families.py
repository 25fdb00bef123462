"""The config.json dialect of the families that spell their sizes as GPT-2 does (``n_embd``,
``n_layer``, ``n_head``, ``n_positions``, ``n_inner``, ``layer_norm_epsilon``,
``activation_function``): GPT-2, GPT-J and GPTBigCode. ``models/families.py`` calls these
for them.

* gpt2: GPTBigCode's layer without multi-query (q | k | v in ``c_attn``), its projections
  ``Conv1D`` modules whose weights are stored [in, out] (transposed at load:
  ``family_names.TRANSPOSED``);

* gptj (GPT-J 6B): one LayerNorm with a bias, attention and MLP side by side on it
  (``norm_layout`` "parallel"), GPT-J's interleaved RoPE on the first ``rotary_dim`` lanes
  of each head, q/k/v/out without biases, a biased un-gated GELU MLP (``fc_in`` /
  ``fc_out``), a biased LM head, untied by default;
* gpt_bigcode (StarCoder 1, SantaCoder): GPT-2's layer (learned positions from row 0,
  pre-norm biased LayerNorms ``ln_1`` / ``ln_2``, biases everywhere, an un-gated GELU
  ``c_fc`` / ``c_proj`` MLP, tied) as ``nn.Linear`` weights, with ``multi_query`` (true by
  default): one KV head, ``c_attn`` rows q | k | v (our ``qkv_proj`` as it is); without it
  ``c_attn`` holds each head's q, k, v side by side, GPT-NeoX's ``qkv_head_major``.

    >>> raw = normalize_gpt_keys({"model_type": "gptj", "n_embd": 64, "n_layer": 2,
    ...     "n_head": 4, "rotary_dim": 8})
    >>> raw["hidden_size"], raw["intermediate_size"], raw["tie_word_embeddings"]
    (64, 256, False)
    >>> gptj_fields(raw)["partial_rotary_factor"]
    0.5
"""

from __future__ import annotations

from typing import Any

GPT_KEYS = ("gpt2", "gptj", "gpt_bigcode")
# transformers' tie_word_embeddings and activation_function where config.json leaves them
# out.
_TIED = {"gpt2": True, "gptj": False, "gpt_bigcode": True}
_ACTIVATION = {"gpt2": "gelu_new", "gptj": "gelu_new", "gpt_bigcode": "gelu_pytorch_tanh"}


def normalize_gpt_keys(raw: dict[str, Any]) -> dict[str, Any]:
    """GPT-2's key spellings -> the common ones (either spelling is read)."""
    mt = str(raw.get("model_type"))
    hidden = raw.get("n_embd", raw.get("hidden_size"))
    out = dict(raw)
    out.update(
        hidden_size=hidden,
        num_hidden_layers=raw.get("n_layer", raw.get("num_hidden_layers")),
        num_attention_heads=raw.get("n_head", raw.get("num_attention_heads")),
        max_position_embeddings=raw.get("n_positions", raw.get("max_position_embeddings")),
        intermediate_size=raw.get("n_inner") or (4 * hidden if hidden else None),
        rms_norm_eps=raw.get("layer_norm_epsilon", 1e-5),  # LayerNorm's eps
        hidden_act=raw.get("activation_function", _ACTIVATION[mt]),
        tie_word_embeddings=raw.get("tie_word_embeddings", _TIED[mt]),
    )
    if mt == "gpt_bigcode":
        heads = out["num_attention_heads"]
        out["num_key_value_heads"] = 1 if raw.get("multi_query", True) else heads
    return out


def gpt_problems(raw: dict[str, Any]) -> list[str]:
    """What these families' configs may ask for that is not run, by name."""
    mt = raw.get("model_type")
    problems = []
    if mt == "gpt2":
        for key in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"):
            if raw.get(key):
                problems.append(f"GPT-2 {key}=true is not supported")
        if raw.get("scale_attn_weights") is False:
            problems.append("GPT-2 scale_attn_weights=false is not supported")
        if raw.get("add_cross_attention"):
            problems.append("GPT-2 add_cross_attention=true is not supported")
    if mt == "gpt_bigcode":
        if raw.get("scale_attn_weights") is False:
            problems.append("GPTBigCode scale_attn_weights=false is not supported")
        if raw.get("add_cross_attention"):
            problems.append("GPTBigCode add_cross_attention=true is not supported")
    if mt == "gptj":
        rotary = raw.get("rotary_dim")
        if rotary is None or int(rotary) % 2 or int(rotary) <= 0:
            problems.append(f"GPT-J rotary_dim={rotary!r} is not supported (a positive even dim)")
    return problems


def bigcode_fields(raw: dict[str, Any]) -> dict[str, Any]:
    """The decoder switches of a GPTBigCode or GPT-2 config (their biases:
    ``ALWAYS_BIASED``)."""
    head_major = raw.get("model_type") == "gpt_bigcode" and not raw.get("multi_query", True)
    return {"learned_positions": True, "qkv_head_major": head_major}


def gptj_fields(raw: dict[str, Any]) -> dict[str, Any]:
    """The decoder switches of a GPT-J config (normalised keys)."""
    head_dim = int(raw["hidden_size"]) // int(raw["num_attention_heads"])
    return {
        "norm_layout": "parallel",
        "rope_interleaved": True,
        "partial_rotary_factor": int(raw["rotary_dim"]) / head_dim,
        "mlp_bias": True,
        "lm_head_bias": True,
    }
