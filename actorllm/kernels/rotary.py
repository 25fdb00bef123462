"""Rotary position embedding (NeoX / HF "rotate_half" layout), torch reference.

The cos/sin table is built once per model: ``cos_sin_cache: [max_positions, rot_dim]`` with
``cos`` in the first half of the last dim and ``sin`` in the second. Scaling variants
(``linear``, ``llama3``, ``yarn``) change only the inverse frequencies (YaRN and LongRoPE
also scale cos and sin), so kernels never see them.
"""

from __future__ import annotations

import math
from typing import Any

import torch


def rope_inv_freq(
    head_dim: int, theta: float, scaling: dict[str, Any] | None = None
) -> torch.Tensor:
    """Inverse frequencies [head_dim // 2] (float32), with HF's rope scaling applied.

    ``scaling`` is HF's ``rope_scaling`` / ``rope_parameters`` dict; rope_type "default",
    "linear" and "llama3" are supported, anything else raises ``ValueError``.
    """
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    rope_type = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
    if rope_type in (None, "default"):
        pass
    elif rope_type == "linear":
        inv_freq = inv_freq / float(scaling["factor"])  # type: ignore[index]
    elif rope_type == "llama3":
        assert scaling is not None
        factor = float(scaling["factor"])
        low = float(scaling.get("low_freq_factor", 1.0))
        high = float(scaling.get("high_freq_factor", 4.0))
        old_ctx = float(scaling["original_max_position_embeddings"])
        low_wavelen = old_ctx / low
        high_wavelen = old_ctx / high
        wavelen = 2 * math.pi / inv_freq
        # Long wavelengths are slowed by `factor`, short ones kept, the band between blended.
        scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_ctx / wavelen - low) / (high - low)
        blended = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        inv_freq = torch.where(medium, blended, scaled)
    else:
        raise ValueError(
            f"unsupported rope scaling type {rope_type!r} "
            "(supported: default, linear, llama3, yarn, longrope)"
        )
    return inv_freq.float()


def longrope_inv_freq(
    rot_dim: int,
    theta: float,
    scaling: dict[str, Any],
    max_position_embeddings: int,
    long_context: bool,
) -> tuple[torch.Tensor, float]:
    """Phi-3's LongRoPE ("su"): (inverse frequencies [rot_dim // 2], cos/sin scale).

    Each frequency is divided by a per-dimension factor: ``long_factor`` when
    ``long_context`` else ``short_factor``. HF switches per forward pass on the batch's
    longest sequence, which a KV cache cannot follow: keys already cached (and prefix-cache
    blocks other requests reuse) were rotated with one factor set, and a switch would mix
    the two. Like vLLM, the engine picks once: long factors when it serves sequences
    longer than ``original_max_position_embeddings``, short ones (HF's choice for such
    sequences) otherwise. cos and sin are scaled by ``long_mscale`` / ``short_mscale``
    (vLLM's keys, Phi-3-small), else ``attention_factor`` (HF's key), else
    sqrt(1 + ln(factor) / ln(original)) with factor = max_position_embeddings / original
    (what both compute for Phi-3's configs).
    """
    original = int(scaling["original_max_position_embeddings"])
    ext = torch.tensor(
        scaling["long_factor" if long_context else "short_factor"], dtype=torch.float32
    )
    factor = max_position_embeddings / original
    attention_factor = scaling.get("long_mscale" if long_context else "short_mscale")
    if attention_factor is None:
        attention_factor = scaling.get("attention_factor")
    if attention_factor is None:
        attention_factor = (
            1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
        )
    exponent = torch.arange(0, rot_dim, 2, dtype=torch.int64).float() / rot_dim
    inv_freq = 1.0 / (ext * theta**exponent)
    return inv_freq, float(attention_factor)


