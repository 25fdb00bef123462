"""vLLM's histogram bucket families (``--custom-histogram-buckets``): which histograms share
which bucket bounds, and the check of a user's replacement bounds.

A family's custom bounds replace the default bounds of every histogram in it; families not
given keep theirs (vLLM's ``histogram_buckets``). vLLM's ``kv_cache_residency`` family has
no histogram here: custom bounds for it are refused by name rather than dropped.

    >>> check_custom_buckets({"request_latency": [1, 10, 100]})
    >>> family_bounds({"e2e_request_latency_seconds": (0.5,)}, {"request_latency": [1, 10]})
    {'e2e_request_latency_seconds': (1.0, 10.0)}
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import pairwise

# {family: the histograms (by name, without prefix) whose bounds it gives}
FAMILIES: Mapping[str, tuple[str, ...]] = {
    "request_latency": (
        "e2e_request_latency_seconds",
        "request_queue_time_seconds",
        "request_inference_time_seconds",
        "request_prefill_time_seconds",
        "request_decode_time_seconds",
    ),
    "time_to_first_token": ("time_to_first_token_seconds",),
    "inter_token_latency": ("inter_token_latency_seconds", "time_per_output_token_seconds"),
    "iteration_tokens": ("iteration_tokens_total",),
    "request_params_n": ("request_params_n",),
    "request_num_preemptions": ("request_num_preemptions",),
    "request_tokens": (
        "request_prompt_tokens",
        "request_generation_tokens",
        "request_max_num_generation_tokens",
        "request_params_max_tokens",
        "request_prefill_kv_computed_tokens",
    ),
}
# vLLM's families whose histograms are not built here: {family: why}.
NOT_BUILT = {
    "kv_cache_residency": "KV cache residency metrics are not collected",
}


def check_custom_buckets(custom: Mapping[str, Sequence[float]]) -> None:
    """Raise ``ValueError`` unless every family is known and built, and its bounds are a
    non-empty, strictly increasing list of finite positive numbers (vLLM's rules)."""
    for family, bounds in custom.items():
        where = f"custom_histogram_buckets[{family!r}]"
        if family in NOT_BUILT:
            raise ValueError(f"{where}: {NOT_BUILT[family]}.")
        if family not in FAMILIES:
            known = sorted([*FAMILIES, *NOT_BUILT])
            raise ValueError(f"{where}: unknown bucket family (known: {known}).")
        if not isinstance(bounds, list | tuple) or not bounds:
            raise ValueError(f"{where}: must be a non-empty list of bounds.")
        for bound in bounds:
            if isinstance(bound, bool) or not isinstance(bound, int | float):
                raise ValueError(f"{where}: bound {bound!r} must be a number.")
            if not math.isfinite(bound) or bound <= 0:
                raise ValueError(f"{where}: bound {bound!r} must be finite and positive.")
        if any(a >= b for a, b in pairwise(bounds)):
            raise ValueError(f"{where}: bounds {list(bounds)} must be strictly increasing.")


def family_bounds(
    defaults: Mapping[str, tuple[float, ...]], custom: Mapping[str, Sequence[float]] | None
) -> dict[str, tuple[float, ...]]:
    """``defaults`` ({histogram: bounds}) with each custom family's bounds over its own."""
    out = dict(defaults)
    for family, bounds in (custom or {}).items():
        for name in FAMILIES.get(family, ()):
            if name in out:
                out[name] = tuple(float(b) for b in bounds)
    return out
