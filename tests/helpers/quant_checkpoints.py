"""Quantized checkpoints written in the exact on-disk layouts of GPTQ, AWQ and
compressed-tensors, from a tiny random model, each with its reference: the same model
whose linears hold the dequantized weights (so a correct engine gives the same tokens).

The packers here are written independently of ``actorllm/models/quant`` (plain shifts
over explicit index sets), so a wrong unpacking there cannot agree with them by accident.

    ref, quant = write_quantized(tmp_path, "gptq", bits=4, group_size=32, desc_act=True)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from tests.helpers.models import make_tiny_checkpoint

# Quantized linears, MoE experts included (Mixtral's w1 / w3 / w2), StarCoder 2's MLP
# (c_fc / c_proj), OPT's out_proj and fc1 / fc2, Phi's dense, GPT-NeoX's query_key_value
# and dense_*, GPT-J's fc_in / fc_out, GPTBigCode's c_attn; routers stay float.
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
           "w1", "w2", "w3", "c_fc", "c_proj", "out_proj", "fc1", "fc2", "dense",
           "query_key_value", "dense_h_to_4h", "dense_4h_to_h", "fc_in", "fc_out",
           "c_attn")  # fmt: skip
# The LM head under its checkpoint names (GPT-NeoX saves it as ``embed_out``).
HEADS = ("lm_head", "embed_out")
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


def _int32(v: torch.Tensor) -> torch.Tensor:
    """int64 holding 32-bit patterns -> int32 with the same bits."""
    v = v & 0xFFFFFFFF
    return torch.where(v >= 2**31, v - 2**32, v).to(torch.int32)


def quantize_groups(
    w: torch.Tensor, bits: int, group_size: int, sym: bool, g_idx: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """w [O, I] float32 -> (q [O, I] in [0, 2^bits), scales [O, G] float16, zeros [O, G]
    int) with input column i in group g_idx[i]."""
    o, i = w.shape
    groups = int(g_idx.max()) + 1
    top = 2**bits - 1
    q = torch.zeros(o, i, dtype=torch.int64)
    scales = torch.zeros(o, groups)
    zeros = torch.zeros(o, groups, dtype=torch.int64)
    for g in range(groups):
        cols = (g_idx == g).nonzero().flatten()
        part = w[:, cols]  # [O, gs]
        if sym:
            s = (part.abs().amax(dim=1) / (2 ** (bits - 1) - 1)).clamp(min=1e-6)
            z = torch.full((o,), 2 ** (bits - 1), dtype=torch.int64)
        else:
            lo, hi = part.amin(dim=1).clamp(max=0), part.amax(dim=1).clamp(min=0)
            s = ((hi - lo) / top).clamp(min=1e-6)
            z = torch.round(-lo / s).long().clamp(0, top)
        s = s.half().float()  # stored as float16, as quantizers write them
        q[:, cols] = (torch.round(part / s[:, None]).long() + z[:, None]).clamp(0, top)
        scales[:, g], zeros[:, g] = s, z
    return q, scales.half(), zeros


def dequantize(q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, g_idx: torch.Tensor):
    """The reference weight [O, I]: (q - zero) * scale of each column's group."""
    return (q - zeros[:, g_idx]).float() * scales.float()[:, g_idx]


