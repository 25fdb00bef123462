"""The native weight-only GEMM against the dequantized weight's float32 product."""

from __future__ import annotations

import pytest
import torch

from actorllm.kernels import native, quant_gemm
from actorllm.models.quant.linear import pack_rows

pytestmark = pytest.mark.skipif(
    quant_gemm._fn() is None or not native.enabled(), reason="no native build here"
)


@pytest.mark.parametrize(
    ("bits", "gs", "i", "o", "m"),
    [
        (4, 32, 64, 48, 1),
        (4, 128, 512, 40, 5),
        (8, 64, 128, 24, 16),
        (4, 1024, 2048, 8, 2),
        (8, 96, 96, 8, 3),
        (8, 16, 256, 8, 1),  # GGUF Q6_K's groups of 16
    ],
)
def test_matches_the_dequantized_product(bits: int, gs: int, i: int, o: int, m: int) -> None:
    g = torch.Generator().manual_seed(bits * gs + m)
    q = torch.randint(0, 2**bits, (o, i), dtype=torch.uint8, generator=g)
    scales = torch.rand(o, i // gs, generator=g) * 0.01
    offsets = -torch.randint(0, 2**bits, (o, i // gs), generator=g).float() * scales
    bias = torch.randn(o, generator=g)
    x = torch.randn(m, i, generator=g)
    w = q.view(o, i // gs, gs).float() * scales[..., None] + offsets[..., None]  # [O, G, gs]
    ref = x @ w.view(o, i).t() + bias
    out = quant_gemm.wq_linear(x, pack_rows(q, bits), bits, scales, offsets, gs, bias)
    assert out is not None
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def _has_a8(bits: int) -> bool:
    """The int8-input kernels are built for x86 hosts with AVX2 only."""
    one, i = torch.ones(1, 1), 32
    packed = torch.zeros(1, i * bits // 8, dtype=torch.uint8)
    return quant_gemm.wq_linear_a8(torch.ones(1, i), packed, one, one, 32, None, bits) is not None


def _a8_reference(x: torch.Tensor, w: torch.Tensor, gs: int) -> torch.Tensor:
    """x [M, I] rounded to int8 per row and block (symmetric, half to even; blocks of
    min(gs, 256) columns, 32 for groups of 16), times w [O, I] in float64: what the int8-
    input kernels compute, up to the order of their float sums."""
    m, i = x.shape
    a = max(32, gs) if gs <= 256 else next(v for v in (256, 128, 64, 32) if gs % v == 0)
    xb = x.view(m, i // a, a)
    amax = xb.abs().amax(-1, keepdim=True)  # [M, B, 1]
    inv = torch.where(amax > 0, 127.0 / amax, torch.zeros_like(amax))
    xq = torch.round(xb * inv)  # [M, B, a], in [-127, 127]
    return ((xq * (amax / 127.0)).view(m, i).double() @ w.double().t()).float()


def _weights(bits: int, gs: int, i: int, o: int, g: torch.Generator) -> tuple[torch.Tensor, ...]:
    """(codes uint8 [O, I], scales, offsets float32 [O, G]): random, zero points in range."""
    q = torch.randint(0, 2**bits, (o, i), dtype=torch.uint8, generator=g)
    scales = torch.rand(o, i // gs, generator=g) * 0.01
    offsets = -torch.randint(0, 2**bits, (o, i // gs), generator=g).float() * scales
    return q, scales, offsets


@pytest.mark.parametrize(
    ("bits", "gs", "i", "o", "m"),
    [
        (4, 32, 64, 48, 1),  # GGUF Q4_0 / Q4_K groups: blocks taken in pairs
        (4, 32, 96, 8, 3),  # an odd number of them
        (4, 128, 512, 40, 5),  # GPTQ / AWQ
        (4, 128, 384, 24, 1),
        (4, 96, 192, 8, 2),
        (4, 1024, 2048, 8, 2),  # a group of many blocks of 256
        (4, 512, 512, 16, 16),  # one group per row
        (8, 32, 1024, 24, 1),  # GGUF Q8_0
        (8, 16, 256, 8, 3),  # GGUF Q6_K: two groups to a block of inputs
        (8, 32, 96, 8, 5),
        (8, 128, 512, 16, 6),
        (8, 1024, 2048, 8, 2),
    ],
)
def test_int8_inputs_give_the_product_of_rounded_inputs(
    bits: int, gs: int, i: int, o: int, m: int
) -> None:
    if not _has_a8(bits):
        pytest.skip("no int8-input kernel on this host (AVX2 only)")
    g = torch.Generator().manual_seed(bits + gs + i + m)
    q, scales, offsets = _weights(bits, gs, i, o, g)
    bias = torch.randn(o, generator=g)
    x = torch.randn(m, i, generator=g)
    x[0, : min(max(gs, 32), 256)] = 0.0  # an all-zero block
    w = (q.view(o, i // gs, gs).float() * scales[..., None] + offsets[..., None]).view(o, i)
    packed = pack_rows(q, bits)
    out = quant_gemm.wq_linear(x, packed, bits, scales, offsets, gs, bias, act_int8=True)
    assert out is not None
    torch.testing.assert_close(out, _a8_reference(x, w, gs) + bias, rtol=1e-5, atol=5e-6)
    # ... which is not the float product: the inputs really were rounded.
    assert not torch.allclose(out, x @ w.t() + bias, rtol=1e-5, atol=5e-6)


@pytest.mark.parametrize(
    ("bits", "gs", "i"),
    [
        (4, 32, 96),  # blocks of 32 one at a time (an odd number of them)
        (4, 32, 256),  # two to a 32-byte load
        (4, 96, 288), (4, 128, 384), (4, 384, 1152), (4, 1024, 2048),
        (8, 16, 96), (8, 32, 96), (8, 128, 384),
    ],
)  # fmt: skip
def test_int8_inputs_give_a_row_the_same_bits_in_any_batch(bits: int, gs: int, i: int) -> None:
    """A request's logits do not depend on what it is batched with (a replay after a crash
    batches differently, and recomputes decoded tokens in a prefill): one row alone, and as
    row 3 of 20 (rows taken 4 at a time; more rows than the float kernel takes)."""
    if not _has_a8(bits):
        pytest.skip("no int8-input kernel on this host (AVX2 only)")
    g = torch.Generator().manual_seed(gs)
    o = 40
    q = torch.randint(0, 2**bits, (o, i), dtype=torch.uint8, generator=g)
    scales, offsets = torch.rand(o, i // gs, generator=g), torch.rand(o, i // gs, generator=g)
    x = torch.randn(quant_gemm.MAX_ROWS + 4, i, generator=g)
    packed = pack_rows(q, bits)
    batch = quant_gemm.wq_linear(x, packed, bits, scales, offsets, gs, None, act_int8=True)
    alone = quant_gemm.wq_linear_a8(x[3:4].clone(), packed, scales, offsets, gs, None, bits)
    assert batch is not None and alone is not None
    assert torch.equal(batch[3:4], alone)


@pytest.mark.parametrize(
    ("gs", "i", "offsets"),
    [(32, 96, True), (32, 256, False), (96, 288, True), (128, 384, True), (128, 384, False),
     (1024, 2048, True)],
)  # fmt: skip
def test_w4a8_vnni_build_gives_the_vpmaddubsw_builds_bits(
    gs: int, i: int, offsets: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the host has AVX512-VNNI, vpdpbusd forms the integer lanes the vpmaddubsw path
    forms: every row count (1 alone; 20, taken 4 at a time) gives the same bits in both
    builds, so a checkpoint's outputs do not depend on the host's VNNI."""
    if not _has_a8(4):
        pytest.skip("no int8-input kernel on this host (AVX2 only)")
    g = torch.Generator().manual_seed(gs + i)
    o = 24
    q = torch.randint(0, 16, (o, i), dtype=torch.uint8, generator=g)
    scales = torch.rand(o, i // gs, generator=g) * 0.01
    offs = torch.rand(o, i // gs, generator=g) * 0.1 - 0.05 if offsets else None
    packed = pack_rows(q, 4)
    outs = []
    for flags in ((), ("-DNO_VNNI512",)):
        if quant_gemm._a8_lib(4, flags) is None:
            pytest.skip("the compiler did not build the variant")
        monkeypatch.setattr(quant_gemm, "_BUILD_FLAGS", flags)
        for m in (1, 20):
            x = torch.randn(m, i, generator=torch.Generator().manual_seed(m))
            out = quant_gemm.wq_linear_a8(x, packed, scales, offs, gs, None, 4)
            assert out is not None
            outs.append(out)
    assert all(torch.equal(a, b) for a, b in zip(outs[:2], outs[2:], strict=True))


@pytest.mark.parametrize(("gs", "i"), [(64, 256), (128, 384), (1024, 2048)])
def test_vector_quantized_inputs_are_the_scalar_loops_bits(
    gs: int, i: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """act8.h's AVX-512 path (blocks of 64-column units) rounds, orders and sums the inputs
    as its scalar loop does: the W4A8 product's bits are the same in both builds, an
    all-zero block and a NaN-free row of extremes included."""
    if not _has_a8(4):
        pytest.skip("no int8-input kernel on this host (AVX2 only)")
    g = torch.Generator().manual_seed(gs)
    o = 24
    q = torch.randint(0, 16, (o, i), dtype=torch.uint8, generator=g)
    scales = torch.rand(o, i // gs, generator=g) * 0.01
    offs = torch.rand(o, i // gs, generator=g) * 0.1 - 0.05
    x = torch.randn(5, i, generator=g)
    x[1, :gs] = 0.0
    x[2] = torch.tensor([0.5, -0.5, 1.5, -2.5]).repeat(i // 4) * 1e3  # exact halves
    outs = []
    for flags in ((), ("-DACT8_SCALAR",)):
        if quant_gemm._a8_lib(4, flags) is None:
            pytest.skip("the compiler did not build the variant")
        monkeypatch.setattr(quant_gemm, "_BUILD_FLAGS", flags)
        outs.append(quant_gemm.wq_linear_a8(x, pack_rows(q, 4), scales, offs, gs, None, 4))
    assert outs[0] is not None and outs[1] is not None
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize(("bits", "gs"), [(4, 16), (8, 48)])
def test_int8_inputs_leave_groups_they_do_not_take_to_the_float_kernel(bits: int, gs: int) -> None:
    """Groups the int8-input kernels do not take (4-bit: not a multiple of 32; 8-bit: not
    16 and not a multiple of 32): the float-input kernel runs."""
    g = torch.Generator().manual_seed(0)
    q = torch.randint(0, 2**bits, (8, 3 * gs), dtype=torch.uint8, generator=g)
    s, z = torch.rand(8, 3, generator=g), torch.zeros(8, 3)
    x = torch.randn(2, 3 * gs, generator=g)
    packed = pack_rows(q, bits)
    assert quant_gemm.wq_linear_a8(x, packed, s, z, gs, None, bits) is None
    a8 = quant_gemm.wq_linear(x, packed, bits, s, z, gs, None, act_int8=True)
    assert a8 is not None
    assert torch.equal(a8, quant_gemm.wq_linear(x, packed, bits, s, z, gs, None))


def test_gguf_a8_switch() -> None:
    assert quant_gemm.gguf_a8_enabled({})
    assert not quant_gemm.gguf_a8_enabled({"ACTORLLM_CPU_GGUF_A8": "0"})
    with pytest.raises(ValueError, match="ACTORLLM_CPU_GGUF_A8: must be 0 or 1, got 'on'"):
        quant_gemm.gguf_a8_enabled({"ACTORLLM_CPU_GGUF_A8": "on"})


def test_w4a8_switch_reads_vllm_and_actorllm_names() -> None:
    assert quant_gemm.w4a8_enabled({})
    assert not quant_gemm.w4a8_enabled({"VLLM_CPU_INT4_W4A8": "0"})
    assert not quant_gemm.w4a8_enabled({"ACTORLLM_CPU_INT4_W4A8": "0"})
    assert quant_gemm.w4a8_enabled({"ACTORLLM_CPU_INT4_W4A8": "1", "VLLM_CPU_INT4_W4A8": "0"})
    with pytest.raises(ValueError, match="VLLM_CPU_INT4_W4A8: must be 0 or 1, got 'yes'"):
        quant_gemm.w4a8_enabled({"VLLM_CPU_INT4_W4A8": "yes"})


@pytest.mark.parametrize(("bits", "gs"), [(4, 32), (4, 128), (8, 16), (8, 64)])
def test_dequant_is_the_torch_paths_value_exactly(bits: int, gs: int) -> None:
    g = torch.Generator().manual_seed(bits + gs)
    q = torch.randint(0, 2**bits, (24, 256), dtype=torch.uint8, generator=g)
    scales = torch.rand(24, 256 // gs, generator=g) * 0.01
    offsets = -torch.rand(24, 256 // gs, generator=g)
    w = quant_gemm.wq_dequant(pack_rows(q, bits), bits, scales, offsets, gs)
    assert w is not None
    want = q.view(24, -1, gs).float() * scales[..., None] + offsets[..., None]
    assert torch.equal(w, want.view(24, 256))


@pytest.mark.parametrize(("bits", "gs"), [(4, 32), (8, 16), (8, 32)])
def test_symmetric_codes_need_no_offsets(bits: int, gs: int) -> None:
    """offsets None (GGUF's Q4_0, Q8_0, Q6_K): w = (q - 2^(bits - 1)) * scale, exactly,
    and every kernel gives the bits it gives with the offsets -2^(bits - 1) * scale stored
    (on AVX2, where those kernels run)."""
    g = torch.Generator().manual_seed(bits * gs)
    i, mid = 256, 1 << (bits - 1)
    q = torch.randint(0, 2**bits, (24, i), dtype=torch.uint8, generator=g)
    # Scales as GGUF's (an f16 times a 6-bit integer): q * s may round, (q - mid) * s not.
    scales = (torch.rand(24, i // gs, generator=g) * 0.01).half().float() * 63
    packed, offsets = pack_rows(q, bits), -mid * scales
    w = quant_gemm.wq_dequant(packed, bits, scales, None, gs)
    want = (q.view(24, -1, gs).float() - mid) * scales[..., None]
    assert w is not None and torch.equal(w, want.view(24, i))
    if not _has_a8(4):
        return
    for m in (1, 5):
        x = torch.randn(m, i, generator=g)
        for a8 in (False, True):
            stored = quant_gemm.wq_linear(x, packed, bits, scales, offsets, gs, None, a8)
            assert stored is not None
            assert torch.equal(quant_gemm.wq_linear(x, packed, bits, scales, None, gs, None, a8),
                               stored)  # fmt: skip


def test_calls_it_does_not_take_return_none() -> None:
    q = torch.zeros(4, 24, dtype=torch.uint8)  # I = 24: not a multiple of 16
    s, z = torch.ones(4, 1), torch.zeros(4, 1)
    assert quant_gemm.wq_linear(torch.ones(1, 24), q, 8, s, z, 24, None) is None
    many = torch.ones(quant_gemm.MAX_ROWS + 1, 32)
    assert (
        quant_gemm.wq_linear(many, torch.zeros(4, 16, dtype=torch.uint8), 4, s, z, 32, None) is None
    )


@pytest.mark.parametrize("m", [1, 5, 16])
def test_i8_gemm_is_exact_for_quantized_rows_and_any_weight(m: int) -> None:
    """Inputs as quantize_rows makes them (no -128; the SIMD path), weights with -128."""
    g = torch.Generator().manual_seed(m)
    q = torch.randint(-127, 128, (m, 160), dtype=torch.int8, generator=g)
    w = torch.randint(-128, 128, (24, 160), dtype=torch.int8, generator=g)
    w[0] = -128
    q[0, :] = -127
    out = quant_gemm.i8_gemm(q, w)
    assert out is not None
    assert torch.equal(out.long(), q.long() @ w.long().t())
