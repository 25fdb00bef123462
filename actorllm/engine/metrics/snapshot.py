"""The Prometheus metrics as plain values: what vLLM's ``LLM.get_metrics()`` returns
(``vllm.v1.metrics.reader``), so a script that reads its counters offline (vLLM's
speculative decoding example sums ``spec_decode_num_drafts`` and the per-position
acceptance vector) runs unchanged.

The metrics are the server's (:class:`~actorllm.engine.metrics.prometheus.ServerMetrics`: the
same names, labels and buckets as ``/metrics``), read from its registry: a gauge becomes a
:class:`Gauge`, each counter series a :class:`Counter` (an integer), a histogram series a
:class:`Histogram` (cumulative buckets keyed by their ``le`` label, ``+Inf`` included), and
``spec_decode_num_accepted_tokens_per_pos``, a counter per draft position in Prometheus,
one :class:`Vector` of the positions' counts per label set, as vLLM's reader folds it.
Only the metrics under the registry's prefix are read (vLLM reads its ``vllm:`` ones).

    >>> from actorllm.engine.metrics.prometheus import ServerMetrics
    >>> m = ServerMetrics("demo")
    >>> running = [g for g in snapshot(m) if g.name == "actorllm:num_requests_running"]
    >>> running[0].value, running[0].labels["model_name"]
    (0.0, 'demo')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client.samples import Sample

if TYPE_CHECKING:
    from actorllm.engine.metrics.prometheus import ServerMetrics

PER_POSITION = "spec_decode_num_accepted_tokens_per_pos"


@dataclass
class Metric:
    """One series: a name and its labels (a name may have several series)."""

    name: str
    labels: dict[str, str]


@dataclass
class Counter(Metric):
    """A monotonically increasing integer."""

    value: int


@dataclass
class Vector(Metric):
    """Integer counters in order: accepted draft tokens by draft position."""

    values: list[int]


@dataclass
class Gauge(Metric):
    """A value that goes up and down."""

    value: float


@dataclass
class Histogram(Metric):
    """Observations by bucket: ``buckets`` maps each upper bound (the ``le`` label, ``+Inf``
    last) to the count at or below it; ``count`` is the ``+Inf`` count."""

    count: int
    sum: float
    buckets: dict[str, int]


def snapshot(metrics: ServerMetrics) -> list[Metric]:
    """The metrics under ``metrics.prefix`` (gauges, counters, histograms; info and other
    types are skipped, as vLLM's reader skips them)."""
    out: list[Metric] = []
    for family in metrics.registry.collect():
        if not family.name.startswith(metrics.prefix):
            continue
        if family.type == "gauge":
            out += [Gauge(family.name, s.labels, float(s.value)) for s in family.samples]
        elif family.type == "counter":
            totals = [s for s in family.samples if s.name == family.name + "_total"]
            if family.name.endswith(PER_POSITION):
                out += _vectors(family.name, totals)
            else:
                out += [Counter(family.name, s.labels, int(s.value)) for s in totals]
        elif family.type == "histogram":
            out += _histograms(family.name, family.samples)
    return out


def _key(labels: dict[str, str], drop: str | None = None) -> tuple[tuple[str, str], ...]:
    """A series' labels, without ``drop``, as a dictionary key in a fixed order."""
    return tuple(sorted((k, v) for k, v in labels.items() if k != drop))


def _vectors(name: str, samples: list[Sample]) -> list[Metric]:
    """Per-position counter samples -> one :class:`Vector` per other-label set, indexed
    by ``position`` (positions never counted are 0)."""
    by_series: dict[tuple[tuple[str, str], ...], dict[int, int]] = {}
    for s in samples:
        by_series.setdefault(_key(s.labels, "position"), {})[int(s.labels["position"])] = int(
            s.value
        )
    width = 1 + max((p for counts in by_series.values() for p in counts), default=-1)
    return [
        Vector(name, dict(key), [counts.get(p, 0) for p in range(width)])
        for key, counts in by_series.items()
    ]


def _histograms(name: str, samples: list[Sample]) -> list[Metric]:
    """A histogram family's ``_bucket`` / ``_count`` / ``_sum`` samples -> one
    :class:`Histogram` per label set."""
    buckets: dict[tuple[tuple[str, str], ...], dict[str, int]] = {}
    counts: dict[tuple[tuple[str, str], ...], int] = {}
    sums: dict[tuple[tuple[str, str], ...], float] = {}
    for s in samples:
        if s.name == name + "_bucket":
            buckets.setdefault(_key(s.labels, "le"), {})[s.labels["le"]] = int(s.value)
        elif s.name == name + "_count":
            counts[_key(s.labels)] = int(s.value)
        elif s.name == name + "_sum":
            sums[_key(s.labels)] = float(s.value)
    return [
        Histogram(name, dict(key), counts.get(key, 0), sums.get(key, 0.0), series)
        for key, series in buckets.items()
    ]
