"""The sampling hot path as pure tensor functions, torch reference.

Randomness comes in as an argument: ``noise`` is i.i.d. Exp(1) per (row, token), drawn by
the caller (``worker/sampler.py`` seeds it per request and output position). Sampling is then
the *exponential race* ``argmax(probs / noise)``, which picks token ``i`` with probability
``probs[i]`` and is a pure function of (logits, params, noise) — so a Triton kernel can
reproduce it bit for bit given the same noise, and a replayed request redraws the same token.

    >>> logits = torch.tensor([[0.0, 2.0, 1.0]])
    >>> sample_from_logits(logits, torch.zeros(1), torch.zeros(1, dtype=torch.int32),
    ...                    torch.ones(1), torch.zeros(1), torch.ones(1, 3)).tolist()
    [1]
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from actorllm.kernels import native_sampling

GREEDY_EPS = 1e-5  # temperature below this is greedy (same threshold as SamplingParams)
CDF_BLOCK = 256  # tokens per block of the two-level inverse CDF


def sample_from_logits(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    min_p: torch.Tensor,
    noise: torch.Tensor | None,
    uniform: torch.Tensor | None = None,
    consume: bool = False,
) -> torch.Tensor:
    """Pick one token per row.

    logits: [B, V] float32 (penalties, biases and masks already applied), or bfloat16
    (read as its exact float32 widening; widened where a path needs float32 math);
    temperature: [B] float32 (< 1e-5: greedy, ``argmax`` with ties to the lowest id);
    top_k: [B] int32 (0 = off); top_p: [B] float32 (1.0 = off); min_p: [B] float32 (0 = off);
    noise: [B, V] float32, Exp(1) draws (ignored by greedy rows): the exponential race
    ``argmax(probs / noise)``; or ``uniform``: [B] float32 in [0, 1), one draw per row,
    sampled by inverse CDF (the same distribution, 18x cheaper on CPU than drawing V
    exponentials per row). Exactly one of the two is given.
    ``consume``: ``logits`` may be overwritten (the uniform path then allocates no [B, V]
    tensor of its own when no filter is on).
    Returns [B] int64. Order as vLLM: temperature, then min-p, then top-k, then top-p.
    """
    greedy = temperature < GREEDY_EPS  # [B]
    # Host syncs: skip the random path for all-greedy batches, the argmax for none.
    any_greedy = bool(greedy.any())
    greedy_tokens = first_argmax(logits) if any_greedy else None  # ties -> lowest id
    if greedy_tokens is not None and bool(greedy.all()):
        return greedy_tokens
    t = temperature
    if any_greedy:
        t = torch.where(greedy, torch.ones_like(temperature), temperature)
    if uniform is not None:
        random_tokens = _sample_tempered(logits, t, min_p, top_k, top_p, uniform, consume)
    else:
        # The exponential race keeps the division: the Triton kernel matches it bit for bit.
        assert noise is not None, "sample_from_logits needs noise or uniform"
        logits = logits.float()  # a no-op on float32
        x = logits / t.unsqueeze(1)  # [B, V]
        x = apply_top_k_top_p(apply_min_p(x, min_p), top_k, top_p)
        probs = x.softmax(dim=-1)  # [B, V], masked tokens exactly 0
        random_tokens = first_argmax(probs / noise)
    if greedy_tokens is None:
        return random_tokens
    return torch.where(greedy, greedy_tokens, random_tokens)


def first_argmax(x: torch.Tensor) -> torch.Tensor:
    """[B, V] -> [B] int64: ``x.argmax(dim=-1)``'s indices (the first maximum; a NaN counts
    as the maximum), through ``max(dim=-1)``, which gives the same index and is 2-4x faster
    on CPU (torch 2.13's argmax reduction is not vectorised: 22 against 5.5 ms over
    [128, 32000] bf16 logits on one core), the sampler's largest cost at a large batch."""
    return x.max(dim=-1).indices


def _sample_tempered(
    logits: torch.Tensor,
    t: torch.Tensor,
    min_p: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    uniform: torch.Tensor,
    consume: bool,
) -> torch.Tensor:
    """The inverse-CDF draw of ``sample_from_logits``: logits [B, V]; t: [B] > 0; uniform:
    [B] -> [B] int64. Without filters on any row, the native kernel where it takes the
    call (``kernels/native_sampling.py``: two reads of each row, nothing written);
    else the torch path."""
    # Host sync: one check for all three filters.
    filtered = bool((min_p > 0).any() | (top_k > 0).any() | (top_p < 1.0).any())
    if not filtered:
        got = native_sampling.sample_tempered(logits, t, uniform)
        if got is not None:
            return got
    if logits.dtype != torch.float32:  # the torch path computes in float32: our own copy
        logits, consume = logits.float(), True
    return sample_inverse_cdf(
        _tempered_weights(logits, t, min_p, top_k, top_p, consume, filtered), uniform
    )


