"""The watermark PRF: Philox4x32-10 keyed on a 64-bit key, over (context, token id).

Bit for bit vLLM 0.32's ``vllm.v1.watermarking.prfs.philox`` (its version
``philox4x32-10-v1``): the same uint32 words and the same uniform conversion, so text this
engine watermarks is scored by vLLM's detector (and ours, :mod:`actorllm.v1.watermarking`)
exactly as vLLM's own.

Theory of operation. A context (the ``W`` token ids before a position, ``-1`` where there
is none) is absorbed four words at a time into a 128-bit state, one Philox call per block
(key word 0 xor the block's offset; a short last block padded with ``2**32 - 1 - i``).
A candidate token ``t`` then draws word ``t & 3`` of ``Philox(counter = (t >> 2, s0, s1,
s2), key = (k0 ^ s3, k1 ^ TOKEN_DOMAIN))``: one call covers four consecutive tokens, which
:func:`vocab_uniforms` exploits (a quarter of the work of one call per token).

Everything is int64 tensor arithmetic masked to 32 bits (torch has no full uint32
arithmetic), so the same code runs on CPU and GPU; the 32 x 32 -> 64-bit product is one
int64 multiply, which wraps modulo 2**64 and so keeps both of its 32-bit words.
"""

from __future__ import annotations

import torch

UINT32_MASK = 2**32 - 1
_PHILOX_M0 = 0xD2511F53
_PHILOX_M1 = 0xCD9E8D57
_PHILOX_W0 = 0x9E3779B9
_PHILOX_W1 = 0xBB67AE85
_CONTEXT_DOMAIN = 0x574D4358  # "WMCX"
_TOKEN_DOMAIN = 0x574D544B  # "WMTK"

Words = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def key_words(key: int) -> tuple[int, int]:
    """A 64-bit key as Philox's two key words (low, high)."""
    if not 0 <= key <= 2**64 - 1:
        raise ValueError("Philox keys must fit in 64 bits")
    return key & UINT32_MASK, key >> 32


