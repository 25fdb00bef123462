"""RMSNorm, rotary, SiLU-and-mul and the KV-cache write through the native CPU kernels
(``csrc/elementwise.c``): one pass over the rows in float32, rounded where the torch
references round, instead of their chains of conversions and small ops. Each entry returns
None (the KV write: False) where the kernel does not take the call (not CPU, another dtype,
a layout it does not read, the build failed or ``ACTORLLM_NATIVE_KERNELS=0``); the reference
in ``layernorm`` / ``rotary`` / ``activation`` / ``kv_cache`` then runs its torch path.
Parity: tests/kernels/test_elementwise.py."""

from __future__ import annotations

import ctypes
import functools
import math
from collections.abc import Callable
from typing import Any

import torch

from actorllm.kernels import activation, kv_cache, kv_quant, layernorm, native, rotary
from actorllm.kernels.row_bucket import empty_rows

_BF16 = {torch.float32: 0, torch.bfloat16: 1}
_ROW_MAX = 8192  # csrc/elementwise.c's ROW_MAX
# Extra compiler flags of the build the entries call (tests: ("-mno-avx512f",)).
_BUILD_FLAGS: tuple[str, ...] = ()

_P, _I64, _I32, _F32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float
_SIGNATURES: dict[str, list[Any]] = {
    "rms_norm": [
        _P, _I64, _I64, _P, _I64, _I64,  # x, strides; residual, strides
        _P, _P, _P, _I32,  # res_out, out, weight, bf16
        _I64, _I64, _I32, _F32, _I32, _F32, _I32,  # n0, n1, d, eps, mode, offset, threads
    ],
    "rotary_neox": [
        _P, _P, _I64, _I64,  # positions, cos_sin, its row stride, its rows
        _P, _I64, _I64, _I32, _P, _I64, _I64, _I32,  # q, strides, hq; k, strides, hk
        _P, _I32, _I64, _I32, _I32,  # out, bf16, t, d, threads
    ],
    "qk_norm_rope": [
        _P, _P, _I64, _I64,  # positions, cos_sin, its row stride, its rows
        _P, _I64, _I64, _I32, _P, _I64, _I64, _I32,  # q, strides, hq; k, strides, hk
        _P, _P, _F32,  # q / k norm weights, eps
        _P, _I32, _I64, _I32, _I32,  # out, bf16, t, d, threads
    ],
    "silu_and_mul": [_P, _I64, _P, _I32, _I64, _I32, _I32],  # x, row stride, out, bf16, n, d
    "write_kv": [
        _P, _I64, _I64, _P, _I64, _I64,  # key, strides; value, strides
        _P, _P, _I64, _I64, _I64,  # k_cache, v_cache, block / slot / head strides
        _I64, _I64, _P, _I64, _I32, _I32, _I32, _I32,  # bs, nslots, slots, t, hk, d, esize, threads
    ],
}  # fmt: skip


@functools.cache
def _lib(extra_flags: tuple[str, ...] = ()) -> ctypes.CDLL | None:
    lib = native.library("elementwise", extra_flags)
    if lib is None:
        return None
    for name, argtypes in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = ctypes.c_int
    return lib


def _fn(name: str) -> Any:
    lib = _lib(_BUILD_FLAGS)
    return None if lib is None else getattr(lib, name)


# Each entry's checks, per (shapes, strides, dtypes, devices) of its arguments: a plan (the
# kernel's size and stride arguments) or None (the kernel does not take the call). A decode
# step calls each entry with a handful of shapes, so the checks run once per shape instead
# of every call (they cost more than the kernel at 128 rows). Cleared when full.
_PLANS: dict[tuple[Any, ...], Any] = {}
_PLANS_MAX = 4096
_MISS = object()


def _remember(key: tuple[Any, ...], plan: Any) -> Any:
    if len(_PLANS) >= _PLANS_MAX:
        _PLANS.clear()
    _PLANS[key] = plan
    return plan


