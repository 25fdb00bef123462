"""The native decode kernel (kernels/csrc/paged_decode.c) against the torch reference, on the
caches the engine really has: float32 and bfloat16, head-major and plain, GQA, sliding
window, soft cap. (tests/kernels/test_attention.py runs every mixed-batch case both ways.)"""

from __future__ import annotations

import pytest
import torch

from actorllm.kernels import paged_decode as native_decode
from actorllm.kernels.attention import paged_attention

BS = 4

pytestmark = pytest.mark.skipif(
    not native_decode.supports(torch.empty(1, 1, 1, 1)),
    reason="the native kernel did not build here (see actorllm.kernels.native)",
)


def _case(
    dtype: torch.dtype, head_major: bool, hq: int, hk: int, seed: int = 0
) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    d, nb, lens = 16, 96, [1, 5, 17, 40, 63]
    shape = (hk, nb, BS, d) if head_major else (nb, BS, hk, d)

    def cache() -> torch.Tensor:
        c = torch.randn(shape, generator=g).to(dtype)
        return c.permute(1, 2, 0, 3) if head_major else c  # [NB, BS, Hk, D]

    max_blocks = -(-max(lens) // BS)
    table = (torch.randperm(nb - 1, generator=g)[: len(lens) * max_blocks] + 1).view(
        len(lens), max_blocks
    )
    q = torch.randn(len(lens), hq, d, generator=g).to(dtype)
    return q, cache(), cache(), torch.tensor(lens, dtype=torch.int32), table.int()


def _reference(
    q: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, lens: torch.Tensor, table: torch.Tensor,
    window: int | None, softcap: float | None, monkeypatch: pytest.MonkeyPatch,
) -> torch.Tensor:  # fmt: skip
    with monkeypatch.context() as m:
        m.setattr(native_decode, "supports", lambda cache: False)
        qsl = torch.arange(len(lens) + 1, dtype=torch.int32)  # one token per request
        out = paged_attention(q, kc, vc, qsl, lens, table, 0.25, window, softcap=softcap)
    return out.float()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("head_major", [True, False], ids=["head-major", "plain"])
@pytest.mark.parametrize(("hq", "hk"), [(4, 4), (6, 2), (4, 1)])
@pytest.mark.parametrize(("window", "softcap"), [(None, None), (7, None), (None, 3.0), (9, 2.0)])
def test_native_decode_matches_the_torch_path(
    dtype: torch.dtype, head_major: bool, hq: int, hk: int, window: int | None,
    softcap: float | None, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    q, kc, vc, lens, table = _case(dtype, head_major, hq, hk)
    got = native_decode.paged_decode(q, kc, vc, lens, table, 0.25, window, softcap)
    assert got is not None and got.dtype == torch.float32 and got.shape == q.shape
    want = _reference(q, kc, vc, lens, table, window, softcap, monkeypatch)
    # Both read the same values and compute in float32: only summation order differs; the
    # reference hands back q's dtype, so a bf16 case compares after the same rounding.
    # (One bf16 ulp apart where the float32 sums straddle a rounding boundary.)
    tol = 2e-5 if dtype == torch.float32 else 8e-3
    torch.testing.assert_close(got.to(dtype).float(), want, atol=tol, rtol=tol)


def test_bf16_layer_output_goes_through_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """paged_attention on a bf16 cache takes the native path (the torch grouping is never
    asked) and returns q's dtype."""
    q, kc, vc, lens, table = _case(torch.bfloat16, True, 4, 2, seed=3)
    calls = []
    real = native_decode.paged_decode

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(native_decode, "paged_decode", counted)
    qsl = torch.arange(len(lens) + 1, dtype=torch.int32)
    out = paged_attention(q, kc, vc, qsl, lens, table, 0.25)
    assert calls == [1] and out.dtype == torch.bfloat16
