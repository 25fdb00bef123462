"""The torch reference paged attention (the CPU path) against a dense, per-token float64
oracle: plain and head-major caches, a plan reused across layers, sliding windows, mixed
prefill/decode steps (the decode grouping's cost: test_attention_plan.py)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from actorllm.kernels import attention, attention_plan
from actorllm.kernels import paged_decode as native_decode
from actorllm.kernels.attention import paged_attention
from actorllm.kernels.attention_plan import AttentionPlan
from actorllm.kernels.kv_cache import write_kv_cache

BS = 4


@pytest.fixture(autouse=True, params=["native", "torch"])
def decode_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test runs decode rows through the native kernel and through the torch
    grouping (the fallback where no C compiler is found)."""
    if request.param == "torch":
        monkeypatch.setattr(native_decode, "supports", lambda cache: False)
    elif not native_decode.supports(torch.empty(1, 1, 1, 1)):
        pytest.skip("the native kernel did not build here (see actorllm.kernels.native)")
    return str(request.param)


def _oracle(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    qsl: list[int],
    lens: list[int],
    table: torch.Tensor,
    scale: float,
    window: int | None,
    softcap: float | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Token by token, in float64, reading the cache's logical [NB, BS, Hk, D] layout;
    ``sinks`` [Hq]: one more logit per head in the softmax, its value dropped."""
    out = torch.zeros(q.shape, dtype=torch.float64)
    hq, hk = q.shape[1], k_cache.shape[2]
    for b in range(len(lens)):
        keys = torch.stack(
            [k_cache[table[b, p // BS], p % BS] for p in range(lens[b])]
        ).double()  # [S, Hk, D]
        vals = torch.stack([v_cache[table[b, p // BS], p % BS] for p in range(lens[b])]).double()
        q_len = qsl[b + 1] - qsl[b]
        for i in range(q_len):
            pos = lens[b] - q_len + i
            for h in range(hq):
                kh = h // (hq // hk)
                s = keys[: pos + 1, kh] @ q[qsl[b] + i, h].double() * scale
                if softcap is not None:
                    s = softcap * torch.tanh(s / softcap)
                if window is not None:
                    s[: max(0, pos + 1 - window)] = -math.inf
                if sinks is not None:
                    s = torch.cat([s, sinks[h : h + 1].double()])
                p = torch.softmax(s, 0)[: pos + 1]
                out[qsl[b] + i, h] = p @ vals[: pos + 1, kh]
    return out


def _caches(nb: int, hk: int, d: int, head_major: bool) -> tuple[torch.Tensor, torch.Tensor]:
    def one() -> torch.Tensor:
        if head_major:
            return torch.randn(hk, nb, BS, d).permute(1, 2, 0, 3)  # [NB, BS, Hk, D] view
        return torch.randn(nb, BS, hk, d)

    return one(), one()


def _step(
    q_lens: list[int], lens: list[int], hq: int, d: int, nb: int, seed: int
) -> tuple[torch.Tensor, list[int], torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    qsl = [0, *itertools.accumulate(q_lens)]
    max_blocks = max(-(-n // BS) for n in lens)
    perm = torch.randperm(nb - 1, generator=g)[: len(lens) * max_blocks] + 1
    table = perm.view(len(lens), max_blocks).int()
    q = torch.randn(qsl[-1], hq, d, generator=g)
    return q, qsl, table


@pytest.mark.parametrize("head_major", [False, True], ids=["plain", "head-major"])
@pytest.mark.parametrize("window", [None, 5])
@pytest.mark.parametrize("hq,hk", [(4, 4), (4, 2), (4, 1)])
def test_matches_dense_oracle(head_major: bool, window: int | None, hq: int, hk: int) -> None:
    d, nb = 8, 64
    # Decodes of very different lengths (several groups), a prefill after a prefix hit,
    # a whole-prompt prefill, and a one-token context.
    q_lens = [1, 3, 1, 1, 6, 1, 1]
    lens = [9, 7, 1, 30, 6, 31, 4]
    q, qsl, table = _step(q_lens, lens, hq, d, nb, seed=hq * 10 + hk)
    kc, vc = _caches(nb, hk, d, head_major)
    args = (
        q,
        kc,
        vc,
        torch.tensor(qsl, dtype=torch.int32),
        torch.tensor(lens, dtype=torch.int32),
        table,
        d**-0.5,
        window,
    )
    got = paged_attention(*args)
    want = _oracle(q, kc, vc, qsl, lens, table, d**-0.5, window)
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("window", [None, 5])
@pytest.mark.parametrize("hq,hk", [(4, 4), (4, 2)])
def test_softcap_matches_dense_oracle(window: int | None, hq: int, hk: int) -> None:
    """Gemma 2's capped scores: decodes in groups and prefills, GQA, with and without a window."""
    d, nb = 8, 64
    q_lens, lens = [1, 3, 1, 6], [9, 7, 30, 6]
    q, qsl, table = _step(q_lens, lens, hq, d, nb, seed=5)
    q = q * 4  # scores well past the cap's linear range
    kc, vc = _caches(nb, hk, d, head_major=True)
    qsl_t, lens_t = torch.tensor(qsl, dtype=torch.int32), torch.tensor(lens, dtype=torch.int32)
    got = paged_attention(q, kc, vc, qsl_t, lens_t, table, d**-0.5, window, softcap=2.0)
    want = _oracle(q, kc, vc, qsl, lens, table, d**-0.5, window, softcap=2.0)
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)
    uncapped = _oracle(q, kc, vc, qsl, lens, table, d**-0.5, window)
    assert not torch.allclose(want, uncapped, atol=1e-3)  # the cap really changed scores


