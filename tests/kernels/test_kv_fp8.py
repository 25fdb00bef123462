"""An fp8 KV cache (kernels/kv_quant.py): the write saturates and scales, and the native
decode and prefill kernels read it as the torch reference reads the dequantized cache."""

from __future__ import annotations

import pytest
import torch

from actorllm.kernels import attention_plan, kv_quant
from actorllm.kernels import paged_decode as native_decode
from actorllm.kernels import paged_prefill as native_prefill
from actorllm.kernels.attention import paged_attention
from actorllm.kernels.elementwise import cpu_write_kv_cache
from actorllm.kernels.kv_cache import write_kv_cache
from tests.helpers.native_builds import BUILDS, use_build

FP8 = [torch.float8_e4m3fn, torch.float8_e5m2]
IDS = ["e4m3", "e5m2"]
native = pytest.mark.skipif(
    not native_decode.supports(torch.empty(1, 1, 1, 1)),
    reason="the native kernels did not build here (see actorllm.kernels.native)",
)


@pytest.mark.parametrize("write", [write_kv_cache, cpu_write_kv_cache], ids=["torch", "cpu"])
@pytest.mark.parametrize("dtype", FP8, ids=IDS)
def test_write_divides_by_the_scale_and_saturates(write: object, dtype: torch.dtype) -> None:
    """Values past the format's range are stored as its largest finite value (plain
    ``.to(float8)`` gives NaN there), after division by the scale; padding is skipped."""
    top = kv_quant.fp8_max(dtype)
    key = torch.tensor([[[1e9, -1e9, 2.0, 0.5]], [[3.0, 4.0, -8.0, 1.0]]])  # [T=2, Hk=1, D]
    # [NB, BS, Hk, D] views of block-major storage, as the CPU worker allocates them
    kc, vc = (torch.zeros(3, 1, 2, 4, dtype=dtype).permute(0, 2, 1, 3) for _ in range(2))
    slots = torch.tensor([3, -1])  # block 1, offset 1; the second is padding
    write(key, key * 2, kc, vc, slots, 2.0, 4.0)  # type: ignore[operator]
    torch.testing.assert_close(kc[1, 1, 0].float(), torch.tensor([top, -top, 1.0, 0.25]))
    torch.testing.assert_close(vc[1, 1, 0].float(), torch.tensor([top, -top, 1.0, 0.25]))
    assert not kc.float().isnan().any() and kc.float().count_nonzero() == 4


