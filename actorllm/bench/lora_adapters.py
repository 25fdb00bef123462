"""Random LoRA adapters of a bench model, in PEFT's format (what ``--lora-adapters`` and
``bench chaos --lora`` serve): rank ``r``, every attention and MLP projection of every
layer, seeded. Shapes come from the model's ``config.json`` (Llama-like families; MoE
models are refused: their MLP adapters would be expert adapters, which are not served).

    paths = random_adapters(model_dir, tmp_dir, count=4, rank=16)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def projection_shapes(config: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """{HF projection name: (out_features, in_features)} of one decoder layer."""
    if any(k in config for k in ("num_experts", "num_local_experts", "n_routed_experts")):
        raise ValueError("random bench adapters: MoE models are not supported (expert adapters)")
    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    kv = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    inter = int(config["intermediate_size"])
    return {
        "q_proj": (heads * head_dim, hidden),
        "k_proj": (kv * head_dim, hidden),
        "v_proj": (kv * head_dim, hidden),
        "o_proj": (hidden, heads * head_dim),
        "gate_proj": (inter, hidden),
        "up_proj": (inter, hidden),
        "down_proj": (hidden, inter),
    }


def random_adapters(
    model_dir: str | Path, directory: str | Path, *, count: int, rank: int, seed: int = 0
) -> list[Path]:
    """Write ``count`` adapters ``directory/lora{i}`` of the model at ``model_dir``; returns
    their paths. A and B are random (PEFT starts B at zero, which changes nothing), small
    enough that outputs stay in range; ``lora_alpha = 2 r``."""
    import torch
    from safetensors.torch import save_file

    if count < 1 or rank < 1:
        raise ValueError(f"random adapters: count and rank must be >= 1, got {count}, {rank}")
    config = json.loads((Path(model_dir) / "config.json").read_text())
    shapes = projection_shapes(config)
    layers = int(config["num_hidden_layers"])
    paths = []
    for i in range(count):
        gen = torch.Generator().manual_seed(seed * 1000 + i)
        tensors: dict[str, torch.Tensor] = {}
        for layer in range(layers):
            for proj, (n_out, n_in) in shapes.items():
                part = "self_attn" if proj in PROJECTIONS[:4] else "mlp"
                key = f"base_model.model.model.layers.{layer}.{part}.{proj}"
                a = torch.randn(rank, n_in, generator=gen) * (0.3 / n_in**0.5)
                b = torch.randn(n_out, rank, generator=gen) * (0.3 / rank**0.5)
                tensors[f"{key}.lora_A.weight"] = a.contiguous()
                tensors[f"{key}.lora_B.weight"] = b.contiguous()
        path = Path(directory) / f"lora{i}"
        path.mkdir(parents=True, exist_ok=True)
        save_file(tensors, str(path / "adapter_model.safetensors"))
        cfg = {
            "peft_type": "LORA",
            "r": rank,
            "lora_alpha": 2 * rank,
            "target_modules": list(PROJECTIONS),
            "bias": "none",
            "base_model_name_or_path": str(model_dir),
            "task_type": "CAUSAL_LM",
        }
        (path / "adapter_config.json").write_text(json.dumps(cfg, indent=2))
        paths.append(path)
    return paths
