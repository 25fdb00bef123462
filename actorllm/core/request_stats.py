"""Per-request statistics, recorded by the engine's output path: vLLM's request metrics.

Theory of operation: the output processor owns no clock of its own; it reports what each
step brought (:meth:`RequestStats.tokens`: new tokens, and the time since the sequence's
previous token) and each user request that ends (:meth:`RequestStats.finished`, with the
request's timestamps). Everything is accumulated here, in cumulative histograms whose
bucket bounds are vLLM's, so ``AsyncEngine.get_stats()`` and ``LLM`` users see the same
figures as the Prometheus exporter, which only renders :meth:`RequestStats.snapshot` under
the name prefix it was given. Times are ``time.monotonic()`` seconds.

    >>> stats = RequestStats(max_model_len=100)
    >>> stats.finished(FinishedRequest(finish_reason="stop", arrival_time=0.0,
    ...     scheduled_time=0.5, first_token_time=1.0, last_token_time=3.0, finished_time=3.0,
    ...     prompt_tokens=7, generation_tokens=5, max_generation_tokens=5, n=1, max_tokens=16))
    >>> snap = stats.snapshot()
    >>> snap.request_success, snap.histograms["request_decode_time_seconds"].sum
    ({'stop': 1}, 2.0)
"""

from __future__ import annotations

import bisect
from typing import final

import msgspec

from actorllm.core.histogram_buckets import family_bounds
from actorllm.core.watermark_config import WatermarkConfig
from actorllm.core.watermarking import WATERMARK_STATUSES, watermark_status

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
TOKEN_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
                         2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                           50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip
N_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0)
PREEMPTIONS_BUCKETS = (1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0)


def buckets_1_2_5(max_value: int) -> tuple[float, ...]:
    """1, 2, 5, 10, 20, 50, ... up to ``max_value`` (vLLM's token-count buckets).

    >>> buckets_1_2_5(100)
    (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)
    """
    out: list[float] = []
    scale = 1
    while True:
        for m in (1, 2, 5):
            if m * scale > max_value:
                return tuple(out)
            out.append(float(m * scale))
        scale *= 10


class Histogram(msgspec.Struct, kw_only=True):
    """A cumulative histogram: ``counts[i]`` observations in (bounds[i-1], bounds[i]], the
    last entry above every bound (Prometheus' ``+Inf``)."""

    bounds: tuple[float, ...]
    counts: list[int]
    sum: float = 0.0

    @classmethod
    def empty(cls, bounds: tuple[float, ...]) -> Histogram:
        return cls(bounds=bounds, counts=[0] * (len(bounds) + 1))

    def observe(self, value: float, times: int = 1) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += times
        self.sum += value * times

    @property
    def count(self) -> int:
        return sum(self.counts)


class FinishedRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One user request as it ended (its samples taken together)."""

    finish_reason: str  # "stop" | "length" | "abort" | "error" | "repetition"
    arrival_time: float
    scheduled_time: float | None  # first scheduled; None if it never was
    first_token_time: float | None
    last_token_time: float | None
    finished_time: float
    prompt_tokens: int
    generation_tokens: int  # over all samples
    max_generation_tokens: int  # of the longest sample
    n: int
    max_tokens: int | None  # the request's parameter (None: up to the context length)
    num_preemptions: int = 0  # over all samples
    cached_tokens: int = 0  # prompt tokens found in the prefix cache or brought by the connector
    # The request's SamplingParams.watermarking and greediness (its watermark status)
    watermarking: bool | None = None
    greedy: bool = False


# vLLM's admission-rejection reasons: the queue limits' names (engine/api/admission_limits.py).
ADMISSION_REASONS = ("max_num_queued_reqs", "max_num_queued_tokens")


class RequestStatsSnapshot(msgspec.Struct, kw_only=True):
    """Cumulative since the engine started. Histogram names are vLLM's, without prefix."""

    histograms: dict[str, Histogram]
    prompt_tokens: int = 0  # prompt tokens of requests that produced a first token
    generation_tokens: int = 0
    request_success: dict[str, int] = msgspec.field(default_factory=dict)  # {reason: count}
    # Requests a queue limit refused before they started, {limit's name: count} (vLLM's
    # admission rejections: engine/api/admission_limits.py).
    admission_rejections: dict[str, int] = msgspec.field(default_factory=dict)
    # Finished requests by watermark status (core/watermarking.py), vLLM's
    # vllm:watermark_requests; None without a watermark configured (no such metric).
    watermark_requests: dict[str, int] | None = None


