"""vLLM's ORCA load report: a non-streamed chat or text completion asked for with the
request header ``endpoint-load-metrics-format: TEXT`` (or ``JSON``) answers with the
header ``endpoint-load-metrics`` carrying the engine's load as ORCA named metrics (what
Envoy-style load balancers read: the KV cache's use and the requests waiting), as vLLM's
``orca_metrics.py``:

* ``TEXT named_metrics.kv_cache_usage_perc=0.25, named_metrics.num_requests_waiting=0.0``
* ``JSON {"named_metrics": {"kv_cache_usage_perc": 0.25, "num_requests_waiting": 0.0}}``

Another format gets no header (vLLM logs a warning and sends none); a stream none either.

    >>> orca_header("text", {"kv_cache_usage_perc": 0.25, "num_requests_waiting": 0.0})[
    ...     "endpoint-load-metrics"]
    'TEXT named_metrics.kv_cache_usage_perc=0.25, named_metrics.num_requests_waiting=0.0'
"""

from __future__ import annotations

import json
import logging
from typing import Any

FORMAT_HEADER = "endpoint-load-metrics-format"
REPORT_HEADER = "endpoint-load-metrics"

logger = logging.getLogger("actorllm.server")


def orca_header(metrics_format: str, named: dict[str, float]) -> dict[str, str] | None:
    """The report header for ``named`` metrics in ``metrics_format`` (TEXT or JSON, any
    case); None for another format."""
    kind = metrics_format.lower()
    if kind == "text":
        text = ", ".join(f"named_metrics.{k}={v}" for k, v in named.items())
        return {REPORT_HEADER: f"TEXT {text}"}
    if kind == "json":
        return {REPORT_HEADER: f"JSON {json.dumps({'named_metrics': named})}"}
    logger.warning("%r is not an ORCA load report format (TEXT, JSON): no header sent", kind)
    return None


async def load_report(engine: Any, metrics_format: str) -> dict[str, str] | None:
    """The header for ``engine``'s load now (vLLM's two gauges), or None when not asked."""
    if not metrics_format:
        return None
    stats = await engine.get_stats()
    named = {
        "kv_cache_usage_perc": float(stats.kv_cache_usage),
        "num_requests_waiting": float(stats.num_waiting_reqs),
    }
    return orca_header(metrics_format, named)