def _mulhilo32(multiplier: int, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(high, low) 32-bit words of ``multiplier * values``; values: any shape, int64 < 2**32.

    The 64-bit product overflows int64, whose multiply wraps modulo 2**64 (two's
    complement, on CPU and CUDA alike): its low 64 bits are exact, so both words are read
    from the wrapped value (an arithmetic shift then a mask gives bits 32..63). One
    multiply instead of vLLM's four on 16-bit halves, the same words (the golden test)."""
    product = values * multiplier
    return (product >> 32) & UINT32_MASK, product & UINT32_MASK


def philox4x32_10(counter: Words, key: tuple[torch.Tensor, torch.Tensor]) -> Words:
    """Ten Philox4x32 rounds; every word an int64 tensor of values < 2**32, broadcastable."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for round_index in range(10):
        high_0, low_0 = _mulhilo32(_PHILOX_M0, c0)
        high_1, low_1 = _mulhilo32(_PHILOX_M1, c2)
        c0, c1, c2, c3 = (
            (high_1 ^ c1 ^ k0) & UINT32_MASK,
            low_1,
            (high_0 ^ c3 ^ k1) & UINT32_MASK,
            low_0,
        )
        if round_index != 9:
            k0 = (k0 + _PHILOX_W0) & UINT32_MASK
            k1 = (k1 + _PHILOX_W1) & UINT32_MASK
    return c0, c1, c2, c3


def uint32_to_uniform(values: torch.Tensor) -> torch.Tensor:
    """uint32 words (int64) -> float32 in (0, 1): the top 24 bits, ``(m + 1) / (2**24 + 1)``."""
    mantissas = (values & UINT32_MASK) >> 8
    return ((mantissas.to(torch.float64) + 1.0) / (2**24 + 1)).to(torch.float32)


def context_state(key: int, contexts: torch.Tensor) -> Words:
    """contexts: [..., W] int (``-1`` = no token) -> four [...] int64 state words."""
    k0, k1 = key_words(key)
    contexts = contexts.to(torch.int64) & UINT32_MASK
    prefix, width, device = contexts.shape[:-1], contexts.shape[-1], contexts.device

    def full(value: int) -> torch.Tensor:
        return torch.full(prefix, value, dtype=torch.int64, device=device)

    state: Words = (full(_CONTEXT_DOMAIN), full(width), full(0), full(0))
    key_1 = full(k1)
    for offset in range(0, width, 4):
        block = [
            contexts[..., offset + i] if offset + i < width else full(UINT32_MASK - i)
            for i in range(4)
        ]
        counter = tuple((state[i] ^ block[i]) & UINT32_MASK for i in range(4))
        state = philox4x32_10(counter, (full((k0 ^ offset) & UINT32_MASK), key_1))  # type: ignore[arg-type]
    return state


def _token_words(key: int, state: Words, groups: torch.Tensor) -> Words:
    """state: four [..., 1] words; groups: [..., G] int64 (token id >> 2) -> four [..., G]
    words, word i for token ``4 * group + i``."""
    k0, k1 = key_words(key)
    s0, s1, s2, s3 = state
    zero = torch.zeros_like(groups)
    return philox4x32_10(
        (groups & UINT32_MASK, s0 + zero, s1 + zero, s2 + zero),
        (((s3 ^ k0) & UINT32_MASK) + zero, zero + ((k1 ^ _TOKEN_DOMAIN) & UINT32_MASK)),
    )


def philox_uniform(key: int, contexts: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """vLLM's ``PhiloxPRF(key).uniform``: contexts [..., W] and token_ids broadcastable to
    [..., T] -> [..., T] float32 uniforms, one per (context, token)."""
    state = tuple(w.unsqueeze(-1) for w in context_state(key, contexts))  # [..., 1] each
    shape = torch.broadcast_shapes(state[0].shape, token_ids.shape)
    tokens = torch.broadcast_to(token_ids.to(contexts.device, torch.int64), shape) & UINT32_MASK
    words = _token_words(key, state, tokens >> 2)  # type: ignore[arg-type]
    lane = tokens & 3
    out = words[0]
    for i in range(1, 4):
        out = torch.where(lane == i, words[i], out)
    return uint32_to_uniform(out)


def vocab_uniforms(key: int, contexts: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """contexts: [N, W] -> [N, V] float32: :func:`philox_uniform` for every token id below
    ``vocab_size``, one Philox call per four tokens."""
    state = tuple(w.unsqueeze(-1) for w in context_state(key, contexts))  # [N, 1] each
    num_groups = -(-vocab_size // 4)
    groups = torch.arange(num_groups, dtype=torch.int64, device=contexts.device)  # [G]
    words = _token_words(key, state, groups.unsqueeze(0))  # type: ignore[arg-type]
    interleaved = torch.stack(words, dim=-1).reshape(contexts.shape[0], 4 * num_groups)
    return uint32_to_uniform(interleaved[:, :vocab_size])  # [N, V]


def uniforms_at(
    key: int, contexts: torch.Tensor, rows: torch.Tensor, token_ids: torch.Tensor
) -> torch.Tensor:
    """contexts: [N, W]; rows, token_ids: [M] int64 -> [M] float32, the uniform of
    ``token_ids[m]`` at context ``contexts[rows[m]]`` (each context absorbed once)."""
    state = tuple(w[rows].unsqueeze(-1) for w in context_state(key, contexts))  # [M, 1]
    tokens = token_ids.to(torch.int64).unsqueeze(-1) & UINT32_MASK  # [M, 1]
    words = _token_words(key, state, tokens >> 2)  # type: ignore[arg-type]
    lane = tokens & 3
    out = words[0]
    for i in range(1, 4):
        out = torch.where(lane == i, words[i], out)
    return uint32_to_uniform(out.squeeze(-1))
