"""engine_gc: the GC settings of a running engine, put back when the last engine closes."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from actorllm.engine.gc_tuning import engine_gc


@pytest.fixture(autouse=True)
def default_thresholds() -> Iterator[None]:
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*saved)


def test_the_threshold_is_raised_while_the_engine_runs() -> None:
    with engine_gc(freeze=False, gen0_threshold=50_000):
        assert gc.get_threshold() == (50_000, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


def test_overlapping_engines_restore_at_the_last_close() -> None:
    first = engine_gc(freeze=False, gen0_threshold=20_000)
    second = engine_gc(freeze=False, gen0_threshold=50_000)
    first.__enter__()
    second.__enter__()
    assert gc.get_threshold()[0] == 50_000
    first.__exit__(None, None, None)
    assert gc.get_threshold()[0] == 50_000  # the second engine still runs
    second.__exit__(None, None, None)
    assert gc.get_threshold() == (700, 10, 10)


def test_a_higher_host_threshold_and_none_are_left_alone() -> None:
    gc.set_threshold(100_000, 5, 5)
    with engine_gc(freeze=False, gen0_threshold=50_000):
        assert gc.get_threshold() == (100_000, 5, 5)
    with engine_gc(freeze=False, gen0_threshold=None):
        assert gc.get_threshold() == (100_000, 5, 5)
    assert gc.get_threshold() == (100_000, 5, 5)


def test_freeze_is_undone_at_close() -> None:
    with engine_gc(freeze=True, gen0_threshold=None):
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0
