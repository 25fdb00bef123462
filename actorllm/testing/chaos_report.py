"""What a chaos soak found: each request's outcome, and the report that sums them up.

A request's outcome, against a fault-free reference run of the same request (same prompt,
same sampling or pooling params and seed):

==========  ===========================================================================
identical   finished, and every sample's token ids, text and finish reason match (a
            pooling request: its prompt token ids and pooled float32 bytes match)
changed     finished, but some sample (or the pooled result) differs from the reference
failed      its stream raised (``RequestFailedError``, ``EngineDeadError``, ...)
lost        its stream ended with neither a finished output nor an error
hung        it did not end within the soak's per-request deadline (then it is aborted)
==========  ===========================================================================

Lost, changed and hung requests break the engine's promise; failed ones are legitimate
only for requests that really cause crashes (poison requests).
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol

from actorllm.core.outputs import RequestOutput
from actorllm.core.sampling_params import RequestOutputKind
from actorllm.testing.percentiles import percentile

OUTCOMES = ("identical", "changed", "failed", "lost", "hung")
BROKEN = ("changed", "lost", "hung")  # outcomes that always fail a soak

# Per sample: (token ids, text, finish reason).
Signature = tuple[tuple[tuple[int, ...], str, str | None], ...]


class Accumulator(Protocol):
    """Folds one request's stream into what the soak compares with the reference run."""

    def add(self, out: Any) -> None: ...

    @property
    def finished(self) -> bool: ...

    def signature(self) -> object: ...

    def change(self, expected: object) -> str:
        """Says how this request's (finished) result differs from ``expected``."""
        ...


class OutputAccumulator:
    """Folds a request's stream into its final samples, whatever its ``output_kind``."""

    def __init__(self, kind: RequestOutputKind) -> None:
        self.kind = kind
        self.last: RequestOutput | None = None
        self._tokens: dict[int, list[int]] = {}  # {sample index: token ids so far} (DELTA)
        self._text: dict[int, str] = {}  # {sample index: text so far} (DELTA)
        self._reason: dict[int, str | None] = {}  # {sample index: finish reason} (DELTA)

    def add(self, out: RequestOutput) -> None:
        self.last = out
        if self.kind is RequestOutputKind.DELTA:
            for c in out.outputs:
                self._tokens.setdefault(c.index, []).extend(c.token_ids)
                self._text[c.index] = self._text.get(c.index, "") + c.text
                self._reason[c.index] = c.finish_reason

    @property
    def finished(self) -> bool:
        return self.last is not None and self.last.finished

    def signature(self) -> Signature:
        assert self.last is not None
        if self.kind is RequestOutputKind.DELTA:
            return tuple(
                (tuple(self._tokens[i]), self._text[i], self._reason[i])
                for i in sorted(self._tokens)
            )
        return tuple(
            (tuple(c.token_ids), c.text, c.finish_reason)
            for c in sorted(self.last.outputs, key=lambda c: c.index)
        )

    def change(self, expected: object) -> str:
        return f"expected {expected!r:.300}, got {self.signature()!r:.300}"


@dataclass(frozen=True)
class PooledSignature:
    """A pooled result as the soak compares it: exact, with a readable ``repr``."""

    prompt_token_ids: tuple[int, ...]
    shape: tuple[int, ...]
    data: bytes  # float32, little-endian, row-major

    def __repr__(self) -> str:
        digest = hashlib.sha1(self.data).hexdigest()[:10]
        return f"Pooled({len(self.prompt_token_ids)} tokens, shape {list(self.shape)}, {digest})"

    def difference(self, other: PooledSignature) -> str:
        """What differs from ``other`` (the largest value difference when shapes agree)."""
        if self.prompt_token_ids != other.prompt_token_ids:
            return f"prompt tokens differ: {self.prompt_token_ids} vs {other.prompt_token_ids}"
        if self.shape != other.shape:
            return f"shape {list(self.shape)} vs {list(other.shape)}"
        import numpy as np

        a = np.frombuffer(self.data, dtype="<f4")
        b = np.frombuffer(other.data, dtype="<f4")
        diff = np.abs(a - b)
        return f"{int((diff > 0).sum())} of {a.size} values differ, max |diff| {diff.max():.3g}"


