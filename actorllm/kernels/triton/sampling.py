"""The sampling hot path, Triton: temperature, min-p, top-k, top-p and the exponential race.

Same contract as ``kernels/sampling.py`` (read its docstring): ``argmax(probs / noise)``
with ``noise`` i.i.d. Exp(1), greedy rows (temperature < ``GREEDY_EPS``) take ``argmax`` of
the raw logits (ties to the lowest id). :func:`sample_from_logits` takes the caller's noise
and agrees with the reference token for token; :func:`sample_from_logits_seeded` draws the
noise inside the kernel from Philox, keyed on each row's 64-bit seed with counter
``(output position, token id)``, so it is a pure function of (seed, position) that never
materializes [B, V] noise; :func:`exponential_noise` returns that very noise (for tests
and for mixing paths).

Tiling: one program per row streams the vocabulary in ``BLOCK_V`` tiles; nothing is sorted
and nothing leaves the device. Top-k and top-p thresholds are found by a radix
search over float32 values mapped to order-preserving integer keys: each of 8 passes fixes
the next 4 bits of the threshold key by counting (top-k) or summing probability (top-p) over
the keys at or above each of 16 candidates at once. So the k-th largest value is found
exactly, and top-p keeps token v iff the probability mass strictly above v is below
``top_p`` (the reference's "exclusive prefix mass"); tokens tied with the boundary value are
all kept (the reference's sort keeps an arbitrary subset of such ties for top-p).
Passes per row: 1 for greedy, 3 + 8 for an active top-k + 9 for an active top-p otherwise.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from actorllm.kernels.sampling import GREEDY_EPS
from actorllm.kernels.triton._runtime import check_device, next_pow2

_MIN_NOISE = 1e-20  # an Exp(1) draw of 0 would divide by zero


@triton.jit
def _exp_noise(seed, pos, cols):
    """Exp(1) noise for tokens ``cols`` of a row: Philox(key=seed, counter=(cols, pos))."""
    u = tl.rand(seed, (pos.to(tl.int64) << 32) + cols.to(tl.int64))  # [0, 1)
    return tl.maximum(-tl.log(u), 1e-20)


@triton.jit
def _order_key(x):
    """float32 -> int64 in [0, 2^32), strictly increasing in x (-inf lowest)."""
    bits = x.to(tl.int32, bitcast=True)
    key = tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)
    return key.to(tl.int64) + 2147483648


@triton.jit
def _tile(row_ptr, start, V, t, m, min_p, k_thr, p_thr, BLOCK_V: tl.constexpr):
    """One vocabulary tile: (cols, x = logits / t, its keys, the surviving-token mask)."""
    cols = start + tl.arange(0, BLOCK_V)
    ok = cols < V
    x = tl.load(row_ptr + cols, mask=ok, other=float("-inf")) / t
    key = _order_key(x)
    # min-p: prob / max_prob = exp(x - m) must reach min_p (0 keeps everything).
    keep = ok & (tl.exp(x - m) >= min_p) & (key >= k_thr) & (key >= p_thr)
    return cols, x, key, keep


@triton.jit
def _sample_kernel(
    logits_ptr,  # [B, V] f32
    temp_ptr,  # [B] f32
    top_k_ptr,  # [B] int32
    top_p_ptr,  # [B] f32
    min_p_ptr,  # [B] f32
    noise_ptr,  # [B, V] f32, read when HAS_NOISE
    seed_ptr,  # [B] int64, read otherwise
    pos_ptr,  # [B] int64
    out_ptr,  # [B] int64
    V,
    stride_l,
    stride_n,
    GREEDY_EPS: tl.constexpr,
    HAS_NOISE: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    row_ptr = logits_ptr + row * stride_l
    temp = tl.load(temp_ptr + row)
    greedy = temp < GREEDY_EPS
    t = tl.where(greedy, 1.0, temp)

    # Pass 1: argmax of the raw logits (first index on ties, like torch.argmax).
    best = tl.full([], float("-inf"), dtype=tl.float32)
    best_idx = tl.zeros([], dtype=tl.int64)
    for start in range(0, V, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        l = tl.load(row_ptr + cols, mask=cols < V, other=float("-inf"))
        tile_max, tile_arg = tl.max(l, axis=0, return_indices=True)
        best_idx = tl.where(tile_max > best, start + tile_arg.to(tl.int64), best_idx)
        best = tl.maximum(best, tile_max)

    if greedy:
        tl.store(out_ptr + row, best_idx)
    else:
        m = best / t  # max of x: dividing by t > 0 preserves the order
        min_p = tl.load(min_p_ptr + row)
        top_k = tl.load(top_k_ptr + row)
        top_p = tl.load(top_p_ptr + row)
        zero = tl.zeros([], dtype=tl.int64)

        # Top-k: the largest key K with count(kept, key >= K) >= k, 4 bits per pass.
        digits = tl.arange(0, 16).to(tl.int64)
        k_thr = zero
        if (top_k > 0) & (top_k < V):
            step = zero + 268435456  # 16^7: the top digit of a 32-bit key
            for _ in range(8):
                cands = k_thr + digits * step  # [16], non-decreasing
                count = tl.zeros([16], dtype=tl.int32)
                for start in range(0, V, BLOCK_V):
                    _c, _x, key, keep = _tile(row_ptr, start, V, t, m, min_p, zero, zero, BLOCK_V)
                    hit = keep[None, :] & (key[None, :] >= cands[:, None])  # [16, BV]
                    count += tl.sum(hit.to(tl.int32), axis=1)
                # count is non-increasing in the digit: the satisfied digits are a prefix.
                n_ok = tl.sum((count >= top_k).to(tl.int64), axis=0)
                k_thr += tl.maximum(n_ok - 1, 0) * step
                step = step // 16

        # Top-p: the largest key K with mass(kept, key >= K) >= top_p * total kept mass.
        p_thr = zero
        if top_p < 1.0:
            total = tl.zeros([], dtype=tl.float32)
            for start in range(0, V, BLOCK_V):
                _c, x, _k, keep = _tile(row_ptr, start, V, t, m, min_p, k_thr, zero, BLOCK_V)
                total += tl.sum(tl.where(keep, tl.exp(x - m), 0.0), axis=0)
            target = top_p * total
            step = zero + 268435456
            for _ in range(8):
                cands = p_thr + digits * step
                mass = tl.zeros([16], dtype=tl.float32)
                for start in range(0, V, BLOCK_V):
                    _c, x, key, keep = _tile(row_ptr, start, V, t, m, min_p, k_thr, zero, BLOCK_V)
                    hit = keep[None, :] & (key[None, :] >= cands[:, None])  # [16, BV]
                    mass += tl.sum(tl.where(hit, tl.exp(x - m)[None, :], 0.0), axis=1)
                n_ok = tl.sum((mass >= target).to(tl.int64), axis=0)
                p_thr += tl.maximum(n_ok - 1, 0) * step
                step = step // 16

        # The race: argmax over survivors of softmax(x) / noise.
        z = tl.zeros([], dtype=tl.float32)
        for start in range(0, V, BLOCK_V):
            _c, x, _k, keep = _tile(row_ptr, start, V, t, m, min_p, k_thr, p_thr, BLOCK_V)
            z += tl.sum(tl.where(keep, tl.exp(x - m), 0.0), axis=0)
        if not HAS_NOISE:
            seed = tl.load(seed_ptr + row)
            pos = tl.load(pos_ptr + row)
        win = tl.full([], -1.0, dtype=tl.float32)
        win_idx = tl.zeros([], dtype=tl.int64)
        for start in range(0, V, BLOCK_V):
            cols, x, _k, keep = _tile(row_ptr, start, V, t, m, min_p, k_thr, p_thr, BLOCK_V)
            if HAS_NOISE:
                e = tl.load(noise_ptr + row * stride_n + cols, mask=cols < V, other=1.0)
            else:
                e = _exp_noise(seed, pos, cols)
            score = tl.where(keep, (tl.exp(x - m) / z) / e, -1.0)  # dropped tokens never win
            tile_max, tile_arg = tl.max(score, axis=0, return_indices=True)
            win_idx = tl.where(tile_max > win, start + tile_arg.to(tl.int64), win_idx)
            win = tl.maximum(win, tile_max)
        tl.store(out_ptr + row, win_idx)


@triton.jit
def _noise_kernel(seed_ptr, pos_ptr, out_ptr, V, stride_o, BLOCK_V: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    e = _exp_noise(tl.load(seed_ptr + row), tl.load(pos_ptr + row), cols)
    tl.store(out_ptr + row * stride_o + cols, e, mask=cols < V)


def _block_v(vocab_size: int, block_v: int | None) -> int:
    if block_v is None:
        return min(next_pow2(vocab_size), 1024)
    if block_v < 1 or block_v & (block_v - 1):
        raise ValueError(f"block_v must be a power of two, got {block_v}")
    return block_v


def _check_params(logits: torch.Tensor, *rows: torch.Tensor) -> tuple[int, int]:
    if logits.dim() != 2 or logits.dtype != torch.float32:
        raise ValueError(f"logits must be [B, V] float32, got {list(logits.shape)} {logits.dtype}")
    b, v = logits.shape
    for r in rows:
        if r.shape != (b,):
            raise ValueError(f"per-row parameters must be [{b}], got {list(r.shape)}")
    return b, v


def _launch(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    min_p: torch.Tensor,
    noise: torch.Tensor | None,
    seeds: torch.Tensor | None,
    positions: torch.Tensor | None,
    block_v: int | None,
) -> torch.Tensor:
    b, v = logits.shape
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    out = torch.empty(b, dtype=torch.int64, device=logits.device)  # [B]
    if b == 0:
        return out
    _sample_kernel[(b,)](
        logits,
        temperature.float(),
        top_k.to(torch.int32),
        top_p.float(),
        min_p.float(),
        noise if noise is not None else logits,
        seeds if seeds is not None else out,
        positions if positions is not None else out,
        out,
        v,
        logits.stride(0),
        noise.stride(0) if noise is not None else 0,
        GREEDY_EPS=GREEDY_EPS,
        HAS_NOISE=noise is not None,
        BLOCK_V=_block_v(v, block_v),
    )
    return out


def sample_from_logits(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    min_p: torch.Tensor,
    noise: torch.Tensor,
    *,
    block_v: int | None = None,
) -> torch.Tensor:
    """One token per row, the reference's contract, without a host sync.

    logits: [B, V] float32; temperature: [B] float32 (< ``GREEDY_EPS``: greedy);
    top_k: [B] int32 (0 = off); top_p: [B] float32 (1.0 = off); min_p: [B] float32
    (0 = off); noise: [B, V] float32 Exp(1) draws, > 0. Returns [B] int64. ``block_v``
    (a power of two) overrides the vocabulary tile, for tests. Raises ``ValueError`` on
    bad shapes.
    """
    check_device(logits, temperature, top_k, top_p, min_p, noise)
    _check_params(logits, temperature, top_k, top_p, min_p)
    if noise.shape != logits.shape:
        raise ValueError(f"noise {list(noise.shape)} must match logits {list(logits.shape)}")
    noise = noise.float()
    if noise.stride(-1) != 1:
        noise = noise.contiguous()
    return _launch(logits, temperature, top_k, top_p, min_p, noise, None, None, block_v)


def sample_from_logits_seeded(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    min_p: torch.Tensor,
    seeds: torch.Tensor,
    positions: torch.Tensor,
    *,
    block_v: int | None = None,
) -> torch.Tensor:
    """:func:`sample_from_logits` with the noise drawn in the kernel, never materialized.

    seeds: [B] int64 (any 64-bit value; one per request, or fresh per step for unseeded
    rows); positions: [B] int64 output positions (< 2^32). Row b's noise is exactly
    ``exponential_noise(seeds, positions, V)[b]``, so a replayed (seed, position) redraws
    the same token whatever else is in the batch. Returns [B] int64.
    """
    check_device(logits, temperature, top_k, top_p, min_p, seeds, positions)
    _check_params(logits, temperature, top_k, top_p, min_p, seeds, positions)
    seeds, positions = seeds.to(torch.int64), positions.to(torch.int64)
    return _launch(logits, temperature, top_k, top_p, min_p, None, seeds, positions, block_v)


def exponential_noise(
    seeds: torch.Tensor, positions: torch.Tensor, vocab_size: int
) -> torch.Tensor:
    """The Exp(1) noise :func:`sample_from_logits_seeded` uses: seeds, positions [B] int64 ->
    [B, V] float32, a pure function of (seed, position, token id)."""
    check_device(seeds, positions)
    b = seeds.shape[0]
    if positions.shape != (b,):
        raise ValueError(f"positions must be [{b}], got {list(positions.shape)}")
    out = torch.empty((b, vocab_size), dtype=torch.float32, device=seeds.device)  # [B, V]
    if b and vocab_size:
        block = min(next_pow2(vocab_size), 1024)
        _noise_kernel[(b, triton.cdiv(vocab_size, block))](
            seeds.to(torch.int64), positions.to(torch.int64), out, vocab_size, out.stride(0),
            BLOCK_V=block,
        )  # fmt: skip
    return out
