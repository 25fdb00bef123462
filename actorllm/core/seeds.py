"""64-bit seed mixing (splitmix64's finaliser), for draws that must be a pure function of
their inputs: a seeded row's uniform at an output position (``worker/sampler.py``), and the
seed an offline request without one is given (``compat/vllm/sync_facade.py``).

    >>> mix_seed(0, 0) == mix_seed(0, 0) != mix_seed(0, 1)
    True
"""

from __future__ import annotations

MASK64 = (1 << 64) - 1


def mix_seed(seed: int, counter: int) -> int:
    """An unsigned 64-bit value from (seed, counter); nearby inputs give unrelated values."""
    x = (seed & MASK64) ^ (((counter + 1) * 0x9E3779B97F4A7C15) & MASK64)
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)
