"""Prometheus metrics with vLLM's names, labels and buckets, under a configurable prefix, and
the periodic stats log line.

Every metric of vLLM's published Grafana dashboard exists here. The default prefix is
``actorllm:``; ``--metrics-prefix vllm`` names them ``vllm:...`` so an existing vLLM dashboard
works unchanged. Labels are vLLM's: ``model_name`` and ``engine``, the engine index. With
``data_parallel_size=M`` the scheduler's figures (requests running and waiting, KV-cache
usage, prefix cache, preemptions, tokens per step, cache config) are one series per replica,
``engine="0"`` ... ``engine="M-1"``, as vLLM's DP engines report them. The per-request
figures are recorded by the one output processor all replicas share, so they stay one
series, ``engine="0"``.

The figures come from the engine, not from HTTP traffic: ``AsyncEngine.get_stats()`` carries
the scheduler's gauges and counters and the per-request statistics the engine's output path
records (``core/request_stats.py``), so requests from any front end count. The /metrics
route calls ``update_from_stats(await engine.get_stats())`` and renders; a custom collector
turns the snapshot into metric families. One :class:`ServerMetrics` per app, on its own
``CollectorRegistry`` (never the global one: several apps in one process must not collide).

    >>> m = ServerMetrics("demo", prefix="vllm")
    >>> b'vllm:num_requests_running{engine="0",model_name="demo"}' in m.render()
    True
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, final

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from actorllm.core.histogram_buckets import family_bounds
from actorllm.core.request_stats import ADMISSION_REASONS, Histogram, RequestStatsSnapshot
from actorllm.engine.metrics.info import cache_config_info, lora_requests_info

if TYPE_CHECKING:
    from actorllm.engine.config.engine_config import EngineConfig

logger = logging.getLogger("actorllm.metrics")

CONTENT_TYPE = CONTENT_TYPE_LATEST
DEFAULT_PREFIX = "actorllm:"
# Speculative decoding counters (vLLM's names under our prefix): {stats field: help}.
_SPEC_COUNTERS = {
    "spec_decode_num_drafts": "Number of spec decoding drafts.",
    "spec_decode_num_draft_tokens": "Number of draft tokens.",
    "spec_decode_num_accepted_tokens": "Number of accepted tokens.",
}
_ITERATION_BUCKETS = (1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0,
                      8192.0, 16384.0)  # fmt: skip

# {histogram name: help}, in vLLM's words where it has them.
_HISTOGRAMS = {
    "time_to_first_token_seconds": "Histogram of time to first token in seconds.",
    "inter_token_latency_seconds": "Histogram of inter-token latency in seconds.",
    "time_per_output_token_seconds": "Histogram of time per output token in seconds.",
    "e2e_request_latency_seconds": "Histogram of e2e request latency in seconds.",
    "request_queue_time_seconds": "Histogram of time spent in WAITING phase for request.",
    "request_inference_time_seconds": "Histogram of time spent in RUNNING phase for request.",
    "request_prefill_time_seconds": "Histogram of time spent in PREFILL phase for request.",
    "request_decode_time_seconds": "Histogram of time spent in DECODE phase for request.",
    "request_prompt_tokens": "Number of prefill tokens processed.",
    "request_generation_tokens": "Number of generation tokens processed.",
    "request_max_num_generation_tokens": "Maximum number of requested generation tokens.",
    "request_params_n": "Histogram of the n request parameter.",
    "request_params_max_tokens": "Histogram of the max_tokens request parameter.",
    "request_num_preemptions": "Histogram of the number of times a request was preempted.",
    "request_prefill_kv_computed_tokens": (
        "Histogram of new KV tokens computed during prefill (excluding cached tokens)."
    ),
}
# {vLLM 0.32's name: the histogram above it renders}: each request's mean time per output
# token, which vLLM now names request_time_per_output_token_seconds (its older
# time_per_output_token_seconds stays, for the dashboards that read it).
_SAME_HISTOGRAMS = {
    "request_time_per_output_token_seconds": (
        "time_per_output_token_seconds",
        "Histogram of time_per_output_token_seconds per request.",
    ),
}


def normalize_prefix(prefix: str) -> str:
    """``vllm`` and ``vllm:`` both mean the ``vllm:`` names.

    >>> normalize_prefix("vllm"), normalize_prefix("actorllm:"), normalize_prefix("")
    ('vllm:', 'actorllm:', '')
    """
    return prefix if not prefix or prefix.endswith((":", "_")) else prefix + ":"


def _histogram(name: str, doc: str, labels: dict[str, str], h: Histogram) -> Metric:
    return _histograms(name, doc, [(labels, h)])


def _histograms(
    name: str, doc: str, series: list[tuple[dict[str, str], Histogram | None]]
) -> Metric:
    """One histogram family, a series per label set (None: an empty one)."""
    family = HistogramMetricFamily(name, doc, labels=list(series[0][0]))
    for labels, hist in series:
        h = hist if hist is not None else Histogram.empty(_ITERATION_BUCKETS)
        running, buckets = 0, []
        for bound, count in zip((*h.bounds, float("inf")), h.counts, strict=True):
            running += count
            buckets.append(("+Inf" if bound == float("inf") else repr(float(bound)), running))
        family.add_metric(list(labels.values()), buckets, h.sum)
    return family


def _engines(stats: Any) -> list[tuple[str, Any]]:
    """(engine label, its figures): each replica's with several, else the totals as "0"."""
    engines = getattr(stats, "engines", None) or []
    if len(engines) > 1:
        return [(str(e.engine), e) for e in engines]
    return [("0", stats)]


