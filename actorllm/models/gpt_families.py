"""The config.json dialect of the families that spell their sizes as GPT-2 does (``n_embd``,
``n_layer``, ``n_head``, ``n_positions``, ``n_inner``, ``layer_norm_epsilon``,
``activation_function``): GPT-2 and GPT-J. ``models/families.py`` calls these for them.

* gptj (GPT-J 6B): one LayerNorm with a bias, attention and MLP side by side on it
  (``norm_layout`` "parallel"), GPT-J's interleaved RoPE on the first ``rotary_dim`` lanes
  of each head, q/k/v/out without biases, a biased un-gated GELU MLP (``fc_in`` /
  ``fc_out``), a biased LM head, untied by default.

    >>> raw = normalize_gpt_keys({"model_type": "gptj", "n_embd": 64, "n_layer": 2,
    ...     "n_head": 4, "rotary_dim": 8})
    >>> raw["hidden_size"], raw["intermediate_size"], raw["tie_word_embeddings"]
    (64, 256, False)
    >>> gptj_fields(raw)["partial_rotary_factor"]
    0.5
"""

from __future__ import annotations

from typing import Any

GPT_KEYS = ("gpt2", "gptj")
# transformers' tie_word_embeddings and activation_function where config.json leaves them
# out.
_TIED = {"gpt2": True, "gptj": False}
_ACTIVATION = {"gpt2": "gelu_new", "gptj": "gelu_new"}


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
    return out


def gpt_problems(raw: dict[str, Any]) -> list[str]:
    """What these families' configs may ask for that is not run, by name."""
    mt = raw.get("model_type")
    problems = []
    if mt == "gpt2":
        if raw.get("scale_attn_by_inverse_layer_idx"):
            problems.append("GPT-2 scale_attn_by_inverse_layer_idx=true is not supported")
        if raw.get("scale_attn_weights") is False:
            problems.append("GPT-2 scale_attn_weights=false is not supported")
    if mt == "gptj":
        rotary = raw.get("rotary_dim")
        if rotary is None or int(rotary) % 2 or int(rotary) <= 0:
            problems.append(f"GPT-J rotary_dim={rotary!r} is not supported (a positive even dim)")
    return problems


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
