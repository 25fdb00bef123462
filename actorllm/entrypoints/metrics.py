"""Prometheus metrics with vLLM's names (prefix ``actorllm:``), and the periodic stats log line.

One :class:`ServerMetrics` per app, on its own ``CollectorRegistry`` (never the global one,
so several apps in one process — tests — do not collide). Two sources feed it:

* engine state, pulled at scrape time: ``update_from_stats(await engine.get_stats())`` sets
  the gauges and advances the counters that the engine keeps cumulatively (prefix cache,
  preemptions, actor restarts);
* per-request timings, pushed by the serving layer as it streams: one
  :class:`RequestObserver` per engine request reads ``RequestOutput.metrics``.

    >>> m = ServerMetrics("demo")
    >>> b"actorllm:num_requests_running" in m.render()
    True
"""

from __future__ import annotations

import logging
import time
from typing import Any, final

import anyio
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from actorllm.core.outputs import RequestOutput

logger = logging.getLogger("actorllm.metrics")

CONTENT_TYPE = CONTENT_TYPE_LATEST
_LATENCY_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


@final
class ServerMetrics:
    """The server's Prometheus metrics; ``render()`` is the /metrics body."""

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name
        self._steps_seen = 0  # engine steps already observed in iteration_tokens
        self.registry = CollectorRegistry(auto_describe=True)
        r, m = self.registry, ["model_name"]
        self.running = Gauge(
            "actorllm:num_requests_running", "Requests in the running batch.", m, registry=r
        )
        self.waiting = Gauge(
            "actorllm:num_requests_waiting", "Requests waiting to be scheduled.", m, registry=r
        )
        self.kv_usage = Gauge(
            "actorllm:kv_cache_usage_perc", "KV-cache usage, 0..1.", m, registry=r
        )
        self.prefix_queries = Counter(
            "actorllm:prefix_cache_queries",
            "Prompt tokens looked up in the prefix cache.",
            m,
            registry=r,
        )
        self.prefix_hits = Counter(
            "actorllm:prefix_cache_hits", "Prompt tokens found in the prefix cache.", m, registry=r
        )
        self.preemptions = Counter(
            "actorllm:num_preemptions", "Cumulative preemptions.", m, registry=r
        )
        self.prompt_tokens = Counter(
            "actorllm:prompt_tokens", "Prompt tokens processed.", m, registry=r
        )
        self.generation_tokens = Counter(
            "actorllm:generation_tokens", "Tokens generated.", m, registry=r
        )
        self.request_success = Counter(
            "actorllm:request_success", "Finished requests.", [*m, "finished_reason"], registry=r
        )
        self.ttft = Histogram(
            "actorllm:time_to_first_token_seconds",
            "Time to first token.",
            m,
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            "actorllm:inter_token_latency_seconds",
            "Time between tokens.",
            m,
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            "actorllm:e2e_request_latency_seconds",
            "Arrival to finish.",
            m,
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_time = Histogram(
            "actorllm:request_queue_time_seconds",
            "Arrival to first scheduled.",
            m,
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.iteration_tokens = Histogram(
            "actorllm:iteration_tokens_total",
            "Tokens per engine step.",
            m,
            buckets=_TOKEN_BUCKETS,
            registry=r,
        )
        self.actor_restarts = Counter(
            "actorllm:actor_restarts", "Actor restarts.", [*m, "actor"], registry=r
        )
        self.mailbox_depth = Gauge(
            "actorllm:mailbox_depth",
            "Messages queued in an actor's mailbox.",
            [*m, "actor"],
            registry=r,
        )
        # Last cumulative values seen from the engine: {metric key: value}.
        self._last: dict[str, float] = {}
        # Totals of what the serving layer recorded, for the periodic log line.
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def _advance(self, key: str, counter: Counter, value: float) -> None:
        """Move a counter to an engine-side cumulative ``value`` (a restart resets it to 0)."""
        last = self._last.get(key, 0.0)
        delta = value - last if value >= last else value
        if delta > 0:
            counter.inc(delta)
        self._last[key] = value

    def update_from_stats(self, stats: Any) -> None:
        """Refresh from an ``EngineStats`` (attributes read leniently: fields may be added)."""
        name = self.model_name
        self.running.labels(name).set(getattr(stats, "num_running_reqs", 0))
        self.waiting.labels(name).set(getattr(stats, "num_waiting_reqs", 0))
        self.kv_usage.labels(name).set(getattr(stats, "kv_cache_usage", 0.0))
        self._advance(
            "pq", self.prefix_queries.labels(name), getattr(stats, "prefix_cache_queries", 0)
        )
        self._advance("ph", self.prefix_hits.labels(name), getattr(stats, "prefix_cache_hits", 0))
        self._advance("pre", self.preemptions.labels(name), getattr(stats, "num_preemptions", 0))
        for actor, count in (getattr(stats, "actor_restarts", None) or {}).items():
            self._advance(f"restart:{actor}", self.actor_restarts.labels(name, actor), count)
        for actor, depth in (getattr(stats, "mailbox_depth", None) or {}).items():
            self.mailbox_depth.labels(name, actor).set(depth)
        # The engine keeps the token counts of its recent steps; observe only the tail this
        # registry has not seen yet (steps_done is the cursor).
        recent = list(getattr(stats, "iteration_tokens", None) or ())
        steps_done = int(getattr(stats, "steps_done", 0))
        new = min(len(recent), max(0, steps_done - self._steps_seen))
        self._steps_seen = max(self._steps_seen, steps_done)
        for n in recent[len(recent) - new :]:
            self.iteration_tokens.labels(name).observe(n)

    def observe_request(self) -> RequestObserver:
        return RequestObserver(self)


@final
class RequestObserver:
    """Records one engine request's token counts and latencies from its outputs.

    Call ``update(output)`` for every ``RequestOutput`` of the request, in order. Works with
    every output kind: token counts are per-output ``token_ids`` under DELTA and are taken as
    cumulative otherwise (pass ``delta=False``).
    """

    def __init__(self, metrics: ServerMetrics) -> None:
        self._m = metrics
        self._prompt_counted = False
        # {sample index: tokens seen}: the ITL is per sequence, so the longest one paces it.
        self._tokens: dict[int, int] = {}
        self._itl_time: float | None = None  # last_token_time of the previous ITL sample
        self._itl_tokens = 0  # tokens of the longest sequence at that time
        self._finish_reasons: dict[int, str] = {}
        self._done = False

    def update(self, out: RequestOutput, *, delta: bool) -> None:
        m, name = self._m, self._m.model_name
        if not self._prompt_counted and out.prompt_token_ids:
            self._prompt_counted = True
            m.prompt_tokens.labels(name).inc(len(out.prompt_token_ids))
            m.prompt_tokens_total += len(out.prompt_token_ids)
        new = 0
        for co in out.outputs:
            before = self._tokens.get(co.index, 0)
            now = before + len(co.token_ids) if delta else len(co.token_ids)
            new += max(0, now - before)
            self._tokens[co.index] = max(before, now)
            if co.finish_reason is not None:
                self._finish_reasons.setdefault(co.index, co.finish_reason)
        if new:
            m.generation_tokens.labels(name).inc(new)
            m.generation_tokens_total += new
        self._observe_itl(out)
        if out.finished and not self._done:
            self._done = True
            self._observe_finish(out)

    def _observe_itl(self, out: RequestOutput) -> None:
        rm = out.metrics
        if rm is None or rm.first_token_time is None or rm.last_token_time is None:
            return
        longest = max(self._tokens.values(), default=0)
        if self._itl_time is None:
            self._itl_time, self._itl_tokens = rm.first_token_time, 1
        gaps = longest - self._itl_tokens
        if gaps > 0:
            per_token = max(0.0, rm.last_token_time - self._itl_time) / gaps
            hist = self._m.itl.labels(self._m.model_name)
            for _ in range(gaps):
                hist.observe(per_token)
            self._itl_time, self._itl_tokens = rm.last_token_time, longest

    def _observe_finish(self, out: RequestOutput) -> None:
        m, name = self._m, self._m.model_name
        reason = self._finish_reasons.get(0) or next(iter(self._finish_reasons.values()), "abort")
        m.request_success.labels(name, reason).inc()
        rm = out.metrics
        if rm is None:
            return
        if rm.first_token_time is not None:
            m.ttft.labels(name).observe(max(0.0, rm.first_token_time - rm.arrival_time))
        if rm.first_scheduled_time is not None:
            m.queue_time.labels(name).observe(max(0.0, rm.first_scheduled_time - rm.arrival_time))
        end = rm.finished_time if rm.finished_time is not None else rm.last_token_time
        if end is not None:
            m.e2e.labels(name).observe(max(0.0, end - rm.arrival_time))


async def log_stats_forever(engine: Any, metrics: ServerMetrics, interval_s: float) -> None:
    """Every ``interval_s``, log vLLM's throughput / queue / cache line. Runs until cancelled.

    A failing ``get_stats`` (engine dying) is logged and retried next interval.
    """
    last_t = time.monotonic()
    last_prompt, last_gen = metrics.prompt_tokens_total, metrics.generation_tokens_total
    last_q = last_h = 0.0
    while True:
        await anyio.sleep(interval_s)
        try:
            stats = await engine.get_stats()
        except Exception as exc:
            logger.warning("could not read engine stats: %s", exc)
            continue
        now = time.monotonic()
        dt = max(now - last_t, 1e-9)
        q = float(getattr(stats, "prefix_cache_queries", 0))
        h = float(getattr(stats, "prefix_cache_hits", 0))
        dq, dh = (q - last_q, h - last_h) if q >= last_q else (q, h)
        logger.info(
            "Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, "
            "Running: %d reqs, Waiting: %d reqs, GPU KV cache usage: %.1f%%, "
            "Prefix cache hit rate: %.1f%%",
            (metrics.prompt_tokens_total - last_prompt) / dt,
            (metrics.generation_tokens_total - last_gen) / dt,
            getattr(stats, "num_running_reqs", 0),
            getattr(stats, "num_waiting_reqs", 0),
            100.0 * getattr(stats, "kv_cache_usage", 0.0),
            100.0 * dh / dq if dq > 0 else 0.0,
        )
        last_t, last_q, last_h = now, q, h
        last_prompt, last_gen = metrics.prompt_tokens_total, metrics.generation_tokens_total