def yarn_inv_freq(
    rot_dim: int, theta: float, scaling: dict[str, Any], max_position_embeddings: int
) -> tuple[torch.Tensor, float]:
    """YaRN (gpt-oss, Qwen long context): (inverse frequencies [rot_dim // 2], cos/sin scale),
    as transformers' ``_compute_yarn_parameters`` computes them, in float32 like it.

    Frequencies that turn fewer than ``beta_slow`` times over ``original_max_position_
    embeddings`` are interpolated (divided by ``factor``), those turning more than
    ``beta_fast`` times kept, a linear ramp between. ``truncate`` (default true; gpt-oss
    says false) rounds the ramp's ends to whole dimensions. cos and sin are scaled by
    ``attention_factor``, else ``0.1 * ln(factor) + 1`` (or the ``mscale`` /
    ``mscale_all_dim`` ratio when both are given).
    """
    original = int(scaling.get("original_max_position_embeddings") or max_position_embeddings)
    factor = scaling.get("factor")
    factor = float(factor) if factor is not None else max_position_embeddings / original
    attention_factor = scaling.get("attention_factor")
    if attention_factor is None:
        mscale, mscale_all_dim = scaling.get("mscale"), scaling.get("mscale_all_dim")
        if mscale and mscale_all_dim:
            attention_factor = _yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all_dim)
        else:
            attention_factor = _yarn_mscale(factor)
    beta_fast = float(scaling.get("beta_fast") or 32)
    beta_slow = float(scaling.get("beta_slow") or 1)

    def correction_dim(rotations: float) -> float:
        return rot_dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, rot_dim - 1)
    if low == high:
        high += 0.001  # HF's guard against a zero-width ramp
    ramp = ((torch.arange(rot_dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    pos_freqs = theta ** (torch.arange(0, rot_dim, 2, dtype=torch.float32) / rot_dim)
    keep = 1 - ramp  # [rot_dim // 2]: 1 where the frequency is kept (HF's arithmetic)
    inv_freq = (1.0 / (factor * pos_freqs)) * (1 - keep) + (1.0 / pos_freqs) * keep
    return inv_freq, float(attention_factor)


def _yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def rope_table(
    rot_dim: int,
    theta: float,
    scaling: dict[str, Any] | None,
    max_positions: int,
    *,
    max_position_embeddings: int,
    max_model_len: int,
) -> torch.Tensor:
    """The cos | sin table [max_positions, rot_dim] for any supported rope type."""
    rope_type = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
    if rope_type == "yarn":
        assert scaling is not None
        inv_freq, mscale = yarn_inv_freq(rot_dim, theta, scaling, max_position_embeddings)
        return build_cos_sin_cache(max_positions, inv_freq, scale=mscale)
    if rope_type in ("longrope", "su"):
        assert scaling is not None
        long = max_model_len > int(scaling["original_max_position_embeddings"])
        inv_freq, mscale = longrope_inv_freq(rot_dim, theta, scaling, max_position_embeddings, long)
        return build_cos_sin_cache(max_positions, inv_freq, scale=mscale)
    return build_cos_sin_cache(max_positions, rope_inv_freq(rot_dim, theta, scaling))


def build_cos_sin_cache(
    max_positions: int,
    inv_freq: torch.Tensor,
    dtype: torch.dtype = torch.float32,
    scale: float = 1.0,
) -> torch.Tensor:
    """[max_positions, 2 * len(inv_freq)]: cos | sin of ``position * inv_freq``, times
    ``scale`` (LongRoPE's attention factor)."""
    t = torch.arange(max_positions, dtype=torch.float32)
    freqs = torch.outer(t, inv_freq.float())  # [P, rot_dim/2]
    cos, sin = freqs.cos(), freqs.sin()
    if scale != 1.0:
        cos, sin = cos * scale, sin * scale
    return torch.cat([cos, sin], dim=-1).to(dtype)


def apply_rotary(
    positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_sin_cache: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate q and k by their positions (out of place).

    positions: [T] int64; q: [T, Hq, D]; k: [T, Hk, D]; cos_sin_cache: [P, D].
    Returns (q, k) with the same shapes and dtypes.
    """
    half = cos_sin_cache.shape[-1] // 2
    cs = cos_sin_cache.index_select(0, positions).float()  # [T, D]
    cos, sin = cs[:, :half], cs[:, half:]
    # rotate_half form: [x1 | x2] -> [x1 cos - x2 sin | x2 cos + x1 sin]
    #                              = x * [cos | cos] + [x2 | x1] * [-sin | sin]  (bit-identical)
    cos2 = torch.cat([cos, cos], dim=-1).unsqueeze(1)  # [T, 1, D]
    sin2 = torch.cat([-sin, sin], dim=-1).unsqueeze(1)

    def rot(x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        swapped = torch.cat([xf[..., half:], xf[..., :half]], dim=-1)
        return (xf * cos2).add_(swapped.mul_(sin2)).to(x.dtype)

    qk = _adjacent(q, k)
    if qk is not None:  # q and k side by side in one projection output: one pass for both
        out = rot(qk)  # [T, Hq + Hk, D]
        return out[:, : q.shape[1]], out[:, q.shape[1] :]
    return rot(q), rot(k)


def apply_rotary_interleaved(
    positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_sin_cache: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`apply_rotary` for GPT-J-style RoPE (ERNIE 4.5, GLM): frequency ``i`` turns the
    adjacent lanes ``(2i, 2i + 1)`` instead of lanes ``i`` and ``i + D/2``. Plain torch,
    so it runs on every device.

    positions: [T] int64; q: [T, Hq, D]; k: [T, Hk, D]; cos_sin_cache: [P, D] (cos | sin).
    """
    half = cos_sin_cache.shape[-1] // 2
    cs = cos_sin_cache.index_select(0, positions).float()  # [T, D]
    cos, sin = cs[:, None, :half], cs[:, None, half:]  # [T, 1, D/2]

    def rot(x: torch.Tensor) -> torch.Tensor:
        pairs = x.float().unflatten(-1, (half, 2))  # [T, H, D/2, 2]
        x1, x2 = pairs[..., 0], pairs[..., 1]
        out = torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
        return out.flatten(-2).to(x.dtype)

    return rot(q), rot(k)


def _adjacent(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor | None:
    """[T, Hq + Hk, D] view over q and k when k's heads directly follow q's in memory with
    the same strides (the q | k | v split of a fused QKV projection), else None."""
    if q.dim() != 3 or q.dtype != k.dtype or q.stride() != k.stride() or q.shape[0] != k.shape[0]:
        return None
    if q.untyped_storage().data_ptr() != k.untyped_storage().data_ptr():
        return None
    if k.storage_offset() != q.storage_offset() + q.shape[1] * q.stride(1):
        return None
    return q.as_strided((q.shape[0], q.shape[1] + k.shape[1], q.shape[2]), q.stride())
