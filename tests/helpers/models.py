"""Tiny random Hugging Face checkpoints, built in a temp dir, for parity and loader tests.

    path = make_tiny_checkpoint(tmp_path, "qwen3", num_kv_heads=1)
    hf = load_hf_model(path)          # transformers' own implementation, float32, eager

Every family is small enough (2 layers, hidden 64, vocab 128) to run in milliseconds on CPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import torch

Family = Literal["llama", "llama3", "mistral", "qwen2", "qwen3"]

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
    raise ValueError(f"unknown family {family!r}")


def make_tiny_checkpoint(
    directory: str | Path,
    family: Family = "llama",
    *,
    seed: int = 0,
    max_shard_size: str | None = None,
    dtype: torch.dtype = torch.float32,
    **config: Any,
) -> Path:
    """Save a random ``family`` model (safetensors) into ``directory``; returns the path.

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
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                std = 0.5 if p.dim() == 1 else 1.0 / p.shape[-1] ** 0.5 * 2
                p.copy_(std * torch.randn(p.shape, generator=gen))
    model = model.to(dtype)
    kwargs: dict[str, Any] = {}
    if max_shard_size is not None:
        kwargs["max_shard_size"] = max_shard_size
    model.save_pretrained(path, **kwargs)
    return path


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
