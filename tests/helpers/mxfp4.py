"""MXFP4 gpt-oss checkpoints at tiny scale: a random gpt-oss whose experts are quantized to
MXFP4 the way OpenAI ships them (``{proj}_blocks`` / ``{proj}_scales``, quant_method mxfp4),
beside the same model with those experts dequantized back to floats (the reference)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from actorllm.models.quant.mxfp4 import BLOCK, FP4_VALUES, SCALE_BIAS, dequantize_mxfp4
from tests.helpers.models import make_tiny_checkpoint


def quantize_mxfp4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w [..., cols] -> (blocks [..., cols / 32, 16] uint8, scales [..., cols / 32] uint8):
    each 32 values scaled by the power of two that brings their largest to <= 6, then the
    nearest e2m1 code, two codes a byte, the low nibble first."""
    g = w.float().reshape(*w.shape[:-1], -1, BLOCK)  # [..., G, 32]
    amax = g.abs().amax(-1)  # [..., G]
    exp = torch.where(amax > 0, torch.ceil(torch.log2(amax / 6.0)), torch.zeros_like(amax))
    scaled = g / torch.exp2(exp).unsqueeze(-1)
    mags = torch.tensor(FP4_VALUES[:8])
    code = (scaled.abs().unsqueeze(-1) - mags).abs().argmin(-1)  # [..., G, 32] in 0..7
    code = code + 8 * (scaled < 0).long()
    blocks = (code[..., 0::2] | (code[..., 1::2] << 4)).to(torch.uint8)  # [..., G, 16]
    return blocks, (exp + SCALE_BIAS).to(torch.uint8)


def make_mxfp4_gpt_oss(directory: Path, **config: object) -> tuple[Path, Path]:
    """(the MXFP4 checkpoint, the same model with its experts dequantized to float32)."""
    base = make_tiny_checkpoint(directory / "base", "gpt_oss", **config)  # type: ignore[arg-type]
    tensors = load_file(str(base / "model.safetensors"))
    quant: dict[str, torch.Tensor] = {}
    dense: dict[str, torch.Tensor] = {}
    for name, t in tensors.items():
        if name.endswith((".experts.gate_up_proj", ".experts.down_proj")):
            blocks, scales = quantize_mxfp4(t.transpose(1, 2))  # rows: the outputs
            quant[f"{name}_blocks"], quant[f"{name}_scales"] = blocks, scales
            dense[name] = dequantize_mxfp4(blocks, scales, torch.float32).transpose(1, 2)
        else:
            quant[name] = dense[name] = t
    out = []
    for kind, sd in (("mxfp4", quant), ("dequantized", dense)):
        path = directory / kind
        shutil.copytree(base, path)
        (path / "model.safetensors").unlink()
        save_file({k: v.contiguous() for k, v in sd.items()}, str(path / "model.safetensors"))
        out.append(path)
    cfg_file = out[0] / "config.json"
    cfg = json.loads(cfg_file.read_text())
    cfg["quantization_config"] = {
        "quant_method": "mxfp4",
        "modules_to_not_convert": [
            "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
            "lm_head",
        ],
    }  # fmt: skip
    cfg_file.write_text(json.dumps(cfg))
    return out[0], out[1]