@final
class _EngineCollector(Collector):
    """Renders the last engine snapshot the metrics object holds."""

    def __init__(self, metrics: ServerMetrics) -> None:
        self._m = metrics

    def collect(self) -> Iterator[Metric]:
        yield from self._m.families()


@final
class ServerMetrics:
    """The server's Prometheus metrics; ``render()`` is the /metrics body."""

    def __init__(
        self,
        model_name: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        cache_config: EngineConfig | None = None,
        max_model_len: int | None = None,
    ) -> None:
        """``max_model_len``: the context length in use (the config's when None), for the
        KV-cache capacity labels of ``cache_config_info``."""
        self.model_name = model_name
        self.prefix = normalize_prefix(prefix)
        self._labels = {"model_name": model_name, "engine": "0"}
        self._cache_config = cache_config  # an EngineConfig (cache_config_info), or None
        if max_model_len is None and cache_config is not None:
            max_model_len = cache_config.max_model_len
        self._max_model_len = max_model_len
        self._stats: Any = None  # the last EngineStats
        self._stats_time = time.time()  # when it was taken (wall clock, for info gauges)
        # Counters the engine keeps cumulatively, made monotonic across engine restarts:
        # {key: (last value seen, total before the last reset)}.
        self._counters: dict[str, tuple[float, float]] = {}
        # Per engine (replica) index: steps already observed in its iteration_tokens, and
        # the histogram of its step sizes.
        self._iterations_seen: dict[str, int] = {}
        self._iteration: dict[str, Histogram] = {}
        # iteration_tokens_total's bounds: vLLM's, or the config's custom_histogram_buckets.
        custom = cache_config.custom_histogram_buckets if cache_config is not None else None
        self._iteration_bounds = family_bounds(
            {"iteration_tokens_total": _ITERATION_BUCKETS}, custom
        )["iteration_tokens_total"]
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_EngineCollector(self))

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def _total(self, key: str, value: float) -> float:
        """A cumulative engine counter as a monotonic total (a restart resets it to 0)."""
        last, base = self._counters.get(key, (0.0, 0.0))
        if value < last:
            base += last
        self._counters[key] = (value, base)
        return base + value

    def update_from_stats(self, stats: Any) -> None:
        """Take an ``EngineStats`` (attributes read leniently: fields may be added)."""
        self._stats = stats
        self._stats_time = time.time()
        for engine, figures in _engines(stats):
            for key in ("prefix_cache_queries", "prefix_cache_hits", "num_preemptions",
                        *_SPEC_COUNTERS):  # fmt: skip
                self._total(f"{key}:{engine}", float(getattr(figures, key, 0)))
            per_pos = getattr(figures, "spec_decode_num_accepted_tokens_per_pos", None) or ()
            for pos, n in enumerate(per_pos):
                self._total(f"spec_pos:{pos}:{engine}", float(n))
            # The engine keeps the token counts of its recent steps; observe only the tail
            # this registry has not seen yet (iterations_done is the cursor).
            recent = list(getattr(figures, "iteration_tokens", None) or ())
            done = int(getattr(figures, "iterations_done", 0))
            seen = self._iterations_seen.get(engine, 0)
            new = min(len(recent), max(0, done - seen))
            self._iterations_seen[engine] = max(seen, done)
            histogram = self._iteration.setdefault(engine, Histogram.empty(self._iteration_bounds))
            for n in recent[len(recent) - new :]:
                histogram.observe(n)
        for actor, count in (getattr(stats, "actor_restarts", None) or {}).items():
            self._total(f"restarts:{actor}", float(count))

    # -- rendering ------------------------------------------------------------------------

    def families(self) -> Iterator[Metric]:
        p, labels, stats = self.prefix, self._labels, self._stats
        names, values = list(labels), list(labels.values())
        engines = _engines(stats)
        totals = {key: last + base for key, (last, base) in self._counters.items()}

        def per_engine(family: Any, value: Callable[[str, Any], float]) -> Metric:
            for engine, figures in engines:
                family.add_metric([self.model_name, engine], value(engine, figures))
            return family

        def gauge(name: str, doc: str, attr: str) -> Metric:
            family = GaugeMetricFamily(p + name, doc, labels=names)
            return per_engine(family, lambda _e, f: float(getattr(f, attr, 0) or 0))

        def counter(name: str, doc: str, key: str) -> Metric:
            family = CounterMetricFamily(p + name, doc, labels=names)
            return per_engine(family, lambda e, _f: totals.get(f"{key}:{e}", 0))

        yield gauge(
            "num_requests_running", "Requests in model execution batches.", "num_running_reqs"
        )
        yield gauge("num_requests_waiting", "Requests waiting to be processed.", "num_waiting_reqs")
        yield self._waiting_by_reason(engines)
        usage = "kv_cache_usage"
        yield gauge("kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", usage)
        yield gauge("gpu_cache_usage_perc", "KV-cache usage (vLLM's older name).", usage)
        yield counter(
            "prefix_cache_queries", "Prefix cache queries, in tokens.", "prefix_cache_queries"
        )
        yield counter("prefix_cache_hits", "Prefix cache hits, in tokens.", "prefix_cache_hits")
        yield counter("num_preemptions", "Cumulative number of preemptions.", "num_preemptions")
        for key, doc in _SPEC_COUNTERS.items():
            yield counter(key, doc, key)
        per_pos = CounterMetricFamily(
            p + "spec_decode_num_accepted_tokens_per_pos",
            "Accepted draft tokens, per draft position.", labels=[*names, "position"],
        )  # fmt: skip
        for key, (last, base) in sorted(self._counters.items()):
            if key.startswith("spec_pos:"):
                _, pos, engine = key.split(":")
                per_pos.add_metric([self.model_name, engine, pos], last + base)
        yield per_pos
        requests: RequestStatsSnapshot | None = getattr(stats, "requests", None)

        def request_counter(name: str, doc: str, value: float) -> Metric:
            family = CounterMetricFamily(p + name, doc, labels=names)
            family.add_metric(values, value)
            return family

        yield request_counter(
            "prompt_tokens",
            "Number of prefill tokens processed.",
            requests.prompt_tokens if requests else 0,
        )
        yield request_counter(
            "generation_tokens",
            "Number of generation tokens processed.",
            requests.generation_tokens if requests else 0,
        )
        yield request_counter(
            "stream_outputs_merged",
            "Streamed outputs sent together with the next one: the client had not read the "
            "first when the next was produced.",
            float(getattr(stats, "stream_outputs_merged", 0)),
        )
        success = CounterMetricFamily(
            p + "request_success", "Count of successfully processed requests.",
            labels=[*names, "finished_reason"],
        )  # fmt: skip
        for reason in ("stop", "length", "abort", "error", "repetition"):
            count = requests.request_success.get(reason, 0) if requests else 0
            success.add_metric([*values, reason], count)
        yield success
        if requests is not None and requests.watermark_requests is not None:
            marks = CounterMetricFamily(
                p + "watermark_requests",
                "Finished requests by watermark status (only with watermark_config).",
                labels=[*names, "status"],
            )
            for status, count in requests.watermark_requests.items():
                marks.add_metric([*values, status], count)
            yield marks
        # vLLM's labels: the front end refuses, before any engine is chosen (no "engine").
        rejected = CounterMetricFamily(
            p + "admission_rejections",
            "Number of admission attempts rejected by a queue limit, by reason.",
            labels=["model_name", "reason"],
        )
        for reason in ADMISSION_REASONS:
            count = requests.admission_rejections.get(reason, 0) if requests else 0
            rejected.add_metric([self.model_name, reason], count)
        yield rejected
        if requests is not None:
            for name, doc in _HISTOGRAMS.items():
                if name in requests.histograms:
                    yield _histogram(p + name, doc, labels, requests.histograms[name])
            for name, (source, doc) in _SAME_HISTOGRAMS.items():
                if source in requests.histograms:
                    yield _histogram(p + name, doc, labels, requests.histograms[source])
        yield _histograms(
            p + "iteration_tokens_total", "Histogram of number of tokens per engine_step.",
            [
                (
                    {**labels, "engine": engine},
                    self._iteration.get(engine) or Histogram.empty(self._iteration_bounds),
                )
                for engine, _ in engines
            ],
        )  # fmt: skip
        yield from self._info_and_actors(names, values, engines)

    def _waiting_by_reason(self, engines: list[tuple[str, Any]]) -> Metric:
        """vLLM's split of ``num_requests_waiting``: ``deferred`` by a transient constraint
        (grammar compiling, tokens in flight, max_loras), the rest waiting for ``capacity``."""
        family = GaugeMetricFamily(
            self.prefix + "num_requests_waiting_by_reason",
            "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for "
            "scheduling capacity; 'deferred' = deferred by transient constraints (LoRA "
            "budget, tokens in flight, grammar compiling). Sum of all reasons equals "
            "num_requests_waiting.",
            labels=["model_name", "engine", "reason"],
        )  # fmt: skip
        for engine, figures in engines:
            waiting = int(getattr(figures, "num_waiting_reqs", 0) or 0)
            deferred = min(waiting, int(getattr(figures, "num_deferred_reqs", 0) or 0))
            family.add_metric([self.model_name, engine, "capacity"], waiting - deferred)
            family.add_metric([self.model_name, engine, "deferred"], deferred)
        return family

    def _info_and_actors(
        self, names: list[str], values: list[str], engines: list[tuple[str, Any]]
    ) -> Iterator[Metric]:
        p, stats = self.prefix, self._stats
        config = self._cache_config
        if config is not None:
            yield cache_config_info(p, config, self._max_model_len, engines)
            if config.enable_lora:
                yield lora_requests_info(p, config.max_loras, stats, self._stats_time)
        restarts = CounterMetricFamily(
            p + "actor_restarts", "Actor restarts.", labels=[*names, "actor"]
        )
        for key, (last, base) in self._counters.items():
            if key.startswith("restarts:"):
                restarts.add_metric([*values, key.removeprefix("restarts:")], last + base)
        yield restarts
        depth = GaugeMetricFamily(
            p + "mailbox_depth", "Messages queued in an actor's mailbox.", labels=[*names, "actor"]
        )
        for actor, queued in (getattr(stats, "mailbox_depth", None) or {}).items():
            depth.add_metric([*values, actor], queued)
        yield depth