class PooledAccumulator:
    """Holds a pooling request's one result (``PoolingRequestOutput``)."""

    def __init__(self) -> None:
        self.result: PooledSignature | None = None

    def add(self, out: Any) -> None:
        data = out.outputs.data.contiguous().float()  # [dim] or [num_tokens, dim]
        self.result = PooledSignature(
            tuple(out.prompt_token_ids), tuple(data.shape), data.numpy().astype("<f4").tobytes()
        )

    @property
    def finished(self) -> bool:
        return self.result is not None

    def signature(self) -> PooledSignature:
        assert self.result is not None
        return self.result

    def change(self, expected: object) -> str:
        got = self.signature()
        if isinstance(expected, PooledSignature):
            return f"expected {expected!r}, got {got!r}: {got.difference(expected)}"
        return f"expected {expected!r:.300}, got {got!r}"


@dataclass(frozen=True)
class RequestRecord:
    """One request of one batch: its outcome, end-to-end latency and, if not identical,
    a short detail (the error, or what differed)."""

    batch: int
    name: str
    outcome: str
    latency_s: float | None
    detail: str | None = None
    error_type: str | None = None


def latency_summary(values: list[float]) -> dict[str, float | int]:
    """{count, p50, p99, max} in seconds (NaN when empty)."""
    return {
        "count": len(values),
        "p50": percentile(values, 50),
        "p99": percentile(values, 99),
        "max": max(values) if values else math.nan,
    }


@dataclass
class ChaosReport:
    """The figures of one soak on one backend (``to_dict()`` is the JSON)."""

    backend: str
    crashes_planned: int = 0
    crashes_by_actor: Counter[str] = field(default_factory=Counter)  # fired crashes
    hangs_by_actor: Counter[str] = field(default_factory=Counter)  # the hangs among them
    batches: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    failures_by_error: Counter[str] = field(default_factory=Counter)
    restarts: Counter[str] = field(default_factory=Counter)  # engine's actor_restarts
    engine_deaths: int = 0
    invariant_checks: int = 0
    invariant_violations: list[str] = field(default_factory=list)
    latency_faults: list[float] = field(default_factory=list)
    latency_reference: list[float] = field(default_factory=list)
    examples: list[RequestRecord] = field(default_factory=list)  # first non-identical ones
    unfired: list[str] = field(default_factory=list)  # armed points that never fired
    wall_s: float = 0.0
    max_examples: int = 20

    @property
    def crashes(self) -> int:
        return sum(self.crashes_by_actor.values())

    @property
    def requests(self) -> int:
        return sum(self.outcomes.values())

    def record(self, rec: RequestRecord) -> None:
        self.outcomes[rec.outcome] += 1
        if rec.outcome == "failed":
            self.failures_by_error[rec.error_type or "?"] += 1
        if rec.latency_s is not None and rec.outcome in ("identical", "changed"):
            self.latency_faults.append(rec.latency_s)
        if rec.outcome != "identical" and len(self.examples) < self.max_examples:
            self.examples.append(rec)

    def ok(self, *, allow_failed: bool = True) -> bool:
        """No lost, changed or hung request, and the invariants held (and, unless
        ``allow_failed``, no failed request)."""
        broken = sum(self.outcomes[o] for o in BROKEN)
        failed = 0 if allow_failed else self.outcomes["failed"]
        return broken == 0 and failed == 0 and not self.invariant_violations

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "crashes_planned": self.crashes_planned,
            "crashes": self.crashes,
            "crashes_by_actor": dict(sorted(self.crashes_by_actor.items())),
            "hangs_by_actor": dict(sorted(self.hangs_by_actor.items())),
            "unfired_points": self.unfired,
            "batches": self.batches,
            "requests": self.requests,
            "outcomes": {o: self.outcomes[o] for o in OUTCOMES},
            "failures_by_error": dict(self.failures_by_error),
            "restarts": dict(sorted(self.restarts.items())),
            "engine_deaths": self.engine_deaths,
            "latency_s": {
                "with_faults": latency_summary(self.latency_faults),
                "without_faults": latency_summary(self.latency_reference),
            },
            "invariants": {
                "checks": self.invariant_checks,
                "violations": len(self.invariant_violations),
                "first_violations": self.invariant_violations[:10],
            },
            "examples": [
                {"batch": r.batch, "request": r.name, "outcome": r.outcome, "detail": r.detail}
                for r in self.examples
            ],
            "wall_s": self.wall_s,
            "ok": self.ok(),
        }
