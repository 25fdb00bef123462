"""vLLM's periodic stats log line, for any front door that runs an engine.

async with anyio.create_task_group() as tg:
    tg.start_soon(log_stats_forever, engine, 10.0)   # until cancelled
"""

from __future__ import annotations

import logging
import time
from typing import Any

import anyio

logger = logging.getLogger("actorllm.metrics")  # the name vLLM users filter on


async def log_stats_forever(engine: Any, interval_s: float) -> None:
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
        requests = getattr(stats, "requests", None)
        current = (
            float(requests.prompt_tokens if requests else 0),
            float(requests.generation_tokens if requests else 0),
            float(getattr(stats, "prefix_cache_queries", 0)),
            float(getattr(stats, "prefix_cache_hits", 0)),
        )
        # A counter that went down was reset by an engine restart: count from zero.
        dp, dg, dq, dh = (c - p if c >= p else c for c, p in zip(current, last, strict=True))
        logger.info(
            "Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, "
            "Running: %d reqs, Waiting: %d reqs, GPU KV cache usage: %.1f%%, "
            "Prefix cache hit rate: %.1f%%",
            dp / dt,
            dg / dt,
            getattr(stats, "num_running_reqs", 0),
            getattr(stats, "num_waiting_reqs", 0),
            100.0 * getattr(stats, "kv_cache_usage", 0.0),
            100.0 * dh / dq if dq > 0 else 0.0,
        )
        last_t, last = now, current