def gptq_tensors(
    q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, g_idx: torch.Tensor, bits: int
) -> dict[str, torch.Tensor]:
    """GPTQ v1: qweight [I/pf, O] (input row r*pf + j in bits j*bits of row r), qzeros
    [G, O/pf] holding zero - 1 packed along columns, scales [G, O], g_idx [I]."""
    pf = 32 // bits
    qt = q.t()  # [I, O]
    qweight = torch.zeros(qt.shape[0] // pf, qt.shape[1], dtype=torch.int64)
    for j in range(pf):
        qweight |= qt[j::pf, :] << (bits * j)
    zt = (zeros - 1).t() & (2**bits - 1)  # [G, O], stored minus one
    qzeros = torch.zeros(zt.shape[0], zt.shape[1] // pf, dtype=torch.int64)
    for j in range(pf):
        qzeros |= zt[:, j::pf] << (bits * j)
    return {
        "qweight": _int32(qweight),
        "qzeros": _int32(qzeros),
        "scales": scales.t().contiguous(),
        "g_idx": g_idx.to(torch.int32),
    }


def awq_tensors(
    q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor
) -> dict[str, torch.Tensor]:
    """AWQ GEMM: qweight [I, O/8] and qzeros [G, O/8], nibble k of each int32 holding
    column AWQ_ORDER[k] of its 8; scales [G, O]."""

    def pack(v: torch.Tensor) -> torch.Tensor:  # [R, O] -> [R, O/8]
        out = torch.zeros(v.shape[0], v.shape[1] // 8, dtype=torch.int64)
        for k in range(8):
            out |= v[:, AWQ_ORDER[k] :: 8] << (4 * k)
        return _int32(out)

    return {
        "qweight": pack(q.t()),
        "qzeros": pack(zeros.t()),
        "scales": scales.t().contiguous(),
    }


def pack_quantized_tensors(q: torch.Tensor, scales: torch.Tensor, bits: int) -> dict[str, Any]:
    """compressed-tensors pack-quantized: weight_packed [O, I/pf] (input j*... in bits
    j*bits, values offset by 2^(bits-1)), weight_scale [O, G], weight_shape [2]."""
    pf = 32 // bits
    packed = torch.zeros(q.shape[0], q.shape[1] // pf, dtype=torch.int64)
    for j in range(pf):
        packed |= q[:, j::pf] << (bits * j)
    return {
        "weight_packed": _int32(packed),
        "weight_scale": scales.contiguous(),
        "weight_shape": torch.tensor(list(q.shape), dtype=torch.int64),
    }


def write_quantized(
    directory: Path,
    method: str,
    *,
    family: str = "qwen3",
    bits: int = 4,
    group_size: int = 32,
    sym: bool = False,
    desc_act: bool = False,
    scale_error: float = 1.0,
    wrong_module: str = "",
    seed: int = 0,
    block: tuple[int, int] | None = None,
    lm_head: bool = False,
    **config: Any,
) -> tuple[Path, Path]:
    """(reference checkpoint, quantized checkpoint) under ``directory``. ``method``: gptq,
    awq, w4a16 (compressed-tensors pack-quantized) or w8a8 (compressed-tensors int8).
    ``scale_error`` multiplies one stored scale tensor (a deliberately wrong checkpoint):
    the first of a module whose name contains ``wrong_module``. ``lm_head`` (GPTQ, AWQ):
    the head stored quantized too (``lm_head: true``; the model must not tie it)."""
    base = make_tiny_checkpoint(directory / "base", family, seed=seed, **config)  # type: ignore[arg-type]
    raw = load_file(str(base / "model.safetensors"))
    cfg = json.loads((base / "config.json").read_text())
    ref: dict[str, torch.Tensor] = {}
    quant: dict[str, torch.Tensor] = {}
    gen = torch.Generator().manual_seed(seed + 1)
    wrong_done = False
    orders: dict[str, torch.Tensor] = {}
    for name, w in raw.items():
        module = name.removesuffix(".weight")
        linear = module.rsplit(".", 1)[-1] in LINEARS or (lm_head and module in HEADS)
        if not (name.endswith(".weight") and linear):
            ref[name] = quant[name] = w
            continue
        conv1d = family == "gpt2"  # Conv1D [in, out]: quantizers pack it as [out, in]
        if conv1d:
            w = w.t()
        i = w.shape[1]
        err = scale_error if not wrong_done and wrong_module in module else 1.0
        wrong_done = wrong_done or wrong_module in module
        if method == "ct_fp8":  # compressed-tensors FP8_DYNAMIC: a scale per output row
            scale = (w.abs().amax(dim=1, keepdim=True) / 448).clamp(min=1e-8)  # [O, 1]
            w8 = (w / scale).to(torch.float8_e4m3fn)
            ref[name] = w8.float() * scale
            quant[name] = w8
            quant[f"{module}.weight_scale"] = scale * err
            continue
        if method == "fp8":
            w8, scale = _fp8(w, block)
            ref[name] = w8.float() * _expand(scale, w.shape, block)
            quant[name] = w8
            key = "weight_scale" if block is None else "weight_scale_inv"
            quant[f"{module}.{key}"] = scale * err
            continue
        if method == "w8a8":
            s = (w.abs().amax(dim=1, keepdim=True) / 127).clamp(min=1e-8)  # [O, 1] float32
            q8 = torch.round(w / s).clamp(-128, 127).to(torch.int8)
            ref[name] = q8.float() * s
            quant[name] = q8
            quant[f"{module}.weight_scale"] = s * err
            continue
        gs = i if group_size == -1 else group_size
        if desc_act:
            # The quantizer's column order comes from the input's statistics: q/k/v (and
            # gate/up) share their input, so they share it.
            leaf = module.rsplit(".", 1)[-1]
            key = module.rsplit(".", 1)[0] + {
                "k_proj": ".q_proj",
                "v_proj": ".q_proj",
                "up_proj": ".gate_proj",
                "w3": ".w1",
            }.get(leaf, "." + leaf)
            if key not in orders:
                orders[key] = torch.randperm(i, generator=gen)
            order = orders[key]
            g_idx = torch.empty(i, dtype=torch.int64)
            g_idx[order] = torch.arange(i) // gs
        else:
            g_idx = torch.arange(i) // gs
        is_sym = sym or method == "w4a16"
        q, scales, zeros = quantize_groups(w, bits, gs, is_sym, g_idx)
        ref[name] = dequantize(q, scales, zeros, g_idx)
        if conv1d:
            ref[name] = ref[name].t()
        if err != 1.0:
            scales = (scales.float() * err).half()
        if method == "gptq":
            parts = gptq_tensors(q, scales, zeros, g_idx, bits)
        elif method == "awq":
            parts = awq_tensors(q, scales, zeros)
        else:
            parts = pack_quantized_tensors(q, scales, bits)
        quant.update({f"{module}.{k}": v for k, v in parts.items()})
    ref_dir, quant_dir = directory / "reference", directory / method
    for d, tensors, qc in (
        (ref_dir, ref, None),
        (quant_dir, quant, _qconfig(method, bits, group_size, sym, desc_act, block, lm_head)),
    ):
        d.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(d / "model.safetensors"))
        c = dict(cfg)
        if qc is not None:
            c["quantization_config"] = qc
        (d / "config.json").write_text(json.dumps(c))
    return ref_dir, quant_dir


def _fp8(w: torch.Tensor, block: tuple[int, int] | None) -> tuple[torch.Tensor, torch.Tensor]:
    """w [O, I] -> (e4m3 weight, scale: a 0-d tensor, or [O / bo, I / bi] per block)."""
    top = torch.finfo(torch.float8_e4m3fn).max  # 448
    if block is None:
        scale = (w.abs().max() / top).clamp(min=1e-8)
        return (w / scale).to(torch.float8_e4m3fn), scale.reshape(())
    bo, bi = block
    o, i = w.shape
    blocks = w.view(o // bo, bo, i // bi, bi)
    scale = (blocks.abs().amax(dim=(1, 3)) / top).clamp(min=1e-8)  # [O / bo, I / bi]
    return (w / _expand(scale, w.shape, block)).to(torch.float8_e4m3fn), scale


def _expand(scale: torch.Tensor, shape: torch.Size, block: tuple[int, int] | None) -> torch.Tensor:
    if block is None:
        return scale
    full = scale.repeat_interleave(block[0], 0).repeat_interleave(block[1], 1)
    return full[: shape[0], : shape[1]]


def _qconfig(
    method: str,
    bits: int,
    group_size: int,
    sym: bool,
    desc_act: bool,
    block: tuple[int, int] | None = None,
    lm_head: bool = False,
) -> dict[str, Any]:
    if lm_head and method not in ("gptq", "awq"):
        raise ValueError(f"{method}: no quantized lm_head here (GPTQ and AWQ write one)")
    if method == "fp8":
        return {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                "weight_block_size": None if block is None else list(block),
                "ignored_layers": ["lm_head"]}  # fmt: skip
    if method == "gptq":
        return {"quant_method": "gptq", "bits": bits, "group_size": group_size,
                "desc_act": desc_act, "sym": sym, "checkpoint_format": "gptq",
                "lm_head": lm_head}  # fmt: skip
    if method == "awq":
        return {"quant_method": "awq", "bits": 4, "group_size": group_size,
                "zero_point": True, "version": "gemm", "modules_to_not_convert": None,
                "lm_head": lm_head}  # fmt: skip
    if method == "ct_fp8":
        weights = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "channel",
                   "dynamic": False}  # fmt: skip
        acts = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "token",
                "dynamic": True}  # fmt: skip
        return _compressed({"targets": ["Linear"], "weights": weights,
                            "input_activations": acts}, "float-quantized")  # fmt: skip
    if method == "w4a16":
        weights = {"num_bits": bits, "type": "int", "symmetric": True, "strategy": "group",
                   "group_size": group_size, "dynamic": False, "actorder": None}  # fmt: skip
        return _compressed({"targets": ["Linear"], "weights": weights,
                            "input_activations": None}, "pack-quantized")  # fmt: skip
    weights = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel",
               "dynamic": False, "group_size": None}  # fmt: skip
    acts = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "token",
            "dynamic": True, "group_size": None}  # fmt: skip
    return _compressed({"targets": ["Linear"], "weights": weights,
                        "input_activations": acts}, "int-quantized")  # fmt: skip


def _compressed(group: dict[str, Any], fmt: str) -> dict[str, Any]:
    return {
        "quant_method": "compressed-tensors",
        "format": fmt,
        "config_groups": {"group_0": group},
        "ignore": ["lm_head"],
        "quantization_status": "compressed",
        "kv_cache_scheme": None,
        "sparsity_config": {},
        "global_compression_ratio": None,
    }
