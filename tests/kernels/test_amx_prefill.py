"""The AMX prefill kernel (kernels/csrc/amx_prefill.c) against float32 attention written out
here: GQA groups that do and do not divide its 32 lanes, head sizes 32-256, plain and
head-major caches, blocks of 16 and 32, chunks after a cached prefix, sliding windows,
requests of lengths that fill no tile, all in one call."""

from __future__ import annotations

import pytest
import torch

from actorllm.kernels import amx_prefill, attention

pytestmark = pytest.mark.skipif(
    not amx_prefill.available(), reason="no AMX-BF16 here, or the native build lacks it"
)


def _caches(
    g: torch.Generator, nb: int, bs: int, hk: int, d: int, head_major: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    shape = (hk, nb, bs, d) if head_major else (nb, bs, hk, d)

    def one() -> torch.Tensor:
        c = torch.randn(shape, generator=g).to(torch.bfloat16)
        return c.permute(1, 2, 0, 3) if head_major else c  # [NB, BS, Hk, D]

    return one(), one()


def _reference(
    q: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, starts: list[int], q_lens: list[int],
    lens: list[int], table: torch.Tensor, scale: float, window: int | None,
) -> torch.Tensor:  # fmt: skip
    """float32 attention, request by request: [T, Hq, D]."""
    out = torch.zeros(q.shape, dtype=torch.float32)
    hq, hk = q.shape[1], kc.shape[2]
    bs = kc.shape[1]
    for n, (s0, ql, ctx) in enumerate(zip(starts, q_lens, lens, strict=True)):
        nb = -(-ctx // bs)
        blocks = table[n, :nb].long()
        k = kc.index_select(0, blocks).reshape(nb * bs, hk, -1)[:ctx].float()  # [S, Hk, D]
        v = vc.index_select(0, blocks).reshape(nb * bs, hk, -1)[:ctx].float()
        k = k.repeat_interleave(hq // hk, dim=1).transpose(0, 1)  # [Hq, S, D]
        v = v.repeat_interleave(hq // hk, dim=1).transpose(0, 1)
        qq = q[s0 : s0 + ql].float().transpose(0, 1)  # [Hq, L, D]
        s = qq @ k.transpose(1, 2) * scale  # [Hq, L, S]
        pos = torch.arange(ctx - ql, ctx)[:, None]  # [L, 1]
        key = torch.arange(ctx)[None, :]  # [1, S]
        keep = key <= pos
        if window is not None:
            keep &= key > pos - window
        s = s.masked_fill(~keep, float("-inf"))
        out[s0 : s0 + ql] = (s.softmax(-1) @ v).transpose(0, 1)
    return out


def _run(
    hq: int, hk: int, d: int, bs: int, q_lens: list[int], lens: list[int], *,
    head_major: bool = False, window: int | None = None, seed: int = 0,
) -> None:  # fmt: skip
    g = torch.Generator().manual_seed(seed)
    max_blocks = -(-max(lens) // bs)
    nb = len(lens) * max_blocks + 2
    kc, vc = _caches(g, nb, bs, hk, d, head_major)
    # garbage past every context: slots the kernel may read but must mask (keys) or zero
    # (values); block 0 is nobody's
    kc.view(torch.int16)[0].fill_(0x7FC0)  # NaN bits
    vc.view(torch.int16)[0].fill_(0x7FC0)
    table = (torch.randperm(nb - 1, generator=g)[: len(lens) * max_blocks] + 1).view(
        len(lens), max_blocks
    )
    for n, ctx in enumerate(lens):  # slots past the context in its last block: NaN too
        last = table[n, (ctx - 1) // bs]
        if ctx % bs:
            kc.view(torch.int16)[last, ctx % bs :].fill_(0x7FC0)
            vc.view(torch.int16)[last, ctx % bs :].fill_(0x7FC0)
        table[n, -(-ctx // bs) :] = 0  # unused entries: block 0
    t = sum(q_lens)
    qkv = (torch.randn(t, hq + 2 * hk, d, generator=g) * 2).to(torch.bfloat16)
    q = qkv[:, :hq]  # rows (hq + 2 hk) * d apart, as the model's fused qkv gives them
    starts = [sum(q_lens[:i]) for i in range(len(q_lens))]
    out = torch.full((t, hq, d), float("nan"), dtype=torch.bfloat16)
    scale = d**-0.5
    assert amx_prefill.supports(q, out, kc)
    ok = amx_prefill.paged_prefill(
        q, kc, vc, torch.tensor(starts), torch.tensor(q_lens), torch.tensor(lens),
        table.int(), scale, window, out=out,
    )  # fmt: skip
    assert ok
    ref = _reference(q, kc, vc, starts, q_lens, lens, table, scale, window)
    err = (out.float() - ref).abs()
    # P in bfloat16 for P.V and a bfloat16 output: ~1e-2 at worst on values of size ~1; a
    # wrong mask, scale or layout moves outputs by O(0.1-1)
    assert not out.isnan().any()
    assert err.max().item() < 3e-2, err.max().item()
    assert err.mean().item() < 3e-3, err.mean().item()


@pytest.mark.parametrize("hq,hk", [(4, 4), (16, 8), (12, 4), (8, 2), (32, 1)])
def test_groups(hq: int, hk: int) -> None:
    _run(hq, hk, 64, 16, [37, 70], [37, 70])


@pytest.mark.parametrize("d", [32, 128, 256])
def test_head_sizes(d: int) -> None:
    _run(4, 2, d, 16, [45], [45])


@pytest.mark.parametrize("head_major", [False, True])
@pytest.mark.parametrize("bs", [16, 32])
def test_layouts_and_blocks(head_major: bool, bs: int) -> None:
    _run(8, 4, 64, bs, [17, 2 * 128 + 5, 3], [17, 261, 3], head_major=head_major)


def test_chunk_after_cached_prefix() -> None:
    # chunked prefill / a prefix-cache hit: the queries sit at the end of a longer context
    _run(8, 4, 64, 16, [40, 130, 2], [300, 131, 50])


@pytest.mark.parametrize("window", [1, 16, 50])
def test_sliding_window(window: int) -> None:
    _run(8, 4, 64, 16, [200, 33], [260, 33], window=window)


def test_declines_what_it_does_not_take() -> None:
    q = torch.zeros(4, 4, 48, dtype=torch.bfloat16)  # head size 48: not a multiple of 32
    cache = torch.zeros(2, 16, 4, 48, dtype=torch.bfloat16)
    assert not amx_prefill.supports(q, q, cache)
    q64 = torch.zeros(4, 4, 64, dtype=torch.bfloat16)
    assert not amx_prefill.supports(q64, q64, torch.zeros(2, 8, 4, 64, dtype=torch.bfloat16))
    assert not amx_prefill.supports(q64.float(), q64.float(), cache.float())


def test_paged_attention_takes_it_for_long_bf16_prefills(monkeypatch: pytest.MonkeyPatch) -> None:
    """paged_attention's low-precision prefills (bf16, an AMX host, long enough on average)
    go through this kernel in one call, decode rows beside them through the decode path;
    SDPA is not called."""
    monkeypatch.setattr(attention, "LOW_PRECISION_PREFILL_MIN_TOKENS", 8)
    calls: list[int] = []
    real = amx_prefill.paged_prefill

    def spy(*args: object, **kwargs: object) -> bool:
        calls.append(len(args[3]))  # type: ignore[arg-type]  # q_start: the prefills
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(amx_prefill, "paged_prefill", spy)
    monkeypatch.setattr(attention, "_prefill_sdpa", lambda *a, **kw: pytest.fail("SDPA ran"))
    g = torch.Generator().manual_seed(3)
    hq, hk, d, bs = 8, 4, 64, 16
    q_lens, lens = [1, 40, 1, 30], [20, 40, 75, 100]  # decodes, a prompt, a chunk after 70
    nb = 40
    kc = torch.randn(nb, hk, bs, d, generator=g).bfloat16().permute(0, 2, 1, 3)  # block-major
    vc = torch.randn(nb, hk, bs, d, generator=g).bfloat16().permute(0, 2, 1, 3)
    table = (torch.randperm(nb - 1, generator=g)[: 4 * 7] + 1).view(4, 7)
    q = torch.randn(sum(q_lens), hq, d, generator=g).bfloat16()
    starts = [sum(q_lens[:i]) for i in range(4)]
    qsl = torch.tensor([*starts, sum(q_lens)], dtype=torch.int32)
    got = attention.paged_attention(
        q, kc, vc, qsl, torch.tensor(lens, dtype=torch.int32), table.int(), d**-0.5
    )  # fmt: skip
    assert calls == [2]
    want = _reference(q, kc, vc, starts, q_lens, lens, table, d**-0.5, None)
    assert (got.float() - want).abs().max().item() < 3e-2
