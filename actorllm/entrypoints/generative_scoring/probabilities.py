"""An item's label probabilities from the full-vocabulary logprobs of the label tokens."""

from __future__ import annotations

import math
from collections.abc import Mapping


def label_probabilities(logprobs: Mapping[int, float], *, apply_softmax: bool) -> dict[int, float]:
    """{label id: probability}. ``apply_softmax``: renormalised over the labels alone (a
    softmax of their logprobs, which is the softmax of their logits); else the model's own
    probability over the whole vocabulary, ``exp(logprob)``. A label named twice counts
    once (vLLM keys the labels by id).

        >>> p = label_probabilities({5: math.log(0.2), 7: math.log(0.6)}, apply_softmax=True)
        >>> round(p[5], 6), round(p[7], 6)
        (0.25, 0.75)
        >>> round(label_probabilities({5: math.log(0.2)}, apply_softmax=False)[5], 6)
        0.2
    """
    if not apply_softmax:
        return {t: math.exp(lp) for t, lp in logprobs.items()}
    top = max(logprobs.values())  # shifted by the largest: no overflow, no underflow to 0/0
    weights = {t: math.exp(lp - top) for t, lp in logprobs.items()}
    total = sum(weights.values())
    return {t: w / total for t, w in weights.items()}