def _case(dtype: torch.dtype, lens: tuple[int, ...], hq: int = 6, hk: int = 2, d: int = 32):
    g = torch.Generator().manual_seed(0)
    bs = 16
    max_blocks = -(-max(lens) // bs)
    nb = len(lens) * max_blocks + 1
    full = [torch.randn(nb, hk, bs, d, generator=g) * 3 for _ in range(2)]  # block-major
    table = torch.randperm(nb - 1, generator=g)[: len(lens) * max_blocks] + 1
    return full, table.view(len(lens), max_blocks).int(), torch.tensor(lens, dtype=torch.int32)


def _quantized(full: torch.Tensor, dtype: torch.dtype, scale: float) -> torch.Tensor:
    return kv_quant.quantize(full, dtype, scale).permute(0, 2, 1, 3)  # [NB, BS, Hk, D]


def _reference(q, kc, vc, qsl, lens, table, scales, monkeypatch):  # type: ignore[no-untyped-def]
    """The torch path on the dequantized caches."""
    kd = kv_quant.dequantize(kc, scales[0])
    vd = kv_quant.dequantize(vc, scales[1])
    with monkeypatch.context() as m:
        m.setattr(native_decode, "supports", lambda cache: False)
        m.setattr(native_prefill, "supports", lambda q, out, cache: False)
        return paged_attention(q, kd, vd, qsl, lens, table, 0.2)


@native
@pytest.mark.parametrize("build", list(BUILDS))
@pytest.mark.parametrize("dtype", FP8, ids=IDS)
@pytest.mark.parametrize(("hq", "hk", "d"), [(6, 2, 32), (4, 4, 64), (3, 1, 24)])
def test_native_kernels_read_fp8_as_the_reference_reads_it_dequantized(
    build: str, dtype: torch.dtype, hq: int, hk: int, d: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mixed step (decodes and prefills) on an fp8 cache with scales != 1: the native
    kernels (every build) agree with the reference on the dequantized cache to float32
    rounding, and with the unquantized float32 cache to fp8 rounding."""
    use_build(native_decode, native_decode._kernel, build, monkeypatch)
    use_build(native_prefill, native_prefill._kernel, build, monkeypatch)
    lens = (1, 20, 37, 70, 9)
    q_lens = [1, 5, 1, 12, 9]  # decodes and prefills (one after a cached prefix)
    (kf, vf), table, lens_t = _case(dtype, lens, hq, hk, d)
    scales = (2.0, 0.5)
    kc, vc = _quantized(kf, dtype, scales[0]), _quantized(vf, dtype, scales[1])
    qsl = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    q = torch.randn(int(qsl[-1]), hq, d, generator=torch.Generator().manual_seed(1))
    got = paged_attention(q, kc, vc, qsl, lens_t, table, 0.2, k_scale=2.0, v_scale=0.5)
    want = _reference(q, kc, vc, qsl, lens_t, table, scales, monkeypatch)
    torch.testing.assert_close(got, want, atol=3e-5, rtol=3e-5)
    plain = paged_attention(q, kf.permute(0, 2, 1, 3), vf.permute(0, 2, 1, 3), qsl, lens_t,
                            table, 0.2)  # fmt: skip
    loose = 0.08 if dtype == torch.float8_e4m3fn else 0.2  # 3 or 2 mantissa bits

    def error(x: torch.Tensor) -> float:
        return float((x - plain).norm() / plain.norm())

    assert error(got) < loose
    wrong = paged_attention(q, kc, vc, qsl, lens_t, table, 0.2, k_scale=1.0, v_scale=1.0)
    assert error(wrong) > 5 * error(got)  # the scales matter


@native
@pytest.mark.parametrize("dtype", FP8, ids=IDS)
def test_fp8_caches_go_through_both_native_kernels(
    dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fp8 caches are read in place by the native kernels, not gathered for SDPA."""
    (kf, vf), table, lens_t = _case(dtype, (30, 3))
    kc, vc = _quantized(kf, dtype, 1.0), _quantized(vf, dtype, 1.0)
    assert native_decode.supports(kc)
    monkeypatch.setattr(attention_plan, "SHORT_QUERY_MAX", 1)  # the 3-token run prefills
    calls: list[str] = []
    for mod, name in ((native_decode, "paged_decode"), (native_prefill, "paged_prefill")):
        real = getattr(mod, name)

        def spy(*a: object, _real: object = real, _name: str = name, **k: object) -> object:
            calls.append(_name)
            return _real(*a, **k)  # type: ignore[operator]

        monkeypatch.setattr(mod, name, spy)
    qsl = torch.tensor([0, 1, 4], dtype=torch.int32)
    paged_attention(torch.randn(4, 6, 32), kc, vc, qsl, lens_t, table, 0.2)
    assert sorted(calls) == ["paged_decode", "paged_prefill"]


@native
@pytest.mark.parametrize("dtype", FP8, ids=IDS)
def test_sinks_over_an_fp8_cache(dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    """gpt-oss's sinks and an fp8 cache together: the native kernels agree with the
    reference (sinks too) on the dequantized cache."""
    lens, q_lens = (1, 20, 37), [1, 5, 7]
    (kf, vf), table, lens_t = _case(dtype, lens)
    kc, vc = _quantized(kf, dtype, 2.0), _quantized(vf, dtype, 0.5)
    qsl = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    q = torch.randn(int(qsl[-1]), 6, 32, generator=torch.Generator().manual_seed(2))
    sinks = torch.randn(6, generator=torch.Generator().manual_seed(3)) * 2
    got = paged_attention(q, kc, vc, qsl, lens_t, table, 0.2, sinks=sinks, k_scale=2.0,
                          v_scale=0.5)  # fmt: skip
    kd, vd = kv_quant.dequantize(kc, 2.0), kv_quant.dequantize(vc, 0.5)
    with monkeypatch.context() as m:
        m.setattr(native_decode, "supports", lambda cache: False)
        m.setattr(native_prefill, "supports", lambda q, out, cache: False)
        want = paged_attention(q, kd, vd, qsl, lens_t, table, 0.2, sinks=sinks)
    torch.testing.assert_close(got, want, atol=3e-5, rtol=3e-5)
    no_sinks = paged_attention(q, kc, vc, qsl, lens_t, table, 0.2, k_scale=2.0, v_scale=0.5)
    assert (got - no_sinks).abs().max() > 1e-3  # the sinks matter