@pytest.mark.parametrize("window", [None, 5])
@pytest.mark.parametrize("hq,hk", [(4, 4), (4, 2), (6, 2)])
def test_sinks_match_dense_oracle(window: int | None, hq: int, hk: int) -> None:
    """gpt-oss's attention sinks: decodes and prefills (after a prefix hit too), GQA, with
    and without a window; sinks both below and far above the scores."""
    d, nb = 8, 64
    q_lens, lens = [1, 3, 1, 6, 1], [9, 7, 30, 6, 1]
    q, qsl, table = _step(q_lens, lens, hq, d, nb, seed=7)
    kc, vc = _caches(nb, hk, d, head_major=True)
    sinks = torch.linspace(-3.0, 40.0, hq)  # 40: the sink outweighs every key
    qsl_t, lens_t = torch.tensor(qsl, dtype=torch.int32), torch.tensor(lens, dtype=torch.int32)
    got = paged_attention(q, kc, vc, qsl_t, lens_t, table, d**-0.5, window, sinks=sinks)
    want = _oracle(q, kc, vc, qsl, lens, table, d**-0.5, window, sinks=sinks)
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)
    plain = _oracle(q, kc, vc, qsl, lens, table, d**-0.5, window)
    assert not torch.allclose(want, plain, atol=1e-3)  # the sinks really took their share


def test_head_major_and_plain_caches_agree_bitwise_on_decode_values() -> None:
    """The same logical cache contents, stored both ways, give the same outputs."""
    hq, hk, d, nb = 4, 2, 8, 32
    q, qsl, table = _step([1, 1, 1, 5], [3, 17, 12, 9], hq, d, nb, seed=1)
    plain_k, plain_v = _caches(nb, hk, d, head_major=False)
    hm_k, hm_v = _caches(nb, hk, d, head_major=True)
    hm_k.copy_(plain_k)
    hm_v.copy_(plain_v)
    meta = (torch.tensor(qsl, dtype=torch.int32), torch.tensor([3, 17, 12, 9]), table)
    a = paged_attention(q, plain_k, plain_v, *meta, 0.3)
    b = paged_attention(q, hm_k, hm_v, *meta, 0.3)
    torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)


def test_plan_cache_is_built_once_and_reused_across_layers() -> None:
    hq, hk, d, nb = 4, 2, 8, 32
    lens = [5, 14, 2]
    q, qsl, table = _step([1, 1, 2], lens, hq, d, nb, seed=2)
    meta = (torch.tensor(qsl, dtype=torch.int32), torch.tensor(lens, dtype=torch.int32), table)
    cache: dict[str, object] = {}
    layers = [_caches(nb, hk, d, head_major=True) for _ in range(3)]
    outs = []
    for i, (kc, vc) in enumerate(layers):
        window = 3 if i == 1 else None  # per-layer windows share the plan, not the masks
        outs.append(paged_attention(q, kc, vc, *meta, 0.5, window, plan_cache=cache))
        plan = cache["torch"]
        assert isinstance(plan, AttentionPlan)
        if i == 0:
            first = plan
        assert plan is first
    for (kc, vc), window, got in zip(layers, [None, 3, None], outs, strict=True):
        want = paged_attention(q, kc, vc, *meta, 0.5, window)
        torch.testing.assert_close(got, want, atol=0, rtol=0)


