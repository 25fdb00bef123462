"""vLLM's periodic stats log line, for any front door that runs an engine.

async with anyio.create_task_group() as tg:
    tg.start_soon(log_stats_forever, engine, 10.0)   # until cancelled
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Protocol

import anyio

if TYPE_CHECKING:
    from actorllm.engine.api.stats import EngineStats

logger = logging.getLogger("actorllm.metrics")  # the name vLLM users filter on


class StatsSource(Protocol):
    """What the logger reads: ``AsyncEngine`` (or a test's stand-in)."""

    async def get_stats(self) -> EngineStats: ...


async def log_stats_forever(engine: StatsSource, interval_s: float) -> None:
    """Every ``interval_s``, log vLLM's throughput / queue / cache line. Runs until cancelled.

    A failing ``get_stats`` (engine dying) is logged and retried next interval.
    """
    last_t = time.monotonic()
    last = (0.0, 0.0, 0.0, 0.0)  # prompt tokens, generation tokens, cache queries, hits
    while True:
        await anyio.sleep(interval_s)
        try:
            stats = await engine.get_stats()
        except Exception as exc:
            logger.warning("could not read engine stats: %s", exc)
            continue
        now = time.monotonic()
        dt = max(now - last_t, 1e-9)
        requests = stats.requests
        current = (
            float(requests.prompt_tokens if requests else 0),
            float(requests.generation_tokens if requests else 0),
            float(stats.prefix_cache_queries),
            float(stats.prefix_cache_hits),
        )
        # A counter that went down was reset by an engine restart: count from zero.
        dp, dg, dq, dh = (c - p if c >= p else c for c, p in zip(current, last, strict=True))
        logger.info(
            "Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, "
            "Running: %d reqs, Waiting: %d reqs, GPU KV cache usage: %.1f%%, "
            "Prefix cache hit rate: %.1f%%",
            dp / dt,
            dg / dt,
            stats.num_running_reqs,
            stats.num_waiting_reqs,
            100.0 * stats.kv_cache_usage,
            100.0 * dh / dq if dq > 0 else 0.0,
        )
        last_t, last = now, current
