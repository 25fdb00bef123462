"""RMSNorm and fused residual-add + RMSNorm, Triton; same contract as ``kernels/layernorm.py``.

Tiling: one program per row (token), the whole hidden dimension in one tile of
``next_pow2(H)`` lanes, masked past H. Statistics are float32; the normalized row is rounded
to the input dtype *before* the weight multiply, exactly like HF's ``LlamaRMSNorm`` and the
reference, so bf16 results match bit for bit up to the reduction order.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from actorllm.kernels.triton._runtime import check_device, next_pow2


@triton.jit
def _rms_norm_kernel(
    x_ptr,  # [T, H]
    res_ptr,  # [T, H], read only when HAS_RESIDUAL
    w_ptr,  # [H]
    out_ptr,  # [T, H]
    new_res_ptr,  # [T, H], written only when HAS_RESIDUAL
    H,
    stride_x,
    stride_res,
    stride_out,
    stride_new_res,
    eps,
    HAS_RESIDUAL: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_H)
    mask = cols < H
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        r = tl.load(res_ptr + row * stride_res + cols, mask=mask, other=0.0)
        # The sum is rounded to the residual stream's dtype, as `x + residual` is in torch.
        x = (x.to(tl.float32) + r.to(tl.float32)).to(new_res_ptr.dtype.element_ty)
        tl.store(new_res_ptr + row * stride_new_res + cols, x, mask=mask)
    xf = x.to(tl.float32)
    var = tl.sum(xf * xf, axis=0) / H
    normed = (xf * tl.rsqrt(var + eps)).to(x.dtype)  # HF rounding: cast back, then scale
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    y = w.to(tl.float32) * normed.to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def _rows(x: torch.Tensor) -> torch.Tensor:
    """[..., H] -> [T, H] with unit stride on the last dim (a view when possible)."""
    x2 = x.reshape(-1, x.shape[-1])
    return x2 if x2.stride(-1) == 1 else x2.contiguous()


def _launch(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor | None]:
    h = x.shape[-1]
    if weight.shape != (h,):
        raise ValueError(f"weight must be [{h}], got {list(weight.shape)}")
    x2 = _rows(x)  # [T, H]
    res2 = new_res = None
    normed_dtype = x.dtype
    if residual is not None:
        if residual.shape != x.shape:
            raise ValueError(f"residual {list(residual.shape)} != x {list(x.shape)}")
        res2 = _rows(residual)
        normed_dtype = torch.promote_types(x.dtype, residual.dtype)
        new_res = torch.empty(x2.shape, dtype=normed_dtype, device=x.device)
    # Result dtype follows torch's promotion of `weight * normed`, like the reference.
    out_dtype = torch.promote_types(weight.dtype, normed_dtype)
    out = torch.empty(x2.shape, dtype=out_dtype, device=x.device)
    if x2.shape[0] > 0:
        _rms_norm_kernel[(x2.shape[0],)](
            x2,
            res2 if res2 is not None else x2,
            weight,
            out,
            new_res if new_res is not None else out,
            h,
            x2.stride(0),
            res2.stride(0) if res2 is not None else 0,
            out.stride(0),
            new_res.stride(0) if new_res is not None else 0,
            eps,
            HAS_RESIDUAL=residual is not None,
            BLOCK_H=next_pow2(h),
        )
    new_res_out = new_res.view(x.shape) if new_res is not None else None
    return out.view(x.shape), new_res_out


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``x * rsqrt(mean(x^2) + eps) * weight`` in float32, HF rounding.

    x: [T, H] (any leading dims), weight: [H] -> new [T, H] in x's dtype (torch promotion
    with weight's dtype, as the reference). Raises ``ValueError`` on shape mismatch.
    """
    check_device(x, weight)
    out, _ = _launch(x, None, weight, eps)
    return out


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``residual = x + residual; out = rms_norm(residual)`` in one pass, out of place.

    x, residual: [T, H]; weight: [H] -> (out [T, H], new residual [T, H]); inputs untouched.
    """
    check_device(x, residual, weight)
    out, new_res = _launch(x, residual, weight, eps)
    assert new_res is not None
    return out, new_res