def test_written_tokens_are_read_back_through_a_head_major_view() -> None:
    hk, d, nb = 2, 8, 8
    kc, vc = _caches(nb, hk, d, head_major=True)
    key, value = torch.randn(3, hk, d), torch.randn(3, hk, d)
    slots = torch.tensor([5, 6, 13])
    write_kv_cache(key, value, kc, vc, slots)
    flat_k = kc.reshape(nb * BS, hk, d)
    torch.testing.assert_close(flat_k[slots], key, atol=0, rtol=0)
    assert kc.permute(2, 0, 1, 3).is_contiguous()  # still the head-major storage


@pytest.mark.parametrize("window", [None, 5])
@pytest.mark.parametrize("hq,hk", [(4, 4), (4, 2)])
def test_bf16_prefills_through_sdpa_match_the_oracle(
    window: int | None, hq: int, hk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On an AMX host, bf16 prefills of LOW_PRECISION_PREFILL_MIN_TOKENS or more go through
    bf16 SDPA (a whole prompt causal, a chunk after a prefix through a bool mask): the
    same attention to bf16 rounding, decode rows still right beside them."""
    monkeypatch.setattr(attention, "amx_bf16", lambda: True)
    monkeypatch.setattr(attention, "LOW_PRECISION_PREFILL_MIN_TOKENS", 4)
    monkeypatch.setattr(attention_plan, "SHORT_QUERY_MAX", 1)  # the 5- and 6-token runs prefill
    sdpa_calls = []
    real = attention._prefill_sdpa
    monkeypatch.setattr(
        attention,
        "_prefill_sdpa",
        lambda *a, **kw: sdpa_calls.append(kw["low_precision"]) or real(*a, **kw),
    )
    d, nb = 16, 64
    q_lens, lens = [1, 6, 1, 5], [9, 6, 30, 21]  # a whole prompt, a chunk after 16 cached
    q, qsl, table = _step(q_lens, lens, hq, d, nb, seed=7)
    kc, vc = (c.bfloat16() for c in _caches(nb, hk, d, head_major=True))
    q = q.bfloat16()
    qsl_t, lens_t = torch.tensor(qsl, dtype=torch.int32), torch.tensor(lens, dtype=torch.int32)
    got = paged_attention(q, kc, vc, qsl_t, lens_t, table, d**-0.5, window)
    assert sdpa_calls == [True] and got.dtype == torch.bfloat16
    want = _oracle(q, kc, vc, qsl, lens, table, d**-0.5, window)
    torch.testing.assert_close(got.double(), want, atol=2e-2, rtol=2e-2)


def test_short_fp32_or_capped_prefills_keep_their_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Prefills are ``low`` (bf16 P allowed) when long enough on average; bf16 SDPA or the
    AMX kernel take those only in bf16, without a softcap, on AMX."""
    d, hq, hk, nb = 8, 4, 2, 64
    q, qsl, table = _step([1, 6], [9, 6], hq, d, nb, seed=3)

    def plan(low_from: int) -> AttentionPlan:
        qsl_t = torch.tensor(qsl, dtype=torch.int32)
        lens_t = torch.tensor([9, 6], dtype=torch.int32)
        return AttentionPlan.build(qsl_t, lens_t, table, BS, low_from=low_from)

    assert [p.low for p in plan(6).prefills] == [True]
    assert [p.low for p in plan(7).prefills] == [False]  # too short
    kc, _ = _caches(nb, hk, d, head_major=True)
    monkeypatch.setattr(attention, "amx_bf16", lambda: True)
    takes = attention._prefill_in_low_precision
    assert takes(q.bfloat16(), kc.bfloat16(), None)
    assert not takes(q, kc, None)  # float32
    assert not takes(q.bfloat16(), kc.bfloat16(), 30.0)  # softcap
    monkeypatch.setattr(attention, "amx_bf16", lambda: False)
    assert not takes(q.bfloat16(), kc.bfloat16(), None)  # no AMX


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_short_run_attends_as_its_tokens_decoded_alone(
    decode_path: str, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A speculative verify's k + 1 query tokens: with the native kernel each token's output
    has the bits decoding it alone would give (so verification agrees with decoding),
    beside a decode row and a long prefill; right against the oracle on every path, and
    when the kernel declines (out of memory) the run goes back to the prefills."""
    d, hq, hk, nb = 16, 4, 2, 64
    q_lens, lens = [1, 5, attention_plan.SHORT_QUERY_MAX + 1], [9, 23, 12]
    q, qsl, table = _step(q_lens, lens, hq, d, nb, seed=5)
    q = q.to(dtype)
    kc, vc = (c.to(dtype) for c in _caches(nb, hk, d, head_major=True))

    def run(
        qsl_: list[int], lens_: list[int], rows: torch.Tensor, tbl: torch.Tensor
    ) -> torch.Tensor:
        return paged_attention(
            rows, kc, vc, torch.tensor(qsl_, dtype=torch.int32),
            torch.tensor(lens_, dtype=torch.int32), tbl, d**-0.5,
        )  # fmt: skip

    got = run(qsl, lens, q, table)
    want = _oracle(q.float(), kc.float(), vc.float(), qsl, lens, table, d**-0.5, None)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got.double(), want, atol=tol, rtol=tol)
    if decode_path == "native":
        for j in range(5):  # the 5-token run, token by token
            alone = run([0, 1], [lens[1] - 4 + j], q[qsl[1] + j : qsl[1] + j + 1], table[1:2])
            assert torch.equal(alone[0], got[qsl[1] + j]), j
        declined = []
        real = native_decode.paged_decode
        monkeypatch.setattr(
            native_decode, "paged_decode", lambda *a, **k: declined.append(1) or None
        )
        again = run(qsl, lens, q, table)
        monkeypatch.setattr(native_decode, "paged_decode", real)
        assert declined
        torch.testing.assert_close(again.double(), want, atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_each_row_has_the_same_bits_in_any_step_with_prompt_lengths(
    decode_path: str, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With prompt lengths a row's output depends on its position alone: a request of a
    20-token prompt and 6 outputs, first run as two prompt chunks and 6 decode steps beside
    other requests, then replayed in one step (as after a crash): every row the same bits,
    and right against the oracle. Prompt rows from position 12 on may round P to bf16."""
    if decode_path != "native":
        pytest.skip("without the native decode kernel rows are planned by query counts")
    monkeypatch.setattr(attention, "LOW_PRECISION_PREFILL_MIN_TOKENS", 12)
    d, hq, hk, nb, prompt, total = 32, 4, 2, 64, 20, 26
    q, _, table = _step([total, 1], [total, 17], hq, d, nb, seed=11)
    q = q.to(dtype)
    kc, vc = (c.to(dtype) for c in _caches(nb, hk, d, head_major=True))
    other = q[total : total + 1]  # another request's decode row, at context 17

    def run(lo: int, hi: int, beside: bool) -> torch.Tensor:
        """Rows [lo, hi) of the request in one step (beside the other request or not)."""
        rows = torch.cat([q[lo:hi], other]) if beside else q[lo:hi]
        qsl = [0, hi - lo, hi - lo + 1] if beside else [0, hi - lo]
        lens = [hi, 17] if beside else [hi]
        out = paged_attention(
            rows, kc, vc, torch.tensor(qsl, dtype=torch.int32),
            torch.tensor(lens, dtype=torch.int32), table[: len(lens)], d**-0.5,
            prompt_lens=[prompt, 5][: len(lens)],
        )  # fmt: skip
        return out[: hi - lo]

    first = torch.cat(
        [run(0, 9, True), run(9, prompt, False)]
        + [run(p, p + 1, p % 2 == 0) for p in range(prompt, total)]
    )
    replay = run(0, total, False)
    assert torch.equal(first, replay)
    want = _oracle(
        q[:total].float(), kc.float(), vc.float(), [0, total], [total], table, d**-0.5, None
    )
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(replay.double(), want, atol=tol, rtol=tol)
