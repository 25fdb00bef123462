"""The verifier: which drafts a speculative step accepts, from the target's own samples.

Every verified position was sampled from the *target* distribution by the ordinary
sampler (all of a request's sampling parameters applied at that position, with the
drafts before it as outputs: ``sampling_metadata.py``). A request's run is its samples up
to and including the first one that differs from its draft (all k + 1 when every draft
matches). This is vLLM's rejection sampling for drafts without probabilities, which every
method built here has (vLLM treats them as one-hot: ``draft_sample_method="greedy"``):

* greedy: accept while draft == argmax, then the target's argmax — token-identical to
  decoding without speculation;
* random: a one-hot draft d is accepted with probability min(1, p(d) / 1) = p(d), and on
  rejection the token comes from the normalised residual max(0, p - onehot(d)), which is
  p without d. Sampling x ~ p and accepting iff x == d gives exactly that: P(accept) =
  p(d), and given x != d, x is distributed as p restricted to the other tokens. So every
  emitted token is a sample of the target's distribution given the tokens before it.

Because each position's draw is the sampler's usual one (a seeded request's uniform is a
function of (seed, output position)), a seeded request emits the same tokens with and
without speculation, and whatever the drafts were: a step replayed after a crash, with
different or no drafts, changes nothing.

    >>> accept_runs([7, 8, 4, 9], counts=[1, 3], drafts=[[], [8, 5]])
    [[7], [8, 4]]
"""

from __future__ import annotations

from collections.abc import Sequence


def accept_runs(
    sampled: Sequence[int], counts: Sequence[int], drafts: Sequence[Sequence[int]]
) -> list[list[int]]:
    """``sampled``: [R] the target's samples, request after request, ``counts[i]`` =
    ``len(drafts[i]) + 1`` rows each -> each request's emitted tokens (1..counts[i])."""
    runs: list[list[int]] = []
    r0 = 0
    for c, d in zip(counts, drafts, strict=True):
        m = 0
        while m < c - 1 and sampled[r0 + m] == d[m]:
            m += 1
        runs.append(list(sampled[r0 : r0 + m + 1]))
        r0 += c
    return runs