def _rows3(x: torch.Tensor) -> tuple[int, int, int, int] | None:
    """x as [n0, n1, d] rows with the last dim contiguous: (n0, s0, n1, s1), or None."""
    if x.dim() == 0 or (x.stride(-1) != 1 and x.shape[-1] > 1):
        return None
    if x.dim() == 1:
        return 1, 0, 1, 0
    if x.dim() == 2:
        return x.shape[0], x.stride(0), 1, 0
    lead = x.shape[:-2]
    try:
        flat = x.view(-1, x.shape[-2], x.shape[-1]) if len(lead) != 1 else x
    except RuntimeError:
        return None
    return flat.shape[0], flat.stride(0), flat.shape[1], flat.stride(1)


def _rows_like(x: torch.Tensor, shape: tuple[int, ...] | None = None) -> torch.Tensor:
    """A new contiguous tensor of ``shape`` (default x's) in x's dtype, its token rows (all
    but the last dimension) with room for a linear's bucketed row count."""
    shape = x.shape if shape is None else shape
    if len(shape) == 2:  # [T, H], most calls: no flattening view
        return empty_rows(shape, x.dtype)
    if not shape:
        return torch.empty(shape, dtype=x.dtype)
    return empty_rows((math.prod(shape[:-1]), shape[-1]), x.dtype).view(shape)


def _takes(*ts: torch.Tensor) -> bool:
    dtype = ts[0].dtype
    return all(t.device.type == "cpu" and t.dtype == dtype for t in ts) and dtype in _BF16


def _norm_plan(
    x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor | None
) -> tuple[int, int, int, int, int, int, int, int] | None:
    """rms_norm's (n0, s0, n1, s1, rs0, rs1, bf16, d), or None where the kernel does not
    take these tensors."""
    d = x.shape[-1] if x.dim() else 0
    extra = (residual,) if residual is not None else ()
    if not _takes(x, weight, *extra) or d > _ROW_MAX or weight.shape != (d,):
        return None
    if weight.stride() != (1,) or (residual is not None and residual.shape != x.shape):
        return None
    rx = _rows3(x)
    rr = _rows3(residual) if residual is not None else (0, 0, 0, 0)
    if rx is None or rr is None or (residual is not None and rr[0::2] != rx[0::2]):
        return None
    return rx[0], rx[1], rx[2], rx[3], rr[1], rr[3], _BF16[x.dtype], d


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    residual: torch.Tensor | None = None,
    offset: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """(norm(x [+ residual]), x + residual or None) for x: [..., H], weight: [H]; None where
    the kernel does not take it. ``offset``: Gemma's ``(offset + w)`` rounded once."""
    fn = _fn("rms_norm")
    if fn is None:
        return None
    rkey = None if residual is None else (residual.shape, residual.stride(), residual.dtype,
                                          residual.device)  # fmt: skip
    key = ("norm", x.shape, x.stride(), x.dtype, x.device, weight.shape, weight.stride(),
           weight.dtype, weight.device, rkey)  # fmt: skip
    plan = _PLANS.get(key, _MISS)
    if plan is _MISS:
        plan = _remember(key, _norm_plan(x, weight, residual))
    if plan is None:
        return None
    n0, s0, n1, s1, rs0, rs1, bf16, d = plan
    # [..., H], each with room for the bucketed rows a linear reads (kernels/row_bucket.py)
    out = _rows_like(x)
    res_out = _rows_like(x) if residual is not None else None
    rc = fn(
        x.data_ptr(), s0, s1,
        residual.data_ptr() if residual is not None else None, rs0, rs1,
        res_out.data_ptr() if res_out is not None else None, out.data_ptr(),
        weight.data_ptr(), bf16, n0, n1, d, eps,
        0 if offset is None else 1, offset or 0.0, torch.get_num_threads(),
    )  # fmt: skip
    return (out, res_out) if rc == 0 else None


