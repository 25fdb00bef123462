"""The Mixture-of-Experts families' config switches (``models/families.py`` calls
:func:`moe_fields` for them): how many experts, how many a token goes to, how wide each
is, which layers are sparse and how the router's weights are formed (``models/moe.py``).

    >>> f = moe_fields({"model_type": "mixtral", "num_local_experts": 8,
    ...     "intermediate_size": 32}, num_layers=2)
    >>> f["num_experts"], f["num_experts_per_tok"], f["norm_topk_prob"], f["sparsemixer_eps"]
    (8, 2, True, None)
"""

from __future__ import annotations

from typing import Any

MOE = ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "gpt_oss", "granitemoe", "phimoe")


def moe_fields(raw: dict[str, Any], num_layers: int) -> dict[str, Any]:
    mt = raw["model_type"]
    # Mixtral (and transformers 5's Qwen3-MoE) say num_local_experts, the others num_experts.
    num_experts = int(raw.get("num_local_experts") or raw.get("num_experts") or 0)
    if mt.startswith("qwen"):
        only_dense = set(raw.get("mlp_only_layers") or [])
        step = int(raw.get("decoder_sparse_step") or 1)
        layers = [i not in only_dense and (i + 1) % step == 0 for i in range(num_layers)]
        inter = int(raw["moe_intermediate_size"])
    else:  # Mixtral, OLMoE, gpt-oss: every layer is sparse, experts intermediate_size wide
        layers = [True] * num_layers
        inter = int(raw["intermediate_size"])
    return {
        "num_experts": num_experts,
        "num_experts_per_tok": int(raw.get("num_experts_per_tok") or 2),
        "moe_intermediate_size": inter,
        # Mixtral always renormalises its top-k weights, gpt-oss and GraniteMoE take the
        # softmax of the top-k logits (the same thing); the others say so in the config.
        "norm_topk_prob": mt in ("mixtral", "gpt_oss", "granitemoe")
        or bool(raw.get("norm_topk_prob", False)),
        "moe_bias": mt == "gpt_oss",
        "sparsemixer_eps": float(raw.get("router_jitter_noise", 0.01)) if mt == "phimoe" else None,
        "shared_expert_intermediate_size": int(raw.get("shared_expert_intermediate_size") or 0)
        if mt == "qwen2_moe"
        else 0,
        "moe_layers": layers if num_experts else [False] * num_layers,
    }
