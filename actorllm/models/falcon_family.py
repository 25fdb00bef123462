"""Falcon's config.json dialect (``models/families.py`` calls these for ``model_type``
"falcon"): which of its three attention layouts and three blocks a checkpoint has.

* ``new_decoder_architecture`` (Falcon-40B / 180B): ``num_kv_heads`` KV heads, and
  ``query_key_value`` grouped by KV head, each group's query heads then its key and value
  (``qkv_head_major``: rows [Hk, Hq / Hk + 2, D]); attention and MLP side by side, each on
  its own LayerNorm (``ln_attn`` / ``ln_mlp``, "parallel2") or, with
  ``num_ln_in_parallel_attn`` 1, on one (``input_layernorm``, "parallel");
* ``multi_query`` (Falcon-7B): one KV head, ``query_key_value`` rows q | k | v;
* neither: a KV head per query head, rows head by head ([H, 3, D], GPT-NeoX's layout).

Without the new architecture, ``parallel_attn`` runs attention and MLP side by side on one
``input_layernorm``, or in turn (``post_attention_layernorm`` before the MLP). RoPE (NeoX
halves) on every lane, ``bias`` on every projection, LayerNorms with biases, an un-gated
GELU ``dense_h_to_4h`` / ``dense_4h_to_h`` MLP, tied by default. ALiBi (``alibi``: the
Falcon-RW models) is refused by name: the attention kernels add no position bias.

    >>> raw = normalize_falcon_keys({"model_type": "falcon", "hidden_size": 64,
    ...     "n_head": 4, "n_layer": 2, "multi_query": True})
    >>> raw["num_attention_heads"], raw["num_key_value_heads"], raw["intermediate_size"]
    (4, 1, 256)
    >>> falcon_fields(raw)["norm_layout"]
    'parallel'
"""

from __future__ import annotations

from typing import Any


def normalize_falcon_keys(raw: dict[str, Any]) -> dict[str, Any]:
    """Falcon's key spellings (``n_head``, ``n_layer``, ``n_head_kv``, ``ffn_hidden_size``,
    ``layer_norm_epsilon``, ``activation``) -> the common ones."""
    heads = raw.get("num_attention_heads", raw.get("n_head"))
    hidden = raw.get("hidden_size")
    kv = raw.get("num_kv_heads", raw.get("n_head_kv")) or heads
    if not raw.get("new_decoder_architecture"):
        kv = 1 if raw.get("multi_query", True) else heads
    return {
        **raw,
        "num_attention_heads": heads,
        "num_hidden_layers": raw.get("num_hidden_layers", raw.get("n_layer")),
        "num_key_value_heads": kv,
        "intermediate_size": raw.get("ffn_hidden_size") or (4 * hidden if hidden else None),
        "rms_norm_eps": raw.get("layer_norm_epsilon", 1e-5),
        "hidden_act": raw.get("activation", "gelu"),
        "tie_word_embeddings": raw.get("tie_word_embeddings", True),
    }


def falcon_problems(raw: dict[str, Any]) -> list[str]:
    """What a Falcon config may ask for that is not run, by name."""
    problems = []
    if raw.get("alibi"):
        problems.append("Falcon alibi=true (ALiBi position biases) is not supported")
    if raw.get("new_decoder_architecture"):
        if not raw.get("parallel_attn", True):
            problems.append(
                "Falcon new_decoder_architecture with parallel_attn=false is not supported"
            )
        if raw.get("num_ln_in_parallel_attn") not in (None, 1, 2):
            problems.append(
                f"Falcon num_ln_in_parallel_attn={raw['num_ln_in_parallel_attn']!r} is not "
                "supported (1 or 2)"
            )
    return problems


def falcon_fields(raw: dict[str, Any]) -> dict[str, Any]:
    """The decoder switches of a Falcon config (normalised keys)."""
    new = bool(raw.get("new_decoder_architecture"))
    if new:
        two_norms = (raw.get("num_ln_in_parallel_attn") or 2) == 2
        layout = "parallel2" if two_norms else "parallel"
    else:
        layout = "parallel" if raw.get("parallel_attn", True) else "pre"
    bias = bool(raw.get("bias", False))
    return {
        "norm_layout": layout,
        "qkv_head_major": new or not raw.get("multi_query", True),
        "o_proj_bias": bias,
        "mlp_bias": bias,
    }