def _rotary_plan(
    positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_sin_cache: torch.Tensor
) -> tuple[int, int, int, int, int] | None:
    """rotary_neox's (t, hq, hk, d, bf16), or None where the kernel does not take these."""
    if q.dim() != 3 or k.dim() != 3 or not _takes(q, k):
        return None
    t, hq, d = q.shape
    if k.shape[0] != t or k.shape[2] != d or cos_sin_cache.shape[-1] != d or d > _ROW_MAX:
        return None
    if cos_sin_cache.dtype != torch.float32 or cos_sin_cache.device.type != "cpu":
        return None
    if cos_sin_cache.dim() != 2 or cos_sin_cache.stride(-1) != 1:
        return None
    if d % 2 or q.stride(2) != 1 or k.stride(2) != 1 or positions.shape != (t,):
        return None
    if positions.device.type != "cpu" or (positions.stride() != (1,) and t > 1):
        return None
    return t, hq, k.shape[1], d, _BF16[q.dtype]


def _rotate_into_one(
    fn: Callable[..., int],
    plan: tuple[int, int, int, int, int],
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    cache: torch.Tensor,
    norm_args: tuple[Any, ...] = (),
) -> tuple[torch.Tensor, torch.Tensor]:
    """The call rotary_neox and qk_norm_rope share (``norm_args``: the latter's q / k
    weights and eps, between k and out): (q, k) as views of one [T, Hq + Hk, D] tensor."""
    t, hq, hk, d, bf16 = plan
    out = torch.empty((t, hq + hk, d), dtype=q.dtype)  # [T, Hq + Hk, D]
    rc = fn(
        positions.data_ptr(), cache.data_ptr(), cache.stride(0), cache.shape[0],
        q.data_ptr(), q.stride(0), q.stride(1), hq,
        k.data_ptr(), k.stride(0), k.stride(1), hk,
        *norm_args,
        out.data_ptr(), bf16, t, d, torch.get_num_threads(),
    )  # fmt: skip
    if rc != 0:
        raise IndexError("rotary: a position is outside the cos/sin cache")
    return out[:, :hq], out[:, hq:]


def _rotary_key(
    name: str, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cache: torch.Tensor
) -> tuple[Any, ...]:
    return (name, positions.shape, positions.stride(), positions.dtype, positions.device,
            q.shape, q.stride(), q.dtype, q.device, k.shape, k.stride(), k.dtype, k.device,
            cache.shape, cache.stride(), cache.dtype, cache.device)  # fmt: skip


