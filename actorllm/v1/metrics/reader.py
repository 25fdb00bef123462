"""vLLM's import path (``vllm.v1.metrics.reader``) for the values ``LLM.get_metrics()``
returns; the code is in :mod:`actorllm.engine.metrics.snapshot`."""

from actorllm.engine.metrics.snapshot import Counter, Gauge, Histogram, Metric, Vector

__all__ = ["Counter", "Gauge", "Histogram", "Metric", "Vector"]