def _tempered_weights(
    logits: torch.Tensor,
    t: torch.Tensor,
    min_p: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    consume: bool,
    filtered: bool = True,
) -> torch.Tensor:
    """Unnormalised sampling weights ``exp((x - max x) / t)`` [B, V] (filtered tokens 0)
    for the inverse CDF. logits: [B, V]; t: [B] > 0. Temperature is a multiply by the
    reciprocal, and the max is taken on the raw logits (t > 0 keeps it the max): no
    division pass and no [B, V] temporary beyond the result, which is ``logits`` itself
    with ``consume``. ``filtered``: some row has min-p, top-k or top-p on."""
    rt = t.reciprocal().unsqueeze(1)  # [B, 1]
    out = logits if consume else torch.empty_like(logits)  # [B, V]
    # Unfiltered rows never need the scaled logits, so the shift and the scale share one
    # pass.
    if not filtered:
        shift = logits.amax(dim=-1, keepdim=True).mul_(rt).neg_()  # [B, 1]: -max / t
        return torch.addcmul(shift, logits, rt, out=out).exp_()  # x / t - max / t
    x = filtered_scaled_logits(logits, rt, min_p, top_k, top_p, out)
    return weights_from_filtered(x)


def filtered_scaled_logits(
    logits: torch.Tensor,
    rt: torch.Tensor,
    min_p: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    out: torch.Tensor,
) -> torch.Tensor:
    """The logits the draw samples from: ``logits * rt`` (rt: [B, 1], 1 / temperature)
    with the tokens min-p, top-k and top-p drop at -inf. logits, out: [B, V] float32
    (``out`` may be ``logits``) -> [B, V], ``out`` or a new tensor. vLLM's processed
    logits: the sampling mask and processed logprobs read exactly these."""
    x = torch.mul(logits, rt, out=out)  # [B, V]
    return apply_top_k_top_p(apply_min_p(x, min_p), top_k, top_p)


def weights_from_filtered(x: torch.Tensor) -> torch.Tensor:
    """[B, V] filtered scaled logits -> unnormalised weights, in place (masked tokens 0)."""
    return x.sub_(x.amax(dim=-1, keepdim=True)).exp_()


