"""A linear with its activation or residual add fused into the oneDNN call, and linears of
one input stacked into one matmul: the unfused results, on every path (packed or not), and
repacked when a weight is rewritten."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from actorllm.models.fused_linear import ACTIVATIONS, StackedLinears, linear_act, linear_add
from actorllm.models.onednn_linear import invalidate_packed, prepack_linears, supported_dtypes

TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2}


def _linear(i: int, o: int, dtype: torch.dtype, *, packed: bool, bias: bool = True) -> nn.Linear:
    lin = nn.Linear(i, o, bias=bias).to(dtype)
    if packed:
        if dtype not in supported_dtypes():
            pytest.skip(f"no oneDNN {dtype} path on this host")
        assert prepack_linears(lin) == 1
    return lin


@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [3, 40, 300])  # 40: above the AMX copy's rows
@pytest.mark.parametrize("act", sorted(ACTIVATIONS))
def test_linear_act_is_act_of_linear(packed: bool, dtype: torch.dtype, rows: int, act: str) -> None:
    torch.manual_seed(0)
    lin = _linear(48, 80, dtype, packed=packed)
    x = torch.randn(rows, 48).to(dtype)
    want = ACTIVATIONS[act][2](F.linear(x.float(), lin.weight.float(), lin.bias.float()))
    with torch.inference_mode():
        got = linear_act(lin, x, act)
    assert got.dtype == dtype and got.shape == (rows, 80)
    torch.testing.assert_close(got.float(), want, atol=TOL[dtype], rtol=TOL[dtype])


@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [3, 300])
def test_linear_add_adds_the_residual(packed: bool, dtype: torch.dtype, rows: int) -> None:
    torch.manual_seed(0)
    lin = _linear(64, 32, dtype, packed=packed)
    x, res = torch.randn(rows, 64).to(dtype), torch.randn(rows, 32).to(dtype)
    want = F.linear(x.float(), lin.weight.float(), lin.bias.float()) + res.float()
    with torch.inference_mode():
        got = linear_add(lin, x, res)
    torch.testing.assert_close(got.float(), want, atol=TOL[dtype], rtol=TOL[dtype])


@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_stacked_linears_match_each_and_follow_rewrites(packed: bool, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    lins = [
        _linear(40, 24, dtype, packed=packed),
        _linear(40, 8, dtype, packed=packed, bias=False),  # a missing bias adds zeros
        _linear(40, 16, dtype, packed=packed),
    ]
    stacked = StackedLinears(*lins)
    x = torch.randn(200, 40).to(dtype)

    def check() -> None:
        with torch.inference_mode():
            got = stacked(x)
        for g, lin in zip(got, lins, strict=True):
            torch.testing.assert_close(g, F.linear(x, lin.weight, lin.bias), atol=TOL[dtype],
                                       rtol=TOL[dtype])  # fmt: skip

    check()
    with torch.no_grad():
        lins[1].weight.copy_(torch.randn(8, 40))  # an in-place write: versions change
    check()
    with torch.no_grad():
        lins[2].weight.data = torch.randn(16, 40).to(dtype)  # through .data: no version bump
    invalidate_packed(nn.ModuleList(lins))  # what a weight update calls
    check()
