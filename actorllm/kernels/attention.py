"""Paged attention over block tables for a mixed batch, torch reference.

One call serves a whole step: prefill chunks (any length, starting anywhere, e.g. after a
prefix-cache hit) and decodes (one query token) side by side, packed "varlen":

* ``q``: [T, Hq, D], the step's query tokens, request after request;
* ``query_start_loc``: [B + 1] int32, request b owns rows ``[qsl[b], qsl[b+1])`` of q;
* ``seq_lens``: [B] int32, tokens in request b's context *including* this step's
  (its KV for this step must already be written to the cache);
* ``block_table``: [B, max_blocks] int32, physical blocks of request b in order.

Query row i of request b sits at position ``seq_lens[b] - q_len_b + i`` and attends causally
to keys ``0 ..= position`` (and, with ``sliding_window=w``, only to keys ``> position - w``).
Heads share KV heads GQA-style: query head h reads KV head ``h // (Hq // Hk)``.
With ``sinks`` ([Hq], gpt-oss) head h's softmax denominator also holds ``exp(sinks[h])``,
a logit with no value: ``p_j = exp(s_j) / (sum_i exp(s_i) + exp(sinks[h]))``.

How the CPU runs it fast
------------------------
* **One plan per step.** Everything that depends only on the step (which rows decode, how
  they are grouped, the block ids to gather, the masks) is built once, on the host, into
  an ``AttentionPlan`` (``kernels/attention_plan.py``) kept in the caller's ``plan_cache``
  dict; every layer of the step reuses it (``AttentionMetadata.plan_cache``). Only the
  gathers and SDPA run per layer.
* **Decode rows in groups of similar context length.** One batched SDPA per group, each
  row padded to its group's longest context; the grouping minimises padded work plus a
  fixed cost per group (``attention_plan.group_decode_rows``).
* **Decode rows natively.** Where the host's C compiler built ``csrc/paged_decode.c``
  (``kernels/native.py``), all decode rows go through it in one call: each block read
  once, q read and the output written in place, no padded float32 copy of the context.
  Otherwise they run in groups as above.
* **Prefill rows natively, all in one call.** Where ``csrc/paged_prefill.c`` built, every
  request with more than one query token goes through it in one call per layer: K/V read
  from their blocks in place, q read and the output written in place, an online softmax
  over key tiles, keys past a query tile's causal limit never read. Otherwise (or when the
  kernel declines the call) one SDPA per request on a padded float32 gather with a float
  causal mask.
* **Long bf16 prefills on AMX tiles.** On a CPU with AMX, the bf16 prefill rows marked
  ``low`` (below) take SDPA's low-precision arithmetic (P rounded to bf16 for P.V): all in
  one call of ``csrc/amx_prefill.c`` where it built and takes the shapes, else one bf16
  flash SDPA per request; without AMX the native prefill kernel rounds P to bf16 for them.
* **Each row by its position** (``prompt_lens``, which the worker passes, and the native
  decode kernel): a row past its request's prompt runs as a decode row whatever the step
  (an output decoded, a speculative draft verified, or prefilled again when a request is
  replayed after a crash or a preemption), and prompt rows run in the prefill kernel,
  those from position :data:`LOW_PRECISION_PREFILL_MIN_TOKENS` on with P rounded to bf16
  in a bf16 model (on AMX hosts in the tiles: the ``low`` pieces). So
  every row computes the same bits in any step, chunk or replay: a replayed bf16 request
  continues with the tokens it would have produced. Without prompt lengths a request with
  one query token is a decode row, 2..8 a run of them (a verify), longer ones a prefill,
  ``low`` (bf16 P) when the step's prefills average that many tokens.
* **fp8 caches** (``kernels/kv_quant.py``): both native kernels widen the bytes through a
  table of each byte's value times the layer's ``k_scale`` / ``v_scale``; the SDPA paths
  gather the bytes and widen them to float32 times the scale.
* **Head-major caches** (``worker/kv_cache.py`` allocates them so on the reference path):
  a cache stored ``[Hk, NB, BS, D]`` and viewed ``[NB, BS, Hk, D]`` gathers straight into
  the contiguous ``[Hk, N, S, D]`` SDPA reads fastest. A plain ``[NB, BS, Hk, D]`` cache
  works too, through a strided view.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from actorllm.kernels import amx_prefill, kv_quant
from actorllm.kernels import paged_decode as native_decode
from actorllm.kernels import paged_prefill as native_prefill
from actorllm.kernels.attention_plan import AttentionPlan, Prefill
from actorllm.kernels.cpu_features import amx_bf16
from actorllm.kernels.row_bucket import empty_rows

# Prefills of at least this many query tokens per request (on average over the step) in
# bf16 on an AMX host attend through bf16 SDPA instead of the float32 native kernel
# (_prefill_in_low_precision). Measured per layer on a 2-core Xeon with AMX, bf16 SDPA
# against the native kernel: head_dim 128, one 2048-token prompt 51 vs 155 ms, 4 x 256
# 6.4 vs 11.5 ms, 512 tokens after a 1536-token prefix 18 vs 72 ms; head_dim 64, 4 x 256
# 4.2 vs 6.2 ms, but 8 x 64 2.2 vs 1.4 ms (one SDPA call per request costs more than
# short prompts save).
LOW_PRECISION_PREFILL_MIN_TOKENS = 128


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
    plan_cache: dict[str, object] | None = None,
    prompt_lens: list[int] | None = None,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> torch.Tensor:
    """Reference attention; returns [T, Hq, D] in q's dtype. Softmax in float32.

    ``softcap`` (Gemma 2): scores become ``softcap * tanh(score / softcap)`` before the
    mask and softmax. ``sinks`` ([Hq], gpt-oss): each head's sink logit joins its softmax
    denominator (the module docstring). ``k_scale`` / ``v_scale``: an fp8 cache holds keys
    and values divided by them (``kernels/kv_quant.py``); ignored for other cache dtypes.
    ``plan_cache``: a dict that lives for one step (the same tensors in every call); the
    first call stores the step's plan there and later calls reuse it. ``prompt_lens``
    ([B] host ints, each request's prompt tokens; None: unknown): with the native decode
    kernel every row is planned by its position alone (:meth:`AttentionPlan.build`), so a
    request replayed after a crash computes the bits its first run did.
    """
    # Prefill pieces marked low take the AMX kernel or bf16 SDPA where the host has AMX.
    tiles = sinks is None and _prefill_in_low_precision(q, k_cache, softcap)
    plan = plan_cache.get("torch") if plan_cache is not None else None
    if not isinstance(plan, AttentionPlan):
        plan = AttentionPlan.build(
            query_start_loc, seq_lens, block_table, k_cache.shape[1],
            short_as_decodes=native_decode.supports(k_cache), prompt_lens=prompt_lens,
            # by position, prompt rows split where the tiles take over (none without AMX)
            low_from=LOW_PRECISION_PREFILL_MIN_TOKENS if tiles or prompt_lens is None else None,
        )  # fmt: skip
        if plan_cache is not None:
            plan_cache["torch"] = plan
    # [T, Hq, D], with room for the bucketed rows o_proj reads (kernels/row_bucket.py)
    out = empty_rows(tuple(q.shape), q.dtype, q.device)
    hk, d = k_cache.shape[2], k_cache.shape[3]
    if sinks is not None:
        sinks = sinks.float().contiguous()  # [Hq]
    scales = (k_scale, v_scale) if kv_quant.is_fp8(k_cache.dtype) else (1.0, 1.0)
    decoded = False  # by the native kernel
    if native_decode.supports(k_cache) and plan.decodes is not None:
        rows, lens, table = plan.decodes
        if native_decode.rows_readable(q) and native_decode.rows_readable(out):
            # q read and out written in place, at the decode rows: no per-layer copies
            o = native_decode.paged_decode(
                q, k_cache, v_cache, lens, table, scale, sliding_window, softcap,
                rows=rows, out=out, sinks=sinks, kv_scales=scales,
            )  # fmt: skip
            decoded = o is not None
        else:
            o = native_decode.paged_decode(
                q.index_select(0, rows), k_cache, v_cache, lens, table, scale,
                sliding_window, softcap, sinks=sinks, kv_scales=scales,
            )  # [N, Hq, D] float32  # fmt: skip
            if o is not None:
                out.index_copy_(0, rows, o.to(q.dtype))
                decoded = True
    if not decoded and plan.short_as_decodes:
        # The native kernel declined (out of memory): its runs go back to the prefills.
        plan = AttentionPlan.build(
            query_start_loc, seq_lens, block_table, k_cache.shape[1],
            low_from=LOW_PRECISION_PREFILL_MIN_TOKENS,
        )  # fmt: skip
    for g in [] if decoded else plan.decode_groups:
        n = g.q_rows.shape[0]
        qg = q.index_select(0, g.q_rows).float().view(n, hk, -1, d).transpose(0, 1)  # [Hk,N,G,D]
        k = plan.gather(0, k_cache, g.blocks, n, g.max_len, scale=scales[0])  # [Hk, N, S, D]
        v = plan.gather(1, v_cache, g.blocks, n, g.max_len, scale=scales[1])
        sg = None if sinks is None else sinks.view(hk, 1, -1, 1)  # [Hk, 1, G, 1]
        o = _sdpa(qg, k, v, g.mask(sliding_window), scale, softcap, sg)  # [Hk, N, G, D]
        out.index_copy_(0, g.q_rows, o.transpose(0, 1).reshape(n, -1, d).to(q.dtype))
    if not plan.prefills:  # a decode-only step: done
        return out
    # Pieces marked low take the tiles where the host has them; the others the native
    # kernel, P rounded to bf16 for every row of a low piece and, planned by position, for
    # the prompt rows from LOW_PRECISION_PREFILL_MIN_TOKENS on.
    groups: dict[tuple[bool, int | None], list[Prefill]] = {}
    by_position = LOW_PRECISION_PREFILL_MIN_TOKENS if plan.by_position else None
    for p in plan.prefills:
        way = (True, 0) if p.low and tiles else (False, 0 if p.low else by_position)
        groups.setdefault(way, []).append(p)
    for (low_precision, pv_from), pieces in groups.items():
        prefilled = False  # by a native kernel: every piece of the group
        if low_precision and amx_prefill.supports(q, out, k_cache):
            starts, lens, ctx, table = plan.prefill_args(pieces)
            prefilled = amx_prefill.paged_prefill(
                q, k_cache, v_cache, starts, lens, ctx, table, scale, sliding_window, out=out
            )  # fmt: skip
        if not low_precision and native_prefill.supports(q, out, k_cache):
            starts, lens, ctx, table = plan.prefill_args(pieces)
            prefilled = native_prefill.paged_prefill(
                q, k_cache, v_cache, starts, lens, ctx, table, scale, sliding_window, softcap,
                out=out, sinks=sinks, kv_scales=scales, bf16_pv_from=pv_from,
            )  # fmt: skip
        if not prefilled:
            _prefill_sdpa(
                q, k_cache, v_cache, plan, pieces, out, scale, sliding_window, softcap,
                low_precision=low_precision, sinks=sinks, kv_scales=scales,
            )  # fmt: skip
    return out


def _prefill_in_low_precision(
    q: torch.Tensor, k_cache: torch.Tensor, softcap: float | None
) -> bool:
    """Whether prefill rows marked ``low`` (:class:`Prefill`: prefills of
    :data:`LOW_PRECISION_PREFILL_MIN_TOKENS` query tokens or more on average, or with
    prompt lengths the prompt rows from that position on) run through the AMX kernel or
    bf16 SDPA (:func:`_prefill_sdpa`): bf16 q and cache on a CPU with AMX (on AVX512-BF16
    without AMX the native kernel is the faster: a 2-core Zen 4, Hq 16 / Hk 8 / D 128, a
    layer of one 2048-token prompt 120 vs 140 ms for SDPA, 4 x 256 9.3 vs 17.4 ms), no
    softcap (SDPA cannot cap) nor sinks (the caller checks those). Shorter prefills keep
    float32 P, the decode kernel's."""
    return (
        q.dtype == torch.bfloat16
        and k_cache.dtype == torch.bfloat16
        and q.device.type == "cpu"
        and softcap is None
        and amx_bf16()
    )


def _prefill_sdpa(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    plan: AttentionPlan,
    pieces: list[Prefill],
    out: torch.Tensor,
    scale: float,
    window: int | None,
    softcap: float | None,
    *,
    low_precision: bool,
    sinks: torch.Tensor | None = None,
    kv_scales: tuple[float, float] = (1.0, 1.0),
) -> None:
    """``pieces`` (of the plan's prefills) through SDPA, one call each. q: [T, Hq, D], out:
    [T, Hq, D] written at their rows.

    In float32 by default (inputs widened, an additive mask, ``softcap`` spelled out).
    ``low_precision`` (:func:`_prefill_in_low_precision`): on the bf16 inputs, where
    torch's CPU flash kernel multiplies Q.K^T and P.V as bf16 GEMMs (oneDNN, AMX where the
    CPU has it; softmax and accumulation in float32), a whole prompt as ``is_causal`` and a
    chunk after a cached prefix through a bool mask."""
    hk = k_cache.shape[2]
    gqa = q.shape[1] != hk  # query head h reads KV head h // group, not materialised
    sp = None if sinks is None else sinks.view(1, -1, 1, 1)  # [1, Hq, 1, 1]
    for p in pieces:
        k_scale, v_scale = kv_scales
        k = plan.gather(0, k_cache, p.blocks, 1, p.seq_len, widen=not low_precision, scale=k_scale)
        v = plan.gather(1, v_cache, p.blocks, 1, p.seq_len, widen=not low_precision, scale=v_scale)
        k, v = k.transpose(0, 1), v.transpose(0, 1)  # [1, Hk, S, D]
        qp = q[p.start : p.end].transpose(0, 1)[None]  # [1, Hq, L, D]
        if low_precision:
            fresh = p.seq_len == p.end - p.start and window is None  # no cached prefix
            o = F.scaled_dot_product_attention(
                qp, k, v, attn_mask=None if fresh else p.keep(window), is_causal=fresh,
                scale=scale, enable_gqa=gqa,
            )  # [1, Hq, L, D]  # fmt: skip
        else:
            # 4-D inputs and a float mask take CPU SDPA's flash kernel (3-D ones do not)
            o = _sdpa(qp.float(), k, v, p.mask(window), scale, softcap, sp, enable_gqa=gqa)
        out[p.start : p.end] = o[0].transpose(0, 1).to(q.dtype)


def _sdpa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    scale: float,
    softcap: float | None,
    sinks: torch.Tensor | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """SDPA, or with ``softcap`` or ``sinks`` the same computation spelled out (SDPA can
    neither cap nor take a logit without a value).

    q: [..., Hq, L, D], k/v: [..., Hk, S, D], mask: additive, broadcast to [..., L, S];
    sinks: float32, broadcast to [..., Hq, L, 1]."""
    if softcap is None and sinks is None:
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, scale=scale, enable_gqa=enable_gqa
        )
    if enable_gqa:  # query head h reads KV head h // group
        group = q.shape[-3] // k.shape[-3]
        k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
    s = torch.matmul(q, k.transpose(-1, -2)).mul_(scale)  # [..., Hq, L, S]
    if softcap is not None:
        s = torch.tanh(s.div_(softcap)).mul_(softcap)
    if mask is not None:
        s = s + mask
    if sinks is None:
        return torch.matmul(s.softmax(dim=-1), v)  # [..., Hq, L, D]
    sink = sinks.expand(*s.shape[:-1], 1)  # [..., Hq, L, 1]
    lse = torch.logsumexp(torch.cat([s, sink], dim=-1), dim=-1, keepdim=True)
    return torch.matmul(torch.exp(s - lse), v)  # [..., Hq, L, D]: the sink's share dropped


# -- the per-step plan ----------------------------------------------------------------------