def sample_inverse_cdf(probs: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """probs: [B, V] (rows may be unnormalised; zeros are never picked); uniform: [B] in
    [0, 1) -> [B] int64, the first token whose cumulative probability exceeds u * total.

    Two levels, because a [B, V] ``cumsum`` is a serial scan per row (5-10x the rest of the
    sampler at V = 32000 on CPU): block sums ([B, V / CDF_BLOCK], vectorised), a prefix
    sum over those to find the block, then a prefix sum inside that one block only.
    """
    b, v = probs.shape
    nb = -(-v // CDF_BLOCK)
    if nb * CDF_BLOCK != v:  # zero padding: never picked (right=True skips zero mass)
        probs = F.pad(probs, (0, nb * CDF_BLOCK - v))
    blocks = probs.view(b, nb, CDF_BLOCK)  # [B, NB, BLK]
    cdf = blocks.sum(dim=-1).cumsum(dim=-1)  # [B, NB]
    total = cdf[:, -1:]  # [B, 1]
    # Strictly below the total, so rounding can never step past the last non-zero token;
    # right=True skips blocks and tokens of probability 0 (their cdf equals their
    # predecessor's).
    target = torch.minimum(uniform.unsqueeze(1) * total, total * (1.0 - 2.0**-20))  # [B, 1]
    blk = torch.searchsorted(cdf, target, right=True).clamp_(max=nb - 1)  # [B, 1]
    before = cdf.gather(1, (blk - 1).clamp(min=0)) * (blk > 0)  # [B, 1] mass before blk
    inner = blocks.gather(1, blk.unsqueeze(-1).expand(b, 1, CDF_BLOCK)).squeeze(1)
    inner_cdf = inner.cumsum(dim=-1)  # [B, BLK]
    # The block's own sum can round below target - before: stay strictly inside it.
    rest = torch.minimum(target - before, inner_cdf[:, -1:] * (1.0 - 2.0**-20))
    j = torch.searchsorted(inner_cdf, rest, right=True).clamp_(max=CDF_BLOCK - 1)  # [B, 1]
    return (blk * CDF_BLOCK + j).squeeze(1).clamp_(max=v - 1)


def apply_min_p(logits: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """Mask tokens whose probability is below ``min_p * max_prob``. logits: [B, V]; min_p: [B]."""
    if not bool((min_p > 0).any()):  # host sync: skip the softmax when unused
        return logits
    probs = logits.softmax(dim=-1)
    threshold = probs.amax(dim=-1, keepdim=True) * min_p.unsqueeze(1)  # [B, 1]
    return logits.masked_fill(probs < threshold, float("-inf"))


def apply_top_k_top_p(
    logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor
) -> torch.Tensor:
    """Keep the ``top_k`` largest logits (ties at the k-th value kept), then the smallest
    set of tokens whose probability mass reaches ``top_p``. logits: [B, V] -> [B, V]."""
    use_k = top_k > 0
    use_p = top_p < 1.0
    if not bool(use_k.any() | use_p.any()):  # host sync: skip the sort when unused
        return logits
    v = logits.shape[-1]
    sorted_logits, order = logits.sort(dim=-1, descending=True)  # [B, V]
    if bool(use_k.any()):
        k = torch.where(
            use_k, top_k.long().clamp(max=v), torch.full_like(top_k, v, dtype=torch.long)
        )
        kth = sorted_logits.gather(1, (k - 1).unsqueeze(1))  # [B, 1]
        sorted_logits = sorted_logits.masked_fill(sorted_logits < kth, float("-inf"))
    if bool(use_p.any()):
        probs = sorted_logits.softmax(dim=-1)
        mass_before = probs.cumsum(dim=-1) - probs  # exclusive prefix mass, [B, V]
        drop = mass_before >= top_p.unsqueeze(1)
        drop[:, 0] = False  # the most likely token always stays
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.empty_like(logits).scatter_(1, order, sorted_logits)


def apply_penalties(
    logits: torch.Tensor,
    prompt_mask: torch.Tensor,
    output_counts: torch.Tensor,
    presence: torch.Tensor,
    frequency: torch.Tensor,
    repetition: torch.Tensor,
    consume: bool = False,
) -> torch.Tensor:
    """vLLM's penalties; out of place unless ``consume`` (then ``logits`` is overwritten).

    logits: [B, V] float32; prompt_mask: [B, V] bool (token in the prompt);
    output_counts: [B, V] int (occurrences among the outputs); presence, frequency,
    repetition: [B] float32. Repetition divides positive logits (multiplies negative ones)
    of tokens seen in prompt *or* outputs; frequency subtracts ``f * count`` and presence
    ``p * (count > 0)``, over the outputs only.

    Each penalty no row uses is skipped, and the rest update one buffer in place: the same
    values bit for bit as the where/subtract form (an unpenalised token is divided or
    multiplied by exactly 1), without its nine [B, V] float32 temporaries.
    """
    x = logits if consume else logits.clone()  # [B, V]
    seen_out = output_counts > 0  # [B, V] bool
    # Host syncs: one per penalty kind, to skip the [B, V] passes of kinds nobody uses.
    if bool((repetition != 1.0).any()):
        rep = repetition.unsqueeze(1)  # [B, 1]
        one = torch.ones((), dtype=x.dtype, device=x.device)
        seen = prompt_mask | seen_out  # [B, V]
        pos = x > 0  # [B, V], before either pass changes x
        x.div_(torch.where(seen & pos, rep, one))  # seen positives / rep
        x.mul_(torch.where(seen & ~pos, rep, one))  # seen non-positives * rep
    if bool((frequency != 0.0).any()):
        x.sub_(output_counts.to(x.dtype).mul_(frequency.unsqueeze(1)))  # f * count
    if bool((presence != 0.0).any()):
        x.sub_(seen_out.to(x.dtype).mul_(presence.unsqueeze(1)))  # p * (count > 0)
    return x


def token_counts(token_ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """token_ids: [B, L] int64 padded with ``vocab_size`` -> counts [B, V] int32."""
    counts = torch.zeros(
        token_ids.shape[0], vocab_size + 1, dtype=torch.int32, device=token_ids.device
    )
    counts.scatter_add_(1, token_ids, torch.ones_like(token_ids, dtype=torch.int32))
    return counts[:, :vocab_size]


def token_mask(token_ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """token_ids: [B, L] int64 padded with ``vocab_size`` -> [B, V] bool, the token occurs:
    ``token_counts(...) > 0`` without the int32 counts (a quarter of the bytes, no add)."""
    mask = torch.zeros(
        token_ids.shape[0], vocab_size + 1, dtype=torch.bool, device=token_ids.device
    )  # [B, V + 1]: the last column catches the padding
    mask.scatter_(1, token_ids, True)
    return mask[:, :vocab_size]