@final
class RequestStats:
    """The accumulator (one per engine; the output path writes, ``snapshot()`` reads)."""

    def __init__(
        self,
        max_model_len: int,
        custom_buckets: dict[str, list[float]] | None = None,
        watermark: WatermarkConfig | None = None,
    ) -> None:
        """``custom_buckets``: vLLM's ``{family: bounds}`` (``core/histogram_buckets.py``)
        over the default bounds; ``watermark``: the engine's, if any (requests are then
        counted by watermark status)."""
        self._watermark = watermark
        tokens = buckets_1_2_5(max_model_len)
        bounds: dict[str, tuple[float, ...]] = {
            "time_to_first_token_seconds": TTFT_BUCKETS,
            "inter_token_latency_seconds": TOKEN_LATENCY_BUCKETS,
            "time_per_output_token_seconds": TOKEN_LATENCY_BUCKETS,
            "e2e_request_latency_seconds": REQUEST_LATENCY_BUCKETS,
            "request_queue_time_seconds": REQUEST_LATENCY_BUCKETS,
            "request_inference_time_seconds": REQUEST_LATENCY_BUCKETS,
            "request_prefill_time_seconds": REQUEST_LATENCY_BUCKETS,
            "request_decode_time_seconds": REQUEST_LATENCY_BUCKETS,
            "request_prompt_tokens": tokens,
            "request_generation_tokens": tokens,
            "request_max_num_generation_tokens": tokens,
            "request_params_max_tokens": tokens,
            "request_prefill_kv_computed_tokens": tokens,
            "request_params_n": N_BUCKETS,
            "request_num_preemptions": PREEMPTIONS_BUCKETS,
        }
        bounds = family_bounds(bounds, custom_buckets)
        self._snap = RequestStatsSnapshot(
            histograms={name: Histogram.empty(b) for name, b in bounds.items()},
            watermark_requests=dict.fromkeys(WATERMARK_STATUSES, 0) if watermark else None,
        )

    def rejected(self, reason: str) -> None:
        """A queue limit (``reason``: its name) refused a request before it started."""
        counts = self._snap.admission_rejections
        counts[reason] = counts.get(reason, 0) + 1

    def prompt(self, num_tokens: int) -> None:
        """A request produced its first token: its prompt has been processed."""
        self._snap.prompt_tokens += num_tokens

    def tokens(self, count: int, since_previous_s: float | None) -> None:
        """``count`` new tokens of one sequence; ``since_previous_s``: the time since its
        previous token (None for its first), spread evenly over the new tokens."""
        self._snap.generation_tokens += count
        if since_previous_s is not None and count > 0:
            gap = max(0.0, since_previous_s) / count
            self._snap.histograms["inter_token_latency_seconds"].observe(gap, count)

    def next_tokens(self, since_previous_s: float, sequences: int) -> None:
        """One new token in each of ``sequences`` sequences, each ``since_previous_s``
        after that sequence's previous token: ``tokens(1, since_previous_s)`` for each
        of them, in one call."""
        self._snap.generation_tokens += sequences
        self._snap.histograms["inter_token_latency_seconds"].observe(
            max(0.0, since_previous_s), sequences
        )

    def finished(self, r: FinishedRequest) -> None:
        snap, h = self._snap, self._snap.histograms
        snap.request_success[r.finish_reason] = snap.request_success.get(r.finish_reason, 0) + 1
        if snap.watermark_requests is not None:
            status = watermark_status(self._watermark, r.watermarking, r.greedy)
            snap.watermark_requests[status] += 1
        h["e2e_request_latency_seconds"].observe(max(0.0, r.finished_time - r.arrival_time))
        h["request_prompt_tokens"].observe(r.prompt_tokens)
        h["request_generation_tokens"].observe(r.generation_tokens)
        h["request_max_num_generation_tokens"].observe(r.max_generation_tokens)
        h["request_params_n"].observe(r.n)
        h["request_num_preemptions"].observe(r.num_preemptions)
        h["request_prefill_kv_computed_tokens"].observe(
            r.prompt_tokens - min(r.prompt_tokens, max(r.cached_tokens, 0))
        )
        if r.max_tokens is not None:
            h["request_params_max_tokens"].observe(r.max_tokens)
        if r.scheduled_time is not None:
            h["request_queue_time_seconds"].observe(max(0.0, r.scheduled_time - r.arrival_time))
        if r.first_token_time is None or r.last_token_time is None:
            return  # ended before its first token: no prefill/decode to time
        h["time_to_first_token_seconds"].observe(max(0.0, r.first_token_time - r.arrival_time))
        decode = max(0.0, r.last_token_time - r.first_token_time)
        h["request_decode_time_seconds"].observe(decode)
        if r.max_generation_tokens > 1:
            h["time_per_output_token_seconds"].observe(decode / (r.max_generation_tokens - 1))
        if r.scheduled_time is not None:
            h["request_prefill_time_seconds"].observe(
                max(0.0, r.first_token_time - r.scheduled_time)
            )
            h["request_inference_time_seconds"].observe(
                max(0.0, r.last_token_time - r.scheduled_time)
            )

    def snapshot(self) -> RequestStatsSnapshot:
        """A copy: the caller may keep it while the engine goes on recording."""
        return msgspec.convert(msgspec.to_builtins(self._snap), RequestStatsSnapshot)
