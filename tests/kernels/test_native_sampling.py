"""The native tempered inverse-CDF sampler (kernels/csrc/sampling.c) against the torch path
of ``kernels/sampling.py``: the same tokens for the same uniforms (float32 and bfloat16
logits, odd vocabularies and batches, masked tokens, strided rows), the tempered
distribution, degenerate rows, and the torch path where the kernel is off or filters are
on."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from actorllm.kernels import native_sampling
from actorllm.kernels.sampling import _tempered_weights, sample_from_logits, sample_inverse_cdf
from tests.helpers.native_builds import BUILDS, use_build

pytestmark = pytest.mark.skipif(
    native_sampling._lib() is None,
    reason="the native kernels did not build here (see actorllm.kernels.native)",
)


@pytest.fixture(params=list(BUILDS))
def build(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The kernel as built for this host, without AVX-512 and without AVX2 either
    (narrower vectors; tests/helpers/native_builds.py)."""
    use_build(native_sampling, native_sampling._lib, str(request.param), monkeypatch)
    return str(request.param)


def _torch_path(logits: torch.Tensor, t: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    b = logits.shape[0]
    z, k, one = torch.zeros(b), torch.zeros(b, dtype=torch.int32), torch.ones(b)
    w = _tempered_weights(logits.float(), t, z, k, one, consume=False, filtered=False)
    return sample_inverse_cdf(w, u)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("b", "v"), [(1, 1), (3, 7), (5, 256), (17, 257), (33, 1000), (64, 4099)])
def test_same_tokens_as_the_torch_path(build: str, dtype: torch.dtype, b: int, v: int) -> None:
    g = torch.Generator().manual_seed(b * 1000 + v)
    logits = (torch.randn(b, v, generator=g) * 3).to(dtype)  # [B, V]
    logits[:, ::5] = float("-inf")  # masked tokens (a grammar, a ban) are never drawn
    logits[:, 0] = torch.randn(b, generator=g).to(dtype)  # keep a finite token per row
    t = torch.rand(b, generator=g) * 1.5 + 0.1  # [B]
    u = torch.rand(b, generator=g)  # [B]
    got = native_sampling.sample_tempered(logits, t, u)
    assert got is not None and got.dtype == torch.int64 and got.shape == (b,)
    want = _torch_path(logits, t, u)
    # Another exp polynomial and summation order: a draw within rounding of a token
    # boundary may move to the neighbour; anything more is a bug.
    assert (got != want).float().mean().item() <= 0.02
    assert (logits.float().gather(1, got.unsqueeze(1)) > float("-inf")).all()


def test_strided_rows_and_logits_untouched(build: str) -> None:
    g = torch.Generator().manual_seed(5)
    full = torch.randn(9, 600, generator=g)
    view = full[:, 50:550]  # [9, 500], row stride 600
    before = full.clone()
    t, u = torch.full((9,), 0.7), torch.rand(9, generator=g)
    got = native_sampling.sample_tempered(view, t, u)
    assert got is not None
    assert torch.equal(full, before)
    assert torch.equal(got, _torch_path(view.contiguous(), t, u))


def test_follows_the_tempered_distribution(build: str) -> None:
    p = np.array([0.5, 0.3, 0.15, 0.05])
    n, temperature = 6000, 0.6
    logits = torch.tensor(p).float().log().expand(n, -1).contiguous()  # [n, 4]
    u = torch.rand(n, generator=torch.Generator().manual_seed(3))
    got = native_sampling.sample_tempered(logits, torch.full((n,), temperature), u)
    assert got is not None
    freq = np.bincount(got.numpy(), minlength=4) / n
    exp = p ** (1 / temperature) / (p ** (1 / temperature)).sum()
    assert (np.abs(freq - exp) <= 4 * np.sqrt(exp * (1 - exp) / n)).all(), (freq, exp)


def test_extremes_of_u_stay_on_tokens_with_mass(build: str) -> None:
    logits = torch.full((2, 300), float("-inf"))
    logits[:, 3] = 0.0
    logits[:, 290] = 1.0
    u = torch.tensor([0.0, 1.0 - 2.0**-24])
    got = native_sampling.sample_tempered(logits, torch.ones(2), u)
    assert got is not None and got.tolist() == [3, 290]


def test_a_row_without_finite_mass_gives_the_first_max(build: str) -> None:
    logits = torch.full((2, 40), float("-inf"))
    logits[1, 7] = float("inf")
    got = native_sampling.sample_tempered(logits, torch.ones(2), torch.full((2,), 0.5))
    assert got is not None and got.tolist() == [0, 7]


def test_sample_from_logits_uses_the_kernel_only_without_filters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = []
    real = native_sampling.sample_tempered

    def spy(*a: torch.Tensor) -> torch.Tensor | None:
        calls.append(1)
        return real(*a)

    monkeypatch.setattr(native_sampling, "sample_tempered", spy)
    b, v = 4, 50
    logits = torch.randn(b, v, generator=torch.Generator().manual_seed(0))
    t, u = torch.full((b,), 0.8), torch.rand(b)
    k, p, m = torch.zeros(b, dtype=torch.int32), torch.ones(b), torch.zeros(b)
    plain = sample_from_logits(logits.clone(), t, k, p, m, None, u)
    assert calls == [1] and torch.equal(plain, _torch_path(logits, t, u))
    sample_from_logits(logits.clone(), t, torch.full((b,), 3, dtype=torch.int32), p, m, None, u)
    assert calls == [1]  # top-k on: the torch path


def test_off_or_unsupported_means_none(monkeypatch: pytest.MonkeyPatch) -> None:
    t, u = torch.ones(2), torch.rand(2)
    assert native_sampling.sample_tempered(torch.randn(2, 5).half(), t, u) is None
    monkeypatch.setattr(native_sampling, "_fn", lambda: None)
    assert native_sampling.sample_tempered(torch.randn(2, 5), t, u) is None
    logits = torch.randn(2, 5)
    k, m = torch.zeros(2, dtype=torch.int32), torch.zeros(2)
    got = sample_from_logits(logits, t, k, torch.ones(2), m, None, u)
    assert torch.equal(got, _torch_path(logits, t, u))
