"""The engine's statistics as Prometheus metrics (vLLM's names, labels, buckets): the
server's ``/metrics`` and ``LLM.get_metrics()`` read the same families."""
