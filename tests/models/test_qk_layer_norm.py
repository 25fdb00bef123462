"""The q/k LayerNorms against transformers' own modules: Phi's shared nn.LayerNorm,
Cohere's CohereLayerNorm over [H, D], StableLM's LayerNorm per head."""

from __future__ import annotations

import pytest
import torch

from actorllm.models.qk_layer_norm import QKLayerNorm

T, H, D, EPS = 5, 3, 8, 1e-5


def _randomize(module: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g))


def test_phi_one_norm_for_every_head() -> None:
    hf = torch.nn.LayerNorm(D, eps=EPS)
    ours = QKLayerNorm("layer", H, D, EPS)
    _randomize(hf, 1)
    ours.load_state_dict(hf.state_dict())
    x = torch.randn(T, H, D)
    torch.testing.assert_close(ours(x), hf(x))


def test_cohere_a_weight_per_head() -> None:
    from transformers.models.cohere.modeling_cohere import CohereLayerNorm

    hf = CohereLayerNorm(hidden_size=(H, D), eps=EPS)
    ours = QKLayerNorm("layer_heads", H, D, EPS)
    _randomize(hf, 2)
    ours.load_state_dict(hf.state_dict())
    x = torch.randn(T, H, D).bfloat16()  # float32 inside, rounded once, as HF's
    torch.testing.assert_close(ours(x), hf(x))


def test_stablelm_one_norm_per_head() -> None:
    from transformers.models.stablelm.modeling_stablelm import StableLmLayerNormPerHead

    hf = StableLmLayerNormPerHead(D, H, eps=EPS)
    ours = QKLayerNorm("layer_head_list", H, D, EPS)
    _randomize(hf, 3)
    ours.load_state_dict(hf.state_dict())  # norms.{h}.weight: the same names
    x = torch.randn(T, H, D)
    want = hf(x.transpose(0, 1)[None])[0].transpose(0, 1)  # HF's [B, H, T, D]
    torch.testing.assert_close(ours(x), want)


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown q/k LayerNorm kind 'rms'"):
        QKLayerNorm("rms", H, D, EPS)
