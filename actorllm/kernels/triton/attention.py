"""Unified paged attention for a mixed batch (prefill chunks + decodes), Triton.

Same contract as ``kernels/attention.py`` (read its docstring for the varlen layout): query
row i of request b sits at position ``seq_lens[b] - q_len_b + i`` and attends causally (and
within ``sliding_window``) to the keys of its block table.

Tiling. A program owns one (query tile, KV head, KV split):

* the query tile is ``BLOCK_Q`` consecutive query tokens of one request times the
  ``G = Hq // Hk`` query heads that share the KV head, stacked into the ``BLOCK_M =
  BLOCK_Q * G`` rows of the tile (row r = token ``r // G``, head ``r % G``), so each K/V tile
  loaded from the cache serves every head of the group;
* query tiles are numbered without a host sync: request b owns tile numbers
  ``qsl[b] // BLOCK_Q + b ..`` so the grid is ``T // BLOCK_Q + B`` (known from shapes) and a
  program finds its request by binary search over ``query_start_loc``; surplus tiles exit;
* keys stream in tiles of ``BLOCK_N`` positions, each position gathering its physical block
  through the block table (any block size); the loop stops at the tile's last query
  position (causal) and starts at its window (sliding window); softmax is online, fp32, in
  the log2 domain;
* attention sinks (gpt-oss, ``USE_SINKS``): a row's running state starts from its head's
  sink logit as from a key with no value (max = sink, sum = 1), in KV split 0 only, so
  the combine counts it once.

Split-KV. Long decodes leave the GPU idle with one program per (request, KV head), so the key
range can be cut into ``num_splits`` parts: each program then writes an unnormalized partial
(acc, running max, running sum) and ``_combine_kernel`` merges them per (token, head).
:func:`choose_num_splits` is the heuristic; ``num_splits=`` forces it (tests use both).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from actorllm.kernels import kv_quant
from actorllm.kernels.triton._runtime import check_device, next_pow2

_LOG2E = 1.4426950408889634
BLOCK_N = 32
"""Key positions per inner-loop tile (independent of the KV block size)."""
SPLIT_MIN_SEQ_LEN = 1024
"""Below this longest context, split-KV is never chosen by the heuristic."""
MAX_SPLITS = 16


@triton.jit
def _attention_kernel(
    q_ptr,  # [T, Hq, D]
    k_cache_ptr,  # [NB, BS, Hk, D]
    v_cache_ptr,  # [NB, BS, Hk, D]
    out_ptr,  # [T, Hq, D], written when NUM_SPLITS == 1
    part_acc_ptr,  # [T, Hq, NUM_SPLITS, BLOCK_D] f32, written when NUM_SPLITS > 1
    part_m_ptr,  # [T, Hq, NUM_SPLITS] f32 (log2 domain)
    part_l_ptr,  # [T, Hq, NUM_SPLITS] f32
    qsl_ptr,  # [B + 1]
    seq_lens_ptr,  # [B]
    block_table_ptr,  # [B, max_blocks]
    sinks_ptr,  # [Hq] f32 (USE_SINKS)
    scale_log2,  # scale * k_scale * log2(e)
    cap_in,  # scale * k_scale / softcap (USE_SOFTCAP)
    cap_out,  # softcap * log2(e) (USE_SOFTCAP)
    v_scale,  # an fp8 cache's value scale (else 1.0), applied to the accumulator
    window,
    num_seqs,
    HQ,
    D,
    BS,
    stride_q_t,
    stride_q_h,
    stride_kc_b,
    stride_kc_s,
    stride_kc_h,
    stride_vc_b,
    stride_vc_s,
    stride_vc_h,
    stride_o_t,
    stride_o_h,
    stride_bt,
    G: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    USE_WINDOW: tl.constexpr,
    USE_SOFTCAP: tl.constexpr,
    USE_SINKS: tl.constexpr,
    KV_FP8: tl.constexpr,  # the cache holds fp8 (widened after the loads)
    DOT_PRECISION: tl.constexpr,
):
    qblk = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)

    # The request owning this tile: the last b with qsl[b] // BLOCK_Q + b <= qblk.
    lo = 0
    hi = num_seqs
    while lo < hi:
        mid = (lo + hi) // 2
        if tl.load(qsl_ptr + mid).to(tl.int32) // BLOCK_Q + mid <= qblk:
            lo = mid + 1
        else:
            hi = mid
    b = lo - 1
    q_start = tl.load(qsl_ptr + b).to(tl.int32)
    q_len = tl.load(qsl_ptr + b + 1).to(tl.int32) - q_start
    q_tile = qblk - (q_start // BLOCK_Q + b)
    if q_tile * BLOCK_Q >= q_len:
        return
    seq_len = tl.load(seq_lens_ptr + b).to(tl.int32)
    ctx = seq_len - q_len  # the queries sit at the end of the context

    rows = tl.arange(0, BLOCK_M)
    q_idx = q_tile * BLOCK_Q + rows // G  # [M] query token within the request
    head = kvh * G + rows % G  # [M] query head
    row_ok = (rows // G < BLOCK_Q) & (q_idx < q_len)
    q_pos = ctx + q_idx  # [M] absolute position
    tok = (q_start + q_idx).to(tl.int64)  # [M] row of q / out
    dims = tl.arange(0, BLOCK_D)
    d_ok = dims < D
    q = tl.load(
        q_ptr + tok[:, None] * stride_q_t + head[:, None] * stride_q_h + dims[None, :],
        mask=row_ok[:, None] & d_ok[None, :],
        other=0.0,
    )  # [M, BD]

    # Key tiles this program visits: causal end of the tile, window start, then its split.
    k_end = ctx + tl.minimum(q_tile * BLOCK_Q + BLOCK_Q, q_len)
    k_begin = 0
    if USE_WINDOW:
        k_begin = tl.maximum(ctx + q_tile * BLOCK_Q - window + 1, 0)
    n_first = k_begin // BLOCK_N
    n_tiles = tl.cdiv(k_end, BLOCK_N) - n_first
    per_split = tl.cdiv(n_tiles, NUM_SPLITS)
    t_lo = n_first + split * per_split
    t_hi = tl.minimum(t_lo + per_split, n_first + n_tiles)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    if USE_SINKS:  # the sink as the first key, value 0: max = sink, sum = exp2(0) = 1
        sink = tl.load(sinks_ptr + head).to(tl.float32) * 1.4426950408889634  # [M], log2
        m_i = tl.where(split == 0, sink, m_i)
        l_i = tl.where(split == 0, 1.0, l_i)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    cols = tl.arange(0, BLOCK_N)
    for t in range(t_lo, t_hi):
        k_pos = t * BLOCK_N + cols  # [N]
        k_ok = k_pos < k_end
        blk = tl.load(block_table_ptr + b * stride_bt + k_pos // BS, mask=k_ok, other=0)
        blk = blk.to(tl.int64)  # block ids times the block stride can pass 2^31
        off = k_pos % BS
        kv_mask = k_ok[:, None] & d_ok[None, :]  # [N, BD]
        k = tl.load(
            k_cache_ptr + blk[:, None] * stride_kc_b + off[:, None] * stride_kc_s
            + kvh * stride_kc_h + dims[None, :],
            mask=kv_mask, other=0.0,
        )  # [N, BD]  # fmt: skip
        v = tl.load(
            v_cache_ptr + blk[:, None] * stride_vc_b + off[:, None] * stride_vc_s
            + kvh * stride_vc_h + dims[None, :],
            mask=kv_mask, other=0.0,
        )  # [N, BD]  # fmt: skip
        if KV_FP8:  # widened exactly to q's dtype; the scales are folded in outside the dots
            k = k.to(q.dtype)
            v = v.to(q.dtype)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)  # [M, N]
        if USE_SOFTCAP:  # softcap * tanh(s * scale / softcap), tanh(x) = 2 sigmoid(2x) - 1
            s = cap_out * (2.0 * tl.sigmoid(2.0 * cap_in * s) - 1.0)
        else:
            s = s * scale_log2
        mask = (k_pos[None, :] <= q_pos[:, None]) & k_ok[None, :]
        if USE_WINDOW:
            mask = mask & (k_pos[None, :] > q_pos[:, None] - window)
        s = tl.where(mask, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        # A row with no visible key yet keeps max -inf; shift by 0 so exp2 gives 0, not NaN.
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s - m_safe[:, None])  # [M, N]
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new

    acc = acc * v_scale
    if NUM_SPLITS == 1:
        o = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
        tl.store(
            out_ptr + tok[:, None] * stride_o_t + head[:, None] * stride_o_h + dims[None, :],
            o.to(out_ptr.dtype.element_ty),
            mask=row_ok[:, None] & d_ok[None, :],
        )
    else:
        part = (tok * HQ + head) * NUM_SPLITS + split  # [M]
        tl.store(part_acc_ptr + part[:, None] * BLOCK_D + dims[None, :], acc, mask=row_ok[:, None])
        tl.store(part_m_ptr + part, m_i, mask=row_ok)
        tl.store(part_l_ptr + part, l_i, mask=row_ok)


@triton.jit
def _combine_kernel(
    out_ptr,  # [T, Hq, D]
    part_acc_ptr,  # [T, Hq, NUM_SPLITS, BLOCK_D] f32
    part_m_ptr,  # [T, Hq, NUM_SPLITS] f32
    part_l_ptr,  # [T, Hq, NUM_SPLITS] f32
    HQ,
    D,
    stride_o_t,
    stride_o_h,
    NUM_SPLITS: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    tok = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    splits = tl.arange(0, BLOCK_S)
    s_ok = splits < NUM_SPLITS
    base = (tok * HQ + head) * NUM_SPLITS
    m = tl.load(part_m_ptr + base + splits, mask=s_ok, other=float("-inf"))  # [S]
    l = tl.load(part_l_ptr + base + splits, mask=s_ok, other=0.0)
    m_max = tl.max(m, axis=0)
    w = tl.exp2(m - tl.where(m_max == float("-inf"), 0.0, m_max))  # [S], empty splits -> 0
    denom = tl.sum(l * w, axis=0)
    dims = tl.arange(0, BLOCK_D)
    acc = tl.load(
        part_acc_ptr + (base + splits)[:, None] * BLOCK_D + dims[None, :],
        mask=s_ok[:, None],
        other=0.0,
    )  # [S, BD]
    o = tl.sum(acc * w[:, None], axis=0) / tl.where(denom > 0.0, denom, 1.0)  # [BD]
    tl.store(
        out_ptr + tok * stride_o_t + head * stride_o_h + dims,
        o.to(out_ptr.dtype.element_ty),
        mask=dims < D,
    )


def choose_num_splits(
    num_seqs: int,
    num_kv_heads: int,
    decode_only: bool,
    max_seq_len: int | None,
    num_sms: int = 132,
) -> int:
    """How many KV splits the heuristic picks (1 = no split). Pure; no device access.

    Splits pay off only when the batch is all decodes (one query tile per request), the
    longest context is long (>= ``SPLIT_MIN_SEQ_LEN``) and (request, KV head) programs alone
    would not fill the GPU's ``num_sms`` multiprocessors twice over. Unknown ``max_seq_len``
    means no split: judging it would need a host sync.
    """
    if not decode_only or max_seq_len is None or max_seq_len < SPLIT_MIN_SEQ_LEN:
        return 1
    programs = max(num_seqs * num_kv_heads, 1)
    if programs >= 2 * num_sms:
        return 1
    by_occupancy = math.ceil(2 * num_sms / programs)
    by_length = math.ceil(max_seq_len / 512)  # at least ~512 keys per split
    return max(1, min(MAX_SPLITS, by_occupancy, by_length))


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).multi_processor_count)
    return 132


def _check_shapes(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
) -> None:
    _, hq, d = q.shape
    _, _, hk, cd = k_cache.shape
    b = seq_lens.shape[0]
    if v_cache.shape != k_cache.shape or cd != d:
        raise ValueError(
            f"cache shapes {list(k_cache.shape)} / {list(v_cache.shape)} vs head_dim {d}"
        )
    if hq % hk:
        raise ValueError(f"query heads {hq} not a multiple of KV heads {hk}")
    if query_start_loc.shape != (b + 1,) or block_table.dim() != 2 or block_table.shape[0] != b:
        raise ValueError(
            f"batch mismatch: query_start_loc {list(query_start_loc.shape)}, "
            f"seq_lens {list(seq_lens.shape)}, block_table {list(block_table.shape)}"
        )
    if d > 256:
        raise ValueError(f"head_dim {d} > 256 is not supported")
    if k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1 or block_table.stride(-1) != 1:
        raise ValueError("caches and block_table need a contiguous last dim")


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    *,
    softcap: float | None = None,
    sinks: torch.Tensor | None = None,
    max_query_len: int | None = None,
    max_seq_len: int | None = None,
    num_splits: int | None = None,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> torch.Tensor:
    """Attention of a mixed batch over the paged cache; returns a new [T, Hq, D] in q's dtype.

    q: [T, Hq, D] (last dim contiguous; strided views of a fused qkv are fine); k_cache,
    v_cache: [NB, BS, Hk, D]; query_start_loc: [B + 1] int32; seq_lens: [B] int32;
    block_table: [B, max_blocks] int32; every request must have at least one query token
    and ``seq_lens[b] >= q_len_b``. This step's K/V must already be in the cache.
    ``softcap`` (Gemma 2) caps scores to ``softcap * tanh(score / softcap)``. ``sinks``
    ([Hq], gpt-oss): each head's sink logit joins its softmax denominator, with no value.
    An fp8 cache (``kernels/kv_quant.py``) holds keys / ``k_scale`` and values /
    ``v_scale``: widened to q's dtype in the kernel, ``k_scale`` folded into the score
    scale and ``v_scale`` into the output (ignored for other cache dtypes).

    The keyword-only hints are host ints the caller usually has anyway (the model runner
    builds these tensors on the host); they only steer tiling and never change results:
    ``max_query_len`` (1 = all decodes; without it, decode-only is inferred as ``T == B``),
    ``max_seq_len`` (needed for the split-KV heuristic; without it, no split) and
    ``num_splits`` (force the number of KV splits, 1 = off). The wrapper never syncs with the
    device: the grid depends only on shapes. Raises ``ValueError`` on inconsistent shapes.
    """
    check_device(q, k_cache, v_cache, query_start_loc, seq_lens, block_table)
    _check_shapes(q, k_cache, v_cache, query_start_loc, seq_lens, block_table)
    t, hq, d = q.shape
    _, bs, hk, _ = k_cache.shape
    b = seq_lens.shape[0]
    g = hq // hk
    if sliding_window is not None and sliding_window < 1:
        raise ValueError(f"sliding_window must be >= 1, got {sliding_window}")
    if softcap is not None and softcap <= 0:
        raise ValueError(f"softcap must be > 0, got {softcap}")
    if sinks is not None:
        if sinks.shape != (hq,):
            raise ValueError(f"sinks {list(sinks.shape)} vs {hq} query heads")
        check_device(q, sinks)
        sinks = sinks.to(torch.float32).contiguous()  # [Hq]
    if q.stride(-1) != 1:
        q = q.contiguous()
    out = torch.empty((t, hq, d), dtype=q.dtype, device=q.device)
    if t == 0 or b == 0:
        return out

    decode_only = max_query_len == 1 if max_query_len is not None else t == b
    if num_splits is None:
        num_splits = choose_num_splits(b, hk, decode_only, max_seq_len, _num_sms(q.device))
    if num_splits < 1:
        raise ValueError(f"num_splits must be >= 1, got {num_splits}")
    block_d = max(16, next_pow2(d))
    # Decodes fill G rows of a tile; prefill chunks fill BLOCK_Q tokens x G heads. tl.dot
    # needs at least 16 rows on GPU.
    block_m = max(16 if decode_only else (64 if block_d <= 128 else 32), next_pow2(g))
    block_q = block_m // g

    if num_splits > 1:
        part_acc = torch.empty((t, hq, num_splits, block_d), dtype=torch.float32, device=q.device)
        part_m = torch.empty((t, hq, num_splits), dtype=torch.float32, device=q.device)
        part_l = torch.empty((t, hq, num_splits), dtype=torch.float32, device=q.device)
    else:
        part_acc = part_m = part_l = out  # unused: the kernel writes `out` directly
    grid = (t // block_q + b, hk, num_splits)
    fp8 = kv_quant.is_fp8(k_cache.dtype)
    if not fp8:
        k_scale = v_scale = 1.0
    _attention_kernel[grid](
        q, k_cache, v_cache, out, part_acc, part_m, part_l,
        query_start_loc, seq_lens, block_table, sinks if sinks is not None else out,
        scale * k_scale * _LOG2E, scale * k_scale / (softcap or 1.0),
        (softcap or 1.0) * _LOG2E, float(v_scale),
        sliding_window or 0, b, hq, d, bs,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        out.stride(0), out.stride(1), block_table.stride(0),
        G=g, BLOCK_Q=block_q, BLOCK_M=block_m, BLOCK_N=BLOCK_N, BLOCK_D=block_d,
        NUM_SPLITS=num_splits, USE_WINDOW=sliding_window is not None,
        USE_SOFTCAP=softcap is not None, USE_SINKS=sinks is not None, KV_FP8=fp8,
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
    )  # fmt: skip
    if num_splits > 1:
        _combine_kernel[(t, hq)](
            out, part_acc, part_m, part_l, hq, d, out.stride(0), out.stride(1),
            NUM_SPLITS=num_splits, BLOCK_S=next_pow2(num_splits), BLOCK_D=block_d,
        )  # fmt: skip
    return out
