"""Checks of the per-request fields every engine entry point takes besides the prompt and
the sampling parameters: ``priority`` and ``arrival_time``. ``AsyncEngine.generate`` applies
them; ``LLM`` and ``LLMEngine`` call them early too, so a bad value raises before anything
is queued.

``arrival_time`` is given as vLLM takes it, in wall-clock ``time.time()`` seconds; the
engine orders and measures requests on the monotonic clock (``core.request.Request``), so
it is moved onto that clock once, on entry:

    >>> import time
    >>> abs(monotonic_arrival(time.time() - 5.0) - (time.monotonic() - 5.0)) < 0.5
    True
"""

from __future__ import annotations

import math
import time

from actorllm.core.errors import InvalidRequestError
from actorllm.engine.config.engine_config import EngineConfig


def check_priority(priority: object, config: EngineConfig) -> int:
    """``priority`` when the engine can honour it: an int, and non-zero only under
    ``scheduling_policy="priority"`` (as vLLM refuses it otherwise)."""
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise InvalidRequestError(
            f"priority must be an int, got {type(priority).__name__}.", param="priority"
        )
    if priority != 0 and config.scheduling_policy != "priority":
        raise InvalidRequestError(
            f"got priority {priority}, but priority scheduling is not enabled "
            "(scheduling_policy='priority').",
            param="priority",
        )
    return priority


def check_arrival_time(arrival_time: object) -> float | None:
    """``arrival_time`` (``time.time()`` seconds, or None for now) when it is a finite
    number; raises ``InvalidRequestError`` naming it."""
    if arrival_time is None:
        return None
    if not isinstance(arrival_time, int | float) or isinstance(arrival_time, bool):
        raise InvalidRequestError(
            f"arrival_time must be a number of seconds (time.time()), "
            f"got {type(arrival_time).__name__}.",
            param="arrival_time",
        )
    if not math.isfinite(arrival_time):
        raise InvalidRequestError(
            f"arrival_time must be finite, got {arrival_time}.", param="arrival_time"
        )
    return float(arrival_time)


def monotonic_arrival(arrival_time: object) -> float:
    """The ``time.monotonic()`` reading at ``arrival_time`` (``time.time()`` seconds;
    None: now)."""
    wall = check_arrival_time(arrival_time)
    now = time.monotonic()
    return now if wall is None else now - (time.time() - wall)
