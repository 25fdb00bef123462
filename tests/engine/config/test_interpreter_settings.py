"""engine_interpreter_settings: the GC and GIL settings of a running engine, put back when
the last engine closes."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager

import pytest

from actorllm.engine.config.interpreter_settings import engine_interpreter_settings


@pytest.fixture(autouse=True)
def default_settings() -> Iterator[None]:
    saved, switch = gc.get_threshold(), sys.getswitchinterval()
    gc.set_threshold(700, 10, 10)
    sys.setswitchinterval(0.005)
    yield
    gc.set_threshold(*saved)
    sys.setswitchinterval(switch)


def settings(
    gen0: int | None = None, switch: float | None = None, freeze: bool = False
) -> AbstractContextManager[None]:
    return engine_interpreter_settings(freeze=freeze, gen0_threshold=gen0, switch_interval_s=switch)


def test_the_settings_hold_while_the_engine_runs() -> None:
    with settings(gen0=50_000, switch=0.001):
        assert gc.get_threshold() == (50_000, 10, 10)
        assert sys.getswitchinterval() == pytest.approx(0.001)
    assert gc.get_threshold() == (700, 10, 10)
    assert sys.getswitchinterval() == pytest.approx(0.005)


def test_overlapping_engines_restore_at_the_last_close() -> None:
    first, second = settings(gen0=20_000, switch=0.002), settings(gen0=50_000, switch=0.001)
    first.__enter__()
    second.__enter__()
    assert gc.get_threshold()[0] == 50_000
    assert sys.getswitchinterval() == pytest.approx(0.001)
    first.__exit__(None, None, None)
    assert gc.get_threshold()[0] == 50_000  # the second engine still runs
    second.__exit__(None, None, None)
    assert gc.get_threshold() == (700, 10, 10)
    assert sys.getswitchinterval() == pytest.approx(0.005)


def test_the_hosts_own_settings_and_none_are_left_alone() -> None:
    gc.set_threshold(100_000, 5, 5)
    sys.setswitchinterval(0.0001)
    with settings(gen0=50_000, switch=0.001):
        assert gc.get_threshold() == (100_000, 5, 5)
        assert sys.getswitchinterval() == pytest.approx(0.0001)
    with settings():
        assert gc.get_threshold() == (100_000, 5, 5)
    assert sys.getswitchinterval() == pytest.approx(0.0001)


def test_freeze_is_undone_at_close() -> None:
    with settings(freeze=True):
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0


def test_overlapping_engines_unfreeze_at_the_last_close() -> None:
    first, second = settings(freeze=True), settings(freeze=True)
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert gc.get_freeze_count() > 0  # the second engine's heap stays out of collections
    second.__exit__(None, None, None)
    assert gc.get_freeze_count() == 0
