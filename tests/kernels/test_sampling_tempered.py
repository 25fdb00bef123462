"""The inverse-CDF path's fused temperature (``kernels/sampling._tempered_weights``): the
same distribution and, on random logits, the same tokens as the old divide-then-softmax
form; the caller's logits untouched unless consumed; greedy rows unaffected by in-place use.
``first_argmax`` (argmax through max) picks argmax's index: ties, NaN, masked rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from actorllm.kernels.sampling import first_argmax, sample_from_logits, sample_inverse_cdf

P = [0.5, 0.3, 0.15, 0.05]


def _params(
    b: int, temperature: float, top_k: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return (
        torch.full((b,), temperature),
        torch.full((b,), top_k, dtype=torch.int32),
        torch.ones(b),
        torch.zeros(b),
    )


def _freq(temperature: float, top_k: int = 0, n: int = 6000) -> np.ndarray:
    logits = torch.tensor(P).log().expand(n, -1).contiguous()  # [n, 4]
    u = torch.rand(n, generator=torch.Generator().manual_seed(3))
    out = sample_from_logits(logits, *_params(n, temperature, top_k), None, u, consume=True)
    return np.bincount(out.numpy(), minlength=len(P)) / n


def _close(freq: np.ndarray, expected: list[float], n: int = 6000) -> None:
    exp = np.array(expected) / sum(expected)
    tol = 4 * np.sqrt(exp * (1 - exp) / n) + 1e-9
    assert (np.abs(freq - exp) <= tol).all(), (freq, exp)


def test_fused_temperature_follows_the_tempered_distribution() -> None:
    _close(_freq(0.5), [p**2 for p in P])
    _close(_freq(1.0), P)
    _close(_freq(0.6, top_k=2), [p ** (1 / 0.6) for p in P[:2]] + [0.0, 0.0])


def test_fused_temperature_matches_the_divided_form_token_for_token() -> None:
    g = torch.Generator().manual_seed(0)
    b, v = 256, 4000
    logits = torch.randn(b, v, generator=g) * 3  # [B, V]
    t = torch.rand(b, generator=g) * 1.5 + 0.1  # [B]
    u = torch.rand(b, generator=g)  # [B]
    want = sample_inverse_cdf((logits / t.unsqueeze(1)).softmax(dim=-1), u)  # the old form
    _, top_k, top_p, min_p = _params(b, 1.0)
    got = sample_from_logits(logits.clone(), t, top_k, top_p, min_p, None, u, consume=True)
    # Multiply-by-reciprocal rounds differently from a division: a draw landing within an
    # ulp of a token boundary may move to the neighbour; anything more is a bug.
    assert (got != want).float().mean().item() <= 0.01


def test_logits_untouched_unless_consumed() -> None:
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(8, 300, generator=g)
    before = logits.clone()
    u = torch.rand(8, generator=g)
    for top_k in (0, 5):
        params = _params(8, 0.7, top_k)
        a = sample_from_logits(logits, *params, None, u)
        assert torch.equal(logits, before)
        b = sample_from_logits(logits.clone(), *params, None, u, consume=True)
        assert torch.equal(a, b)


def test_greedy_rows_keep_argmax_when_consumed() -> None:
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(6, 50, generator=g)
    want = logits.argmax(dim=-1)
    t = torch.tensor([0.0, 0.8, 0.0, 1.2, 0.0, 0.5])
    _, top_k, top_p, min_p = _params(6, 1.0)
    u = torch.rand(6, generator=g)
    got = sample_from_logits(logits.clone(), t, top_k, top_p, min_p, None, u, consume=True)
    assert got[t == 0].tolist() == want[t == 0].tolist()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_first_argmax_is_argmax_ties_nan_and_masked_rows_included(dtype: torch.dtype) -> None:
    nan, inf = float("nan"), float("inf")
    x = torch.tensor(
        [[1.0, 3.0, 3.0, 2.0], [nan, 1.0, nan, 5.0], [-inf] * 4, [0.0, inf, inf, 1.0]]
    ).to(dtype)
    assert first_argmax(x).tolist() == x.argmax(dim=-1).tolist() == [1, 0, 0, 1]
    ties = torch.randint(-3, 3, (16, 4099), generator=torch.Generator().manual_seed(0))
    assert torch.equal(first_argmax(ties.to(dtype)), ties.to(dtype).argmax(dim=-1))
