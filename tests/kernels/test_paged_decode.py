"""The native decode kernel (kernels/csrc/paged_decode.c) against the torch reference, on the
caches the engine really has: float32 and bfloat16, head-major and plain, GQA, sliding
window, soft cap. (tests/kernels/test_attention.py runs every mixed-batch case both ways.)"""

from __future__ import annotations

import pytest
import torch

from actorllm.kernels import paged_decode as native_decode
from actorllm.kernels.attention import paged_attention
from actorllm.kernels.cpu_features import cpu_flags
from tests.helpers.native_builds import BUILDS, use_build

BS = 4

pytestmark = pytest.mark.skipif(
    not native_decode.supports(torch.empty(1, 1, 1, 1)),
    reason="the native kernel did not build here (see actorllm.kernels.native)",
)


# The worker's storage layouts (worker/kv_cache.py): {layout: (the stored shape as an
# order of (NB, BS, Hk, D); the permutation back to the [NB, BS, Hk, D] view)}.
LAYOUTS = {
    "contiguous": ((0, 1, 2, 3), (0, 1, 2, 3)),
    "head_major": ((2, 0, 1, 3), (1, 2, 0, 3)),
    "block_major": ((0, 2, 1, 3), (0, 2, 1, 3)),
}


def _case(
    dtype: torch.dtype, layout: str, hq: int, hk: int, seed: int = 0, d: int = 16,
    bs: int = BS, lens: tuple[int, ...] = (1, 5, 17, 40, 63),
) -> tuple[torch.Tensor, ...]:  # fmt: skip
    g = torch.Generator().manual_seed(seed)
    max_blocks = -(-max(lens) // bs)
    nb = len(lens) * max_blocks + 1
    order, back = LAYOUTS[layout]
    dims = (nb, bs, hk, d)
    shape = tuple(dims[i] for i in order)

    def cache() -> torch.Tensor:
        return torch.randn(shape, generator=g).to(dtype).permute(*back)  # [NB, BS, Hk, D]

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


@pytest.fixture(params=list(BUILDS))
def build(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The kernel as built for this host, its AVX2 tiles and its portable C path
    (tests/helpers/native_builds.py)."""
    use_build(native_decode, native_decode._kernel, str(request.param), monkeypatch)
    return str(request.param)


@pytest.mark.usefixtures("build")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize(("hq", "hk"), [(4, 4), (6, 2), (4, 1)])
@pytest.mark.parametrize(("window", "softcap"), [(None, None), (7, None), (None, 3.0), (9, 2.0)])
def test_native_decode_matches_the_torch_path(
    dtype: torch.dtype, layout: str, hq: int, hk: int, window: int | None,
    softcap: float | None, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    q, kc, vc, lens, table = _case(dtype, layout, hq, hk)
    got = native_decode.paged_decode(q, kc, vc, lens, table, 0.25, window, softcap)
    assert got is not None and got.dtype == torch.float32 and got.shape == q.shape
    want = _reference(q, kc, vc, lens, table, window, softcap, monkeypatch)
    # Both read the same values and compute in float32: only summation order differs; the
    # reference hands back q's dtype, so a bf16 case compares after the same rounding.
    # (One bf16 ulp apart where the float32 sums straddle a rounding boundary.)
    tol = 2e-5 if dtype == torch.float32 else 8e-3
    torch.testing.assert_close(got.to(dtype).float(), want, atol=tol, rtol=tol)


@pytest.mark.usefixtures("build")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize(("hq", "hk", "d"), [(4, 4, 16), (6, 2, 16), (8, 2, 64), (4, 1, 8)])
@pytest.mark.parametrize("window", [None, 7])
def test_native_decode_with_sinks_matches_the_torch_path(
    dtype: torch.dtype, hq: int, hk: int, d: int, window: int | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """gpt-oss's attention sinks (a logit per head with no value) through the tile walks
    (d 16 and 64: AVX-512 / AVX2 tiles) and the portable one (d 8), sinks below and far
    above the scores."""
    q, kc, vc, lens, table = _case(dtype, "head_major", hq, hk, d=d)
    sinks = torch.linspace(-2.0, 30.0, hq)
    qsl = torch.arange(len(lens) + 1, dtype=torch.int32)
    got = paged_attention(q, kc, vc, qsl, lens, table, 0.25, window, sinks=sinks)
    with monkeypatch.context() as m:
        m.setattr(native_decode, "supports", lambda cache: False)
        want = paged_attention(q, kc, vc, qsl, lens, table, 0.25, window, sinks=sinks)
        plain = paged_attention(q, kc, vc, qsl, lens, table, 0.25, window)
    tol = 1e-5 if dtype == torch.float32 else 8e-3
    torch.testing.assert_close(got.float(), want.float(), atol=tol, rtol=tol)
    assert not torch.allclose(want.float(), plain.float(), atol=1e-2)


def test_bf16_layer_output_goes_through_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """paged_attention on a bf16 cache takes the native path (the torch grouping is never
    asked) and returns q's dtype."""
    q, kc, vc, lens, table = _case(torch.bfloat16, "head_major", 4, 2, seed=3)
    calls = []
    real = native_decode.paged_decode

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(native_decode, "paged_decode", counted)
    qsl = torch.arange(len(lens) + 1, dtype=torch.int32)
    out = paged_attention(q, kc, vc, qsl, lens, table, 0.25)
    assert calls == [1] and out.dtype == torch.bfloat16


@pytest.mark.usefixtures("build")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize(
    ("d", "bs", "hq", "hk"),
    [
        (64, 16, 12, 4),  # the 75M preset's layer: a specialised tile kernel
        (48, 4, 6, 1),  # G = 6, D = 48: the unspecialised AVX-512 tile kernel
        (32, 32, 4, 2),  # 32-token blocks: two 16-key tiles per block
        (128, 128, 16, 8),  # vLLM's CPU block size at Qwen3-0.6B's layer (8 tiles a block)
        (256, 16, 2, 1),  # D = 256 (Gemma's): the unspecialised tile kernel
        (256, 8, 8, 1),  # and with G = 8
        (24, 16, 3, 1),  # D not a multiple of 16: the portable walk, never a tile kernel
    ],
)
@pytest.mark.parametrize("window", [None, 20])
def test_native_decode_shapes(
    dtype: torch.dtype, d: int, bs: int, hq: int, hk: int, window: int | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Every code path the kernel dispatches to, on long contexts whose running max moves
    (the online softmax rescales), partial first (window) and last blocks."""
    lens = (1, 16, 17, 130, 200)
    q, kc, vc, lens_t, table = _case(dtype, "block_major", hq, hk, seed=1, d=d, bs=bs, lens=lens)
    q = q * 4  # larger scores: the max moves tile to tile
    got = native_decode.paged_decode(q, kc, vc, lens_t, table, 0.25, window, None)
    want = _reference(q, kc, vc, lens_t, table, window, None, monkeypatch)
    tol = 2e-5 if dtype == torch.float32 else 8e-3
    assert got is not None
    torch.testing.assert_close(got.to(dtype).float(), want, atol=tol, rtol=tol)


@pytest.mark.usefixtures("build")
def test_garbage_past_the_context_is_never_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Slots past a request's length (the rest of its last block) may hold anything, NaN
    included: they must not reach the output."""
    q, kc, vc, lens, table = _case(torch.float32, "block_major", 6, 2, seed=2, bs=16)
    want = _reference(q, kc, vc, lens, table, None, None, monkeypatch)
    for cache in (kc, vc):
        for i, n in enumerate(lens.tolist()):
            last = int(table[i, (n - 1) // 16])
            cache[last, n % 16 or 16 :] = float("nan")
    got = native_decode.paged_decode(q, kc, vc, lens, table, 0.25)
    assert got is not None
    torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5)


@pytest.mark.usefixtures("build")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_reads_and_writes_the_decode_rows_in_place(dtype: torch.dtype) -> None:
    """With ``rows`` and ``out`` the kernel reads q's decode rows where they are and writes
    the results (rounded to out's dtype as torch rounds) into those rows of out only."""
    q, kc, vc, lens, table = _case(dtype, "block_major", 6, 2, seed=4)
    n = len(lens)
    rows = torch.tensor([5, 0, 3, 6, 1])  # decode i is row rows[i] of a 7-row step
    q_step = torch.randn(7, *q.shape[1:]).to(dtype)
    q_step[rows] = q
    out = torch.full_like(q_step, 7.0)
    got = native_decode.paged_decode(q_step, kc, vc, lens, table, 0.25, rows=rows, out=out)
    want = native_decode.paged_decode(q, kc, vc, lens, table, 0.25)  # [N, Hq, D] float32
    assert got is out and want is not None and n == rows.shape[0]
    assert torch.equal(out[rows], want.to(dtype))
    assert (out[[2, 4]] == 7.0).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_q_as_a_view_of_fused_qkv_is_read_in_place(
    dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    """q sliced out of a fused qkv projection (rows apart, heads packed) goes to the kernel
    as it is, no copy, and gives the contiguous q's result."""
    _, kc, vc, lens, table = _case(dtype, "block_major", 6, 2, seed=5)
    n, hq, d = len(lens), 6, 16
    qkv = torch.randn(n, (hq + 4) * d).to(dtype)  # [T, (Hq + 2 Hk) * D]
    q = qkv[:, : hq * d].view(n, hq, d)  # [T, Hq, D], row stride (Hq + 2 Hk) * D
    seen = []
    real = native_decode.paged_decode

    def spy(q_arg: torch.Tensor, *args: object, **kwargs: object) -> object:
        seen.append(q_arg.data_ptr() == q.data_ptr())
        return real(q_arg, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(native_decode, "paged_decode", spy)
    qsl = torch.arange(n + 1, dtype=torch.int32)
    got = paged_attention(q, kc, vc, qsl, lens, table, 0.25)
    want = paged_attention(q.contiguous(), kc, vc, qsl, lens, table, 0.25)
    assert seen == [True, False] and got.dtype == dtype
    torch.testing.assert_close(got, want, atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("window", [None, 7])
def test_next_task_prefetch_changes_no_bit(
    dtype: torch.dtype, window: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prefetching the next task's first blocks (and the chunked schedule that lets a
    thread know it) is a hint only: the same output as the task-at-a-time build, for
    tasks whose contexts end mid-block, at a block's end and inside the first blocks."""
    kw = {"seed": 3, "d": 64, "bs": 16, "lens": (1, 15, 16, 17, 40, 63, 200, 33, 2)}
    q, kc, vc, lens, table = _case(dtype, "block_major", 12, 4, **kw)  # type: ignore[arg-type]
    got = native_decode.paged_decode(q, kc, vc, lens, table, 0.125, window, None)
    off = ("-DNO_NEXT_TASK_PREFETCH", "-DTASK_CHUNK=1")
    if native_decode._kernel(off) is None:
        pytest.skip("the compiler did not build the variant")
    monkeypatch.setattr(native_decode, "_BUILD_FLAGS", off)
    want = native_decode.paged_decode(q, kc, vc, lens, table, 0.125, window, None)
    assert got is not None and want is not None and torch.equal(got, want)


def _variant(monkeypatch: pytest.MonkeyPatch, flags: tuple[str, ...]) -> None:
    if native_decode._kernel(flags) is None:
        pytest.skip("the compiler did not build the variant")
    monkeypatch.setattr(native_decode, "_BUILD_FLAGS", flags)


@pytest.mark.parametrize(
    ("d", "bs", "hq", "hk", "lens"),
    [
        (64, 16, 12, 4, (1, 15, 16, 17, 40, 63, 200, 33, 2)),  # the 75M preset's layer
        (32, 32, 6, 2, (3, 31, 32, 33, 97)),  # D = 32: one dot product per key
        (128, 8, 8, 1, (1, 7, 9, 130)),  # D = 128, G = 8
        (96, 16, 5, 5, (5, 50, 111)),  # D = 96 (NC = 6, the unspecialised tile), no GQA
    ],
)
@pytest.mark.parametrize(("window", "softcap"), [(None, None), (20, None), (None, 3.0)])
def test_bf16_dot_products_match_the_float32_walk(
    d: int, bs: int, hq: int, hk: int, lens: tuple[int, ...], window: int | None,
    softcap: float | None, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """A bfloat16 cache with q exact in bfloat16 (bfloat16 q, a power-of-two scale) takes
    q.k from AVX512-BF16 dot products where the CPU has them: every product is exact, only
    the order of the float32 sums differs, so the float32 output stays within float32
    rounding of the widening walk (-DNO_BF16_DOT), and matches the torch reference (bfloat16
    output) as the walk does, over several block tables."""
    for seed in (0, 1, 2):
        q, kc, vc, lens_t, table = _case(
            torch.bfloat16, "block_major", hq, hk, seed=seed, d=d, bs=bs, lens=lens
        )
        q = q * 4  # larger scores: the max moves tile to tile
        got = native_decode.paged_decode(q, kc, vc, lens_t, table, 0.25, window, softcap)
        with monkeypatch.context() as m:
            _variant(m, ("-DNO_BF16_DOT",))
            walk = native_decode.paged_decode(q, kc, vc, lens_t, table, 0.25, window, softcap)
        want = _reference(q, kc, vc, lens_t, table, window, softcap, monkeypatch)
        assert got is not None and walk is not None
        torch.testing.assert_close(got, walk, atol=2e-6, rtol=2e-5)
        # the reference rounds its output to q's bfloat16
        torch.testing.assert_close(got.to(torch.bfloat16).float(), want, atol=8e-3, rtol=8e-3)


def test_bf16_dot_products_only_where_q_is_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    """q that bfloat16 would round (a float32 q) keeps the float32 walk: bit for bit the
    -DNO_BF16_DOT build's output."""
    kw = {"seed": 4, "d": 64, "bs": 16, "lens": (1, 15, 16, 17, 40, 63, 200, 33, 2)}
    q, kc, vc, lens, table = _case(torch.bfloat16, "block_major", 12, 4, **kw)  # type: ignore[arg-type]
    q = q.float() + 1e-3
    got = native_decode.paged_decode(q, kc, vc, lens, table, 0.125, None, None)
    _variant(monkeypatch, ("-DNO_BF16_DOT",))
    want = native_decode.paged_decode(q, kc, vc, lens, table, 0.125, None, None)
    assert got is not None and want is not None and torch.equal(got, want)


def test_bf16_dot_products_with_a_scale_that_is_not_a_power_of_two(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """head_dim 128's 1 / sqrt(128): the dot products take the unscaled q and scale the
    sums (one more rounding, after the sum): within float32 rounding of the walk, which
    scales q first, and not its bits (the dot products ran)."""
    kw = {"seed": 4, "d": 128, "bs": 16, "lens": (1, 15, 16, 17, 40, 63, 200, 33, 2)}
    q, kc, vc, lens, table = _case(torch.bfloat16, "block_major", 16, 8, **kw)  # type: ignore[arg-type]
    q = q * 4  # larger scores: the max moves tile to tile
    scale = 128**-0.5
    got = native_decode.paged_decode(q, kc, vc, lens, table, scale, None, None)
    _variant(monkeypatch, ("-DNO_BF16_DOT",))
    walk = native_decode.paged_decode(q, kc, vc, lens, table, scale, None, None)
    assert got is not None and walk is not None
    torch.testing.assert_close(got, walk, atol=2e-6, rtol=2e-5)
    if "avx512_bf16" in cpu_flags():  # -march=native built the dot products
        assert not torch.equal(got, walk)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_head_loop_barrier_changes_no_bit(
    dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compiler barrier in the per-head score loop only changes where K is loaded from."""
    kw = {"seed": 5, "d": 64, "bs": 16, "lens": (1, 15, 16, 17, 40, 63, 200, 33, 2)}
    q, kc, vc, lens, table = _case(dtype, "block_major", 12, 4, **kw)  # type: ignore[arg-type]
    q = q.float() + 1e-3  # not exact in bfloat16: the float32 walk on a bfloat16 cache too
    _variant(monkeypatch, ("-DNO_BF16_DOT",))
    got = native_decode.paged_decode(q, kc, vc, lens, table, 0.125, 7, None)
    _variant(monkeypatch, ("-DNO_BF16_DOT", "-DNO_GI_BARRIER"))
    want = native_decode.paged_decode(q, kc, vc, lens, table, 0.125, 7, None)
    assert got is not None and want is not None and torch.equal(got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_heads_per_task_change_no_bit(
    dtype: torch.dtype, layout: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task walks all of its request's KV heads block by block, or, with few requests for
    the threads, a group of them: each head meets its tiles in the same order either way,
    so one head per task (-DMIN_TASKS_PER_THREAD past any batch) gives the same bits."""
    kw = {"seed": 6, "d": 64, "bs": 16, "lens": (1, 15, 16, 17, 40, 63, 200, 33, 2)}
    q, kc, vc, lens, table = _case(dtype, layout, 12, 4, **kw)  # type: ignore[arg-type]
    got = native_decode.paged_decode(q, kc, vc, lens, table, 0.125, None, None)
    _variant(monkeypatch, ("-DMIN_TASKS_PER_THREAD=100000",))
    want = native_decode.paged_decode(q, kc, vc, lens, table, 0.125, None, None)
    assert got is not None and want is not None and torch.equal(got, want)
