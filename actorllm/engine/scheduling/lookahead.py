"""``Lookahead``: when to launch the step that overlaps the one running (async scheduling).

Theory of operation: with two steps in flight the worker starts step N+1 the moment step N
ends, so the loop's turn between steps (apply N's output, schedule, hand over) is hidden.
Launching N+1 as soon as N starts, though, freezes its batch a whole step early: a request
that arrives while N runs misses N+1 and waits for N+2. Under a burst of arrivals that
splits one prefill wave into several and adds a step to the time to first token of every
request in the late ones (a 16-stream trace: waves of 1, 7, 5 and 3 requests, where a
server that schedules after each step, as vLLM's CPU build does, takes 1, 8 and 7).

So N+1 is launched *just in time*: at N's predicted end less a lead that covers the
turnaround (``LEAD_FRACTION`` of the prediction plus ``LEAD_S``). Both ways of being wrong
are bounded: a step predicted too long ends first and N+1 is launched on its result (the
behaviour without async scheduling, for that one step); one predicted too short launches
N+1 early (the behaviour without this class).

The prediction is a least-squares line, seconds = a + b * scheduled tokens, over the last
``WINDOW`` steps, each timed from when the worker could start it (its launch, or the end of
the step before it) to its result. While the window holds steps of about one size (a
steady decode batch) the slope is unknown, and a larger step is predicted proportionally
to that size (an overestimate for prefill tokens, which cost less each than decode ones:
it errs on the safe side). Sans-I/O: times come in as arguments.

    >>> la = Lookahead()
    >>> la.launch_at(0.0) is None  # nothing in flight
    True
    >>> for i in range(8):
    ...     la.launched(i, 16, 0.1 * i)
    ...     la.done(i, 0.1 * i + 0.1)
    >>> la.launched(8, 16, 1.0)
    >>> round(la.launch_at(1.0), 4)  # 0.1 s predicted, less 10 % and 5 ms
    1.085

A step with no scheduled tokens (it only tells the worker which requests finished) runs no
model: it is not timed, and never puts a launch off.
"""

from __future__ import annotations

from collections import deque
from typing import final

WINDOW = 64  # recent steps the line is fitted to
MIN_STEPS = 4  # steps timed before any prediction (launch at once until then)
LEAD_FRACTION = 0.1  # of the predicted step time: launch this much before its end
LEAD_S = 0.005  # plus this: the loop's turnaround (schedule, hand over) and its wake-up
SPREAD = 1.5  # the window's largest step has at least this many times the tokens of its
# smallest before the line's slope is trusted


@final
class StepCostModel:
    """Predicted seconds of a step from its scheduled tokens, fitted to recent steps."""

    def __init__(self, window: int = WINDOW) -> None:
        self._steps: deque[tuple[int, float]] = deque(maxlen=window)  # (tokens, seconds)

    def observe(self, tokens: int, seconds: float) -> None:
        self._steps.append((max(tokens, 1), max(seconds, 0.0)))

    def predict(self, tokens: int) -> float | None:
        steps = self._steps
        n = len(steps)
        if n < MIN_STEPS:
            return None
        tokens = max(tokens, 1)
        mean_t = sum(t for t, _ in steps) / n
        mean_s = sum(s for _, s in steps) / n
        lo, hi = min(t for t, _ in steps), max(t for t, _ in steps)
        if hi >= SPREAD * lo:
            var = sum((t - mean_t) ** 2 for t, _ in steps)
            slope = sum((t - mean_t) * (s - mean_s) for t, s in steps) / var
            base = mean_s - slope * mean_t
            if slope > 0.0 and base >= 0.0:
                return base + slope * tokens
        # One size of step (or a line through noise): scale the mean, never below it.
        return mean_s * max(1.0, tokens / mean_t)


@final
class Lookahead:
    """Launch times of the overlapping step; one per scheduler incarnation."""

    def __init__(self, model: StepCostModel | None = None) -> None:
        self.model = model or StepCostModel()
        self._launched: dict[int, tuple[int, float]] = {}  # {step_id: (tokens, launched at)}
        self._last_done: float | None = None  # when the last step's result came back
        self._deferred = False  # launch_at put the next launch off
        self._at: float | None = None  # launch_at's answer until the next launch or result
        self.early = 0  # overlapping steps launched before their predecessor ended
        self.late = 0  # put off, then launched on its predecessor's result (predicted long)

    def launched(self, step_id: int, tokens: int, now: float) -> None:
        if tokens == 0:
            # Only finished requests for the worker to forget: no model runs, nothing to
            # overlap. Timing it as a step would put the next launch off by a whole step's
            # prediction: a request arriving right after a batch finished waited for it.
            return
        if self._launched:
            self.early += 1
        elif self._deferred:
            self.late += 1
        self._deferred = False
        self._launched[step_id] = (tokens, now)
        self._at = None

    def done(self, step_id: int, now: float) -> None:
        entry = self._launched.pop(step_id, None)
        if entry is not None:
            tokens, launched_at = entry
            self.model.observe(tokens, now - self._started(launched_at))
        self._last_done = now
        self._at = None

    def _started(self, launched_at: float) -> float:
        """When the worker started a step: at its launch, or when the one before it ended."""
        return launched_at if self._last_done is None else max(launched_at, self._last_done)

    def launch_at(self, now: float) -> float | None:
        """When the next step should be launched; None: now (nothing in flight, or no
        prediction yet). Only the oldest step in flight counts: the caller launches at
        most one step ahead."""
        if not self._launched:
            return None
        if self._at is None:  # once per launch or result, not per scheduler message
            tokens, launched_at = next(iter(self._launched.values()))
            predicted = self.model.predict(tokens)
            if predicted is None:
                return None
            self._at = self._started(launched_at) + predicted * (1.0 - LEAD_FRACTION) - LEAD_S
        self._deferred = self._at > now
        return self._at
