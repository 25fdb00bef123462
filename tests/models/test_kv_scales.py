"""KV cache scales read from a checkpoint (models/kv_scales.py), under both of vLLM's
spellings, onto the attention layer of the same index."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from actorllm.kernels.ops import get_ops
from actorllm.models.attention import PagedAttention
from actorllm.models.kv_scales import KVScaleError, apply_kv_scales, read_kv_scales


class _Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.self_attn = nn.Module()
        self.self_attn.attn = PagedAttention(get_ops("torch"), 2, 1, 8, None)


def _model(layers: int) -> nn.Module:
    model = nn.Module()
    model.model = nn.Module()
    model.model.layers = nn.ModuleList(_Layer() for _ in range(layers))
    return model


def _file(path: Path, tensors: dict[str, torch.Tensor]) -> list[Path]:
    save_file(tensors, str(path), metadata={"format": "pt"})
    return [path]


def test_both_spellings_reach_their_layers_and_the_rest_keep_one(tmp_path: Path) -> None:
    files = _file(tmp_path / "a.safetensors", {
        "model.layers.0.self_attn.k_scale": torch.tensor(0.5),
        "model.layers.0.self_attn.v_scale": torch.tensor([2.0]),
        "model.layers.2.self_attn.k_proj.output_scale": torch.tensor([3.0]),
        "model.layers.2.self_attn.v_proj.output_scale": torch.tensor(4.0, dtype=torch.bfloat16),
        "model.layers.2.self_attn.k_proj.weight": torch.zeros(2, 2),
    })  # fmt: skip
    model = _model(3)
    assert apply_kv_scales(model, files) == 2
    got = [(m.self_attn.attn.k_scale, m.self_attn.attn.v_scale) for m in model.model.layers]
    assert got == [(0.5, 2.0), (1.0, 1.0), (3.0, 4.0)]


@pytest.mark.parametrize("bad", [torch.tensor([1.0, 2.0]), torch.tensor(0.0), torch.tensor(-1.0)])
def test_a_scale_that_is_not_one_positive_number_is_refused(
    tmp_path: Path, bad: torch.Tensor
) -> None:
    files = _file(tmp_path / "b.safetensors", {"model.layers.1.self_attn.v_scale": bad})
    with pytest.raises(KVScaleError, match=r"kv_cache_dtype: model\.layers\.1\.self_attn\.v_scale"):
        read_kv_scales(files)


def test_scales_are_read_from_a_pytorch_bin_too(tmp_path: Path) -> None:
    f = tmp_path / "pytorch_model.bin"
    torch.save({"model.layers.1.self_attn.k_scale": torch.tensor(0.25), "x": torch.ones(2)}, f)
    assert read_kv_scales([f]) == {(1, "k"): 0.25}
