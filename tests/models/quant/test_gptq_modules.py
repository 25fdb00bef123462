"""GPTQ's quantized modules are read from the tensors' dtypes: safetensors headers, or a
PyTorch .bin checkpoint's tensors."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file

from actorllm.models.quant.gptq_modules import quantized_modules

STATE = {
    "model.layers.0.mlp.down_proj.qweight": torch.zeros(2, 4, dtype=torch.int32),
    "model.layers.0.mlp.down_proj.scales": torch.ones(1, 4, dtype=torch.float16),
    "model.layers.0.self_attn.q_proj.weight": torch.zeros(4, 4, dtype=torch.float16),
}


def test_non_float_tensors_mark_their_modules_in_either_kind(tmp_path: Path) -> None:
    (tmp_path / "st").mkdir()
    save_file(STATE, str(tmp_path / "st" / "model.safetensors"))
    (tmp_path / "pt").mkdir()
    torch.save(STATE, tmp_path / "pt" / "pytorch_model.bin")
    want = ["model.layers.0.mlp.down_proj"]
    assert quantized_modules(tmp_path / "st") == quantized_modules(tmp_path / "pt") == want
    assert quantized_modules(tmp_path / "absent") == []
