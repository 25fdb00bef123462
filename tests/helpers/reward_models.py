"""Tiny random reward models (vLLM's Qwen2ForRewardModel / Qwen2ForProcessRewardModel
layout) and their reference logits from transformers' Qwen2Model and the head in torch."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from actorllm.demo import demo_tokenizer_path
from tests.helpers.models import tiny_config


def reward_checkpoint(path: Path, architecture: str, num_labels: int) -> str:
    """A random Qwen2 decoder with the reward head, saved as vLLM's reward checkpoints
    are (``model.*`` beside ``score.0.*`` and ``score.2.*``, no lm_head)."""
    import safetensors.torch
    import transformers

    cfg = tiny_config("qwen2", vocab_size=4096, num_labels=num_labels, pad_token_id=0)
    cfg.architectures = [architecture]
    torch.manual_seed(0)
    body = transformers.Qwen2Model(cfg)
    weights = {f"model.{k}": v.contiguous() for k, v in body.state_dict().items()}
    h = cfg.hidden_size
    head = {"score.0.weight": (h, h), "score.0.bias": (h,),
            "score.2.weight": (num_labels, h), "score.2.bias": (num_labels,)}  # fmt: skip
    weights |= {k: torch.randn(shape) * 0.3 for k, shape in head.items()}
    cfg.save_pretrained(path)
    safetensors.torch.save_file(weights, str(path / "model.safetensors"), metadata={"format": "pt"})
    for f in demo_tokenizer_path().iterdir():
        shutil.copy(f, path / f.name)
    return str(path)


def reference_logits(path: str, ids: list[int]) -> torch.Tensor:
    """transformers' Qwen2Model and the head in plain torch: [n, num_labels] logits."""
    import safetensors.torch
    import transformers

    cfg = transformers.AutoConfig.from_pretrained(path)
    body = transformers.Qwen2Model(cfg).eval()
    weights = safetensors.torch.load_file(str(Path(path) / "model.safetensors"))
    body.load_state_dict(
        {k[len("model.") :]: v for k, v in weights.items() if k.startswith("model.")}
    )
    with torch.no_grad():
        hidden = body(torch.tensor([ids])).last_hidden_state[0]  # [n, H]
        x = torch.relu(hidden @ weights["score.0.weight"].t() + weights["score.0.bias"])
        return x @ weights["score.2.weight"].t() + weights["score.2.bias"]  # [n, L]