def rotary_neox(
    positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_sin_cache: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Rotated (q, k) as views of one [T, Hq + Hk, D] tensor, or None where the kernel does
    not take it. positions: [T]; q: [T, Hq, D]; k: [T, Hk, D]; cos_sin_cache: [P, D]
    float32 (strided positions or cache rows: the torch path)."""
    fn = _fn("rotary_neox")
    if fn is None:
        return None
    if positions.dtype != torch.int64:
        positions = positions.long()  # [T]
    key = _rotary_key("rot", positions, q, k, cos_sin_cache)
    plan = _PLANS.get(key, _MISS)
    if plan is _MISS:
        plan = _remember(key, _rotary_plan(positions, q, k, cos_sin_cache))
    if plan is None:
        return None
    return _rotate_into_one(fn, plan, positions, q, k, cos_sin_cache)


def qk_norm_rotary(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    eps: float,
    cos_sin_cache: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Qwen3's per-head q / k RMSNorm then NeoX rotary in one pass:
    ``rotary_neox(positions, rms_norm(q, q_weight), rms_norm(k, k_weight))`` (bfloat16: bit
    for bit; float32: up to the order of a head's sum of squares), as views of one
    [T, Hq + Hk, D] tensor; None where the kernel does not take it. q: [T, Hq, D];
    k: [T, Hk, D]; weights: [D]; positions: [T]; cos_sin_cache: [P, D] float32."""
    fn = _fn("qk_norm_rope")
    if fn is None:
        return None
    if positions.dtype != torch.int64:
        positions = positions.long()  # [T]
    key = (_rotary_key("qknr", positions, q, k, cos_sin_cache), q_weight.shape,
           q_weight.stride(), q_weight.dtype, q_weight.device, k_weight.shape,
           k_weight.stride(), k_weight.dtype, k_weight.device)  # fmt: skip
    plan = _PLANS.get(key, _MISS)
    if plan is _MISS:
        plan = _rotary_plan(positions, q, k, cos_sin_cache)
        if plan is not None:
            d = plan[3]
            for w in (q_weight, k_weight):
                if not _takes(q, w) or w.shape != (d,) or w.stride() != (1,):
                    plan = None
        plan = _remember(key, plan)
    if plan is None:
        return None
    weights = (q_weight.data_ptr(), k_weight.data_ptr(), eps)
    return _rotate_into_one(fn, plan, positions, q, k, cos_sin_cache, weights)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor | None:
    """x: [..., 2 * I] (gate | up) -> [..., I], or None where the kernel does not take it."""
    fn = _fn("silu_and_mul")
    if fn is None:
        return None
    key = ("silu", x.shape, x.stride(), x.dtype, x.device)
    plan = _PLANS.get(key, _MISS)
    if plan is _MISS:
        plan = None
        if _takes(x) and x.dim() != 0 and x.shape[-1] % 2 == 0 and x.shape[-1] != 0:
            x2 = x.reshape(-1, x.shape[-1]) if x.dim() != 2 else x  # [N, 2I]; a view if it can
            if x2.stride(-1) == 1 and x2.data_ptr() == x.data_ptr():
                plan = (x2.shape[0], x2.stride(0), x2.shape[1] // 2, _BF16[x.dtype],
                        (*x.shape[:-1], x2.shape[1] // 2))  # fmt: skip
        plan = _remember(key, plan)
    if plan is None:
        return None
    n, stride, d, bf16, out_shape = plan
    out = _rows_like(x, out_shape)  # [..., I], room for the bucketed rows down_proj reads
    rc = fn(x.data_ptr(), stride, out.data_ptr(), bf16, n, d, torch.get_num_threads())
    return out if rc == 0 else None


def write_kv(
    key: torch.Tensor,
    value: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> bool:
    """Copy key, value [T, Hk, D] into k_cache, v_cache [NB, BS, Hk, D] at slot_mapping [T]
    (negative: skipped); False where the kernel does not take the call (nothing written)."""
    fn = _fn("write_kv")
    if fn is None:
        return False
    pkey = ("kv", key.shape, key.stride(), key.dtype, key.device, value.shape, value.stride(),
            value.dtype, value.device, k_cache.shape, k_cache.stride(), k_cache.dtype,
            k_cache.device, v_cache.shape, v_cache.stride(), v_cache.dtype, v_cache.device,
            slot_mapping.shape, slot_mapping.device)  # fmt: skip
    plan = _PLANS.get(pkey, _MISS)
    if plan is _MISS:
        plan = _remember(pkey, _write_kv_plan(key, value, k_cache, v_cache, slot_mapping))
    if plan is None:
        return False
    key_strides, value_strides, cache_layout, sizes = plan
    slots = slot_mapping.to(torch.int64).contiguous()  # [T]
    rc = fn(
        key.data_ptr(), *key_strides, value.data_ptr(), *value_strides,
        k_cache.data_ptr(), v_cache.data_ptr(), *cache_layout, slots.data_ptr(), *sizes,
        torch.get_num_threads(),
    )  # fmt: skip
    return rc == 0


def _write_kv_plan(
    key: torch.Tensor,
    value: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None:
    """write_kv's arguments beside the pointers: ((key strides 0, 1), (value strides 0, 1),
    (cache strides 0-2, block size, slots), (T, Hk, D, element size)), or None where the
    kernel does not take these tensors."""
    ts = (key, value, k_cache, v_cache)
    as_bytes = all(t.device.type == "cpu" and t.dtype == torch.uint8 for t in ts)  # fp8's
    if not (_takes(*ts) or as_bytes) or slot_mapping.device.type != "cpu":
        return None
    if key.dim() != 3 or key.shape != value.shape or k_cache.dim() != 4:
        return None
    nb, bs, hk, d = k_cache.shape
    if v_cache.shape != k_cache.shape or v_cache.stride() != k_cache.stride():
        return None
    if key.shape[1:] != (hk, d) or key.shape[0] != slot_mapping.shape[0]:
        return None
    if key.stride(2) != 1 or value.stride(2) != 1 or k_cache.stride(3) != 1:
        return None
    cs = k_cache.stride()
    return (
        (key.stride(0), key.stride(1)),
        (value.stride(0), value.stride(1)),
        (cs[0], cs[1], cs[2], bs, nb * bs),
        (key.shape[0], hk, d, key.element_size()),
    )


# The torch backend's entries (kernels/ops.py): the native kernel where it takes the call,
# else the torch reference (which stays bit-identical to HF: tests/kernels/test_reference_ops).


def cpu_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """:func:`actorllm.kernels.layernorm.rms_norm`, natively where it can."""
    got = rms_norm(x, weight, eps)
    return got[0] if got is not None else layernorm.rms_norm(x, weight, eps)


def cpu_fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`actorllm.kernels.layernorm.fused_add_rms_norm`, natively where it can."""
    got = rms_norm(x, weight, eps, residual=residual)
    if got is None or got[1] is None:
        return layernorm.fused_add_rms_norm(x, residual, weight, eps)
    return got[0], got[1]


def cpu_apply_rotary(
    positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_sin_cache: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`actorllm.kernels.rotary.apply_rotary`, natively where it can."""
    got = rotary_neox(positions, q, k, cos_sin_cache)
    return got if got is not None else rotary.apply_rotary(positions, q, k, cos_sin_cache)


def cpu_qk_norm_rotary(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    eps: float,
    cos_sin_cache: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-head ``rms_norm`` of q [T, Hq, D] and k [T, Hk, D], then ``apply_rotary``: one
    native pass where it takes the call, else the three entries above."""
    got = qk_norm_rotary(positions, q, k, q_weight, k_weight, eps, cos_sin_cache)
    if got is not None:
        return got
    qn, kn = cpu_rms_norm(q, q_weight, eps), cpu_rms_norm(k, k_weight, eps)
    return cpu_apply_rotary(positions, qn, kn, cos_sin_cache)


def cpu_silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """:func:`actorllm.kernels.activation.silu_and_mul`, natively where it can."""
    got = silu_and_mul(x)
    return got if got is not None else activation.silu_and_mul(x)


def cpu_write_kv_cache(
    key: torch.Tensor,
    value: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> None:
    """:func:`actorllm.kernels.kv_cache.write_kv_cache`, natively where it can (a copy: the
    same bytes; one call instead of a host sync and two strided ``index_copy_``). An fp8
    cache: keys and values quantized first (``kv_quant.quantize``), then copied as bytes."""
    if kv_quant.is_fp8(k_cache.dtype):
        kq = kv_quant.quantize(key, k_cache.dtype, k_scale).view(torch.uint8)  # [T, Hk, D]
        vq = kv_quant.quantize(value, v_cache.dtype, v_scale).view(torch.uint8)
        kc, vc = k_cache.view(torch.uint8), v_cache.view(torch.uint8)
        if not write_kv(kq, vq, kc, vc, slot_mapping):
            kv_cache.write_kv_cache(kq, vq, kc, vc, slot_mapping)
        return
    if not write_kv(key, value, k_cache, v_cache, slot_mapping):
        kv_cache.write_kv_cache(key, value, k_cache, v_cache, slot_mapping)
