"""Model shapes for the GPU check, as config.json only (random weights: load_format dummy),
and a device-side dummy fill: the loader's own fill draws on the host so that every device
gets the same weights, which for an 8B model costs minutes of a 15-minute lease."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

SHAPES: dict[str, dict[str, Any]] = {
    # Qwen3-0.6B's config.json (sizes only)
    "qwen3-0.6b": dict(
        family="qwen3",
        hidden_size=1024,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=3072,
        vocab_size=151936,
        tie_word_embeddings=True,
    ),
    # Llama-3-8B's
    "llama-3-8b": dict(
        family="llama",
        hidden_size=4096,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=14336,
        vocab_size=128256,
        tie_word_embeddings=False,
        rope_theta=500000.0,
    ),
    # the dry run's CPU twin
    "tiny": dict(
        family="qwen3",
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=128,
        vocab_size=256,
        tie_word_embeddings=True,
    ),
}


def config_dir(work: Path, name: str) -> Path:
    import transformers

    spec = dict(SHAPES[name])
    family = spec.pop("family")
    cls = transformers.Qwen3Config if family == "qwen3" else transformers.LlamaConfig
    arch = "Qwen3ForCausalLM" if family == "qwen3" else "LlamaForCausalLM"
    cfg = cls(
        architectures=[arch],
        max_position_embeddings=8192,
        rms_norm_eps=1e-6,
        eos_token_id=2,
        bos_token_id=1,
        **spec,
    )
    path = work / name
    path.mkdir(parents=True, exist_ok=True)
    cfg.save_pretrained(path)
    return path


def device_dummy_fill(model: Any, seed: int) -> None:
    """The loader's dummy values (matrices N(0, 0.02), norms 1 - offset, biases 0), drawn
    on the parameters' device."""
    dev = next(model.parameters()).device
    gen = torch.Generator(device=dev).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.data.normal_(0.0, 0.02, generator=gen)
            elif name.endswith(".weight"):
                p.data.fill_(1.0 - model.config.norm_offset)
            else:
                p.data.zero_()


def fast_dummy_weights() -> None:
    """Make ``load_format="dummy"`` fill on the device for the rest of this process."""
    from actorllm.models import loader

    loader.init_dummy_weights = device_dummy_fill  # type: ignore[assignment]
