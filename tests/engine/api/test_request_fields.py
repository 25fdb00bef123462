"""``priority`` and ``arrival_time``: checked once, for every engine entry point."""

import math
import time

import pytest

from actorllm.core.errors import InvalidRequestError
from actorllm.engine.api.request_fields import check_arrival_time, check_priority, monotonic_arrival
from actorllm.engine.config.engine_config import EngineConfig


def test_priority_needs_the_priority_policy():
    assert check_priority(0, EngineConfig()) == 0
    assert check_priority(-3, EngineConfig(scheduling_policy="priority")) == -3
    for bad, config in [(2, EngineConfig()), (True, EngineConfig()), ("1", EngineConfig())]:
        with pytest.raises(InvalidRequestError) as info:
            check_priority(bad, config)
        assert info.value.param == "priority"


def test_arrival_time_is_a_finite_wall_clock_time():
    assert check_arrival_time(None) is None
    assert check_arrival_time(12) == 12.0
    for bad in ["1", True, math.nan, math.inf]:
        with pytest.raises(InvalidRequestError) as info:
            check_arrival_time(bad)
        assert info.value.param == "arrival_time"


def test_arrival_time_moves_onto_the_monotonic_clock():
    before = time.monotonic()
    assert before <= monotonic_arrival(None) <= time.monotonic()
    ten_ago = monotonic_arrival(time.time() - 10.0)
    assert abs(ten_ago - (time.monotonic() - 10.0)) < 1.0
    assert monotonic_arrival(time.time() - 20.0) < ten_ago
