"""The native prefill kernel (kernels/csrc/paged_prefill.c) against the torch reference (the
SDPA path of paged_attention), on the caches the engine really has: float32 and bfloat16,
head-major and plain, GQA, chunked prefill over cached context, sliding window, soft cap,
prefills and decode rows mixed in one step."""

from __future__ import annotations

import pytest
import torch

from actorllm.kernels import paged_prefill as native_prefill
from actorllm.kernels.attention import paged_attention
from actorllm.kernels.cpu_features import cpu_flags
from tests.helpers.native_builds import BUILDS, use_build

pytestmark = pytest.mark.skipif(
    native_prefill._kernel() is None,
    reason="the native kernel did not build here (see actorllm.kernels.native)",
)

Step = tuple[torch.Tensor, ...]


def _step(
    dtype: torch.dtype, head_major: bool, hq: int, hk: int, q_lens: tuple[int, ...],
    lens: tuple[int, ...], seed: int = 0, d: int = 16, bs: int = 4,
) -> Step:  # fmt: skip
    """q [T, Hq, D], k/v caches [NB, BS, Hk, D], qsl [B + 1], seq_lens [B], table [B, nb]:
    request b has q_lens[b] query tokens, the last of its lens[b]-token context."""
    g = torch.Generator().manual_seed(seed)
    max_blocks = -(-max(lens) // bs)
    nb = len(lens) * max_blocks + 1
    shape = (hk, nb, bs, d) if head_major else (nb, bs, hk, d)

    def cache() -> torch.Tensor:
        c = torch.randn(shape, generator=g).to(dtype)
        return c.permute(1, 2, 0, 3) if head_major else c  # [NB, BS, Hk, D]

    table = torch.randperm(nb - 1, generator=g)[: len(lens) * max_blocks] + 1
    q = (torch.randn(sum(q_lens), hq, d, generator=g) * 2).to(dtype)  # max moves tile to tile
    qsl = torch.tensor([0, *q_lens], dtype=torch.int32).cumsum(0).to(torch.int32)
    lens_t = torch.tensor(lens, dtype=torch.int32)
    return q, cache(), cache(), qsl, lens_t, table.view(len(lens), max_blocks).int()


def _attend(
    step: Step, native: bool, monkeypatch: pytest.MonkeyPatch, scale: float = 0.25,
    window: int | None = None, softcap: float | None = None, sinks: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    q, kc, vc, qsl, lens, table = step
    extra = {} if sinks is None else {"sinks": sinks}
    calls: list[bool] = []
    real = native_prefill.paged_prefill

    def spy(*args: object, **kwargs: object) -> bool:
        calls.append(real(*args, **kwargs))  # type: ignore[arg-type]
        return calls[-1]

    with monkeypatch.context() as m:
        m.setattr(native_prefill, "paged_prefill", spy)
        if not native:
            m.setattr(native_prefill, "supports", lambda *args: False)
        out = paged_attention(
            q, kc, vc, qsl, lens, table, scale, window, softcap=softcap, **extra
        )  # fmt: skip
    assert calls == ([True] if native else [])  # one call for every prefill of the step
    return out


def _tol(dtype: torch.dtype) -> float:
    # Same values, float32 math, only the summation order differs; a bf16 output is one
    # bf16 ulp apart where the float32 sums straddle a rounding boundary.
    return 2e-5 if dtype == torch.float32 else 8e-3


@pytest.fixture(params=list(BUILDS))
def build(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The kernel as built for this host, its AVX2 scores and P.V and its portable C path
    (tests/helpers/native_builds.py)."""
    use_build(native_prefill, native_prefill._kernel, str(request.param), monkeypatch)
    return str(request.param)


@pytest.mark.usefixtures("build")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("head_major", [True, False], ids=["head-major", "plain"])
@pytest.mark.parametrize(("hq", "hk"), [(4, 4), (6, 2), (4, 1)])
@pytest.mark.parametrize(("window", "softcap"), [(None, None), (7, None), (None, 3.0), (9, 2.0)])
def test_mixed_step_matches_the_torch_path(
    dtype: torch.dtype, head_major: bool, hq: int, hk: int, window: int | None,
    softcap: float | None, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Prefills from scratch, chunked prefills over cached context (seq_len > L), 2-token
    and odd-length requests, and decode rows in one step: the same output both ways."""
    q_lens = (5, 1, 23, 2, 1, 17, 3)
    lens = (5, 9, 40, 2, 1, 17, 30)
    step = _step(dtype, head_major, hq, hk, q_lens, lens)
    got = _attend(step, True, monkeypatch, window=window, softcap=softcap)
    want = _attend(step, False, monkeypatch, window=window, softcap=softcap)
    assert got.dtype == dtype
    torch.testing.assert_close(got.float(), want.float(), atol=_tol(dtype), rtol=_tol(dtype))


@pytest.mark.usefixtures("build")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize(("hq", "hk"), [(4, 4), (6, 2)])
@pytest.mark.parametrize("window", [None, 7])
def test_sinks_match_the_torch_path(
    dtype: torch.dtype, hq: int, hk: int, window: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gpt-oss's attention sinks (a logit per head with no value), sinks below and far above
    the scores, in a step of prefills over cached context and decode rows."""
    step = _step(dtype, True, hq, hk, (5, 1, 23, 2, 17), (5, 9, 40, 2, 30))
    sinks = torch.linspace(-2.0, 30.0, hq)
    got = _attend(step, True, monkeypatch, window=window, sinks=sinks)
    want = _attend(step, False, monkeypatch, window=window, sinks=sinks)
    torch.testing.assert_close(got.float(), want.float(), atol=_tol(dtype), rtol=_tol(dtype))
    plain = _attend(step, False, monkeypatch, window=window)
    assert not torch.allclose(want.float(), plain.float(), atol=1e-2)


@pytest.mark.usefixtures("build")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize(
    ("d", "bs", "hq", "hk"),
    [
        (64, 16, 12, 4),  # the 75M preset's layer (G = 3)
        (32, 32, 8, 2),  # G = 4, 32-token blocks: two key tiles per block
        (128, 8, 2, 2),  # D = 128, no GQA
        (48, 4, 6, 1),  # G = 6, D = 48: AVX-512 has no specialised P.V (portable)
        (16, 24, 4, 2),  # 24-token blocks: a 16-key and an 8-key tile per block
        (256, 16, 2, 1),  # D = 256: AVX-512's P.V in passes of 128 columns
    ],
)
@pytest.mark.parametrize("window", [None, 20])
def test_shapes(
    dtype: torch.dtype, d: int, bs: int, hq: int, hk: int, window: int | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Every code path the kernel dispatches to, on prompts longer than a query tile (1-token
    tail tiles, L not a multiple of it), with cached context in front."""
    q_lens = (65, 22, 130)
    lens = (65, 100, 131)
    step = _step(dtype, True, hq, hk, q_lens, lens, seed=1, d=d, bs=bs)
    got = _attend(step, True, monkeypatch, window=window)
    want = _attend(step, False, monkeypatch, window=window)
    torch.testing.assert_close(got.float(), want.float(), atol=_tol(dtype), rtol=_tol(dtype))


@pytest.mark.usefixtures("build")
def test_garbage_past_the_context_is_never_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Slots past a request's length (the rest of its last block) may hold anything, NaN
    included: they must not reach the output."""
    step = _step(torch.float32, True, 6, 2, (7, 13), (7, 30), seed=2, bs=16)
    want = _attend(step, False, monkeypatch)
    _, kc, vc, _, lens, table = step
    for cache in (kc, vc):
        for i, n in enumerate(lens.tolist()):
            cache[int(table[i, (n - 1) // 16]), n % 16 or 16 :] = float("nan")
    got = _attend(step, True, monkeypatch)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_q_as_a_view_of_fused_qkv_is_read_in_place(
    dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    """q sliced out of a fused qkv projection (rows apart, heads packed) is read as it is
    and gives the contiguous q's result bit for bit."""
    hq, d = 6, 16
    _, kc, vc, qsl, lens, table = _step(dtype, True, hq, 2, (9, 1, 20), (9, 5, 25), seed=5)
    qkv = torch.randn(30, (hq + 4) * d).to(dtype)  # [T, (Hq + 2 Hk) * D]
    q = qkv[:, : hq * d].view(30, hq, d)  # [T, Hq, D], row stride (Hq + 2 Hk) * D
    assert native_prefill.supports(q, torch.empty_like(q), kc)
    got = _attend((q, kc, vc, qsl, lens, table), True, monkeypatch)
    want = _attend((q.contiguous(), kc, vc, qsl, lens, table), True, monkeypatch)
    assert torch.equal(got, want)


@pytest.mark.parametrize(("scale", "q_dtype"), [(0.125, torch.bfloat16), (0.1, torch.bfloat16),
                                                (0.125, torch.float32)])  # fmt: skip
def test_bf16_cache_dot_products(
    scale: float, q_dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bfloat16 cache with q exact in bfloat16 (bfloat16 q, any scale: the sums are
    scaled) takes q.k from AVX512-BF16 dot products where the CPU has them (exact
    products, float32 sums in another order); other q keep the float32 walk. Both match the
    -DNO_BF16_DOT build within float32 rounding."""
    step = _step(torch.bfloat16, True, 12, 4, (40, 70, 1), (40, 90, 33), seed=3, d=64, bs=16)
    q, *rest = step
    q = q.to(q_dtype)
    out = torch.empty_like(q, dtype=torch.float32)
    st, ln, ctx = torch.tensor([0, 40]), torch.tensor([40, 70]), rest[3][:2]
    args = (q, rest[0], rest[1], st, ln, ctx, rest[4][:2], scale)
    assert native_prefill.paged_prefill(*args, out=out)
    if native_prefill._kernel(("-DNO_BF16_DOT",)) is None:
        pytest.skip("the compiler did not build the variant")
    monkeypatch.setattr(native_prefill, "_BUILD_FLAGS", ("-DNO_BF16_DOT",))
    walk = torch.empty_like(out)
    assert native_prefill.paged_prefill(*args, out=walk)
    torch.testing.assert_close(out[:110], walk[:110], atol=2e-6, rtol=2e-5)


@pytest.mark.parametrize(
    ("d", "bs", "hq", "hk"), [(64, 16, 12, 4), (128, 32, 16, 8), (256, 16, 4, 2), (32, 16, 4, 4)]
)
def test_bf16_pv_pairs_stay_within_bf16_rounding_of_the_float32_pv(
    d: int, bs: int, hq: int, hk: int
) -> None:
    """Asked for (``bf16_pv_from``), a bfloat16 model (bfloat16 q, cache and output)
    multiplies P.V on bfloat16 pairs (the probabilities rounded, two keys a dot product)
    where the CPU has AVX512-BF16: its output stays within bfloat16 rounding of the float32
    P.V, tile tails of odd key counts included, and differs from it (the pairs ran). Asked
    from position 50 on, the rows before it have the float32 P.V's bits, the others the
    pairs' (a query tile holding both included)."""
    q, kc, vc, qsl, lens, table = _step(
        torch.bfloat16, False, hq, hk, (45, 70, 1), (45, 99, 37), seed=7, d=d, bs=bs
    )
    q_len = qsl[1:] - qsl[:-1]
    outs = []
    for pv_from in (0, None, 50):
        out = torch.empty_like(q)
        assert native_prefill.paged_prefill(
            q, kc, vc, qsl[:-1], q_len, lens, table, d**-0.5, out=out, bf16_pv_from=pv_from
        )
        outs.append(out[:116])  # every row (the third request's one at position 36)
    got, want, split = outs
    torch.testing.assert_close(got.float(), want.float(), atol=1.6e-2, rtol=1.6e-2)
    if "avx512_bf16" in cpu_flags():  # -march=native built the pairs
        assert not torch.equal(got, want)
    # positions: request 0's rows 0..44, request 1's 29..98 (rows 45..114), request 2's 36
    before = [*range(45 + 21), 115]
    after = list(range(45 + 21, 115))
    assert torch.equal(split[before], want[before]) and torch.equal(split[after], got[after])


def test_short_prefills_keep_float32_probabilities(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only prefills of LOW_PRECISION_PREFILL_MIN_TOKENS query tokens or more (on average)
    ask for the bf16 P.V: shorter ones compute what decode steps do, so a request replayed
    after a crash (its decoded tokens prefilled again) gets the same tokens."""
    seen: list[bool] = []
    real = native_prefill.paged_prefill

    def spy(*args: object, **kwargs: object) -> bool:
        seen.append(kwargs.get("bf16_pv_from") is not None)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(native_prefill, "paged_prefill", spy)
    for q_len in (40, 128):
        q, kc, vc, qsl, lens, table = _step(
            torch.bfloat16, False, 4, 2, (q_len,), (q_len,), seed=8, d=32, bs=16
        )
        paged_attention(q, kc, vc, qsl, lens, table, 32**-0.5)
    assert seen == [False, True]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_threads_change_no_bit(dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tasks share the K/V tiles the first reader packs (or pack a private copy while another
    thread packs one): any thread count gives the single thread's output bit for bit."""
    step = _step(dtype, True, 12, 4, (70, 33, 1, 50), (70, 90, 40, 50), seed=6, d=64, bs=16)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        want = _attend(step, True, monkeypatch)
        torch.set_num_threads(6)  # more threads than cores: they race for the tiles
        for _ in range(3):
            assert torch.equal(_attend(step, True, monkeypatch), want)
    finally:
        torch.set_num_threads(threads)
