"""The parked OpenMP team: made once per process, alive, and a real team of threads."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest
import torch

from actorllm.worker import omp_spin


@pytest.fixture
def two_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def _os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def test_parks_one_team_once(two_threads: None) -> None:
    fresh = omp_spin._parked is None
    before = _os_threads()
    assert omp_spin.park_openmp_team() is True
    assert omp_spin.parked()
    if fresh:  # the parked thread and its OpenMP helper (one per extra torch thread)
        assert _os_threads() >= before + 2
    after = _os_threads()
    assert omp_spin.park_openmp_team() is True  # idempotent: nothing new
    assert _os_threads() == after
    names = [t.name for t in threading.enumerate()]
    assert names.count("actorllm-omp-parked") == 1


def test_one_torch_thread_needs_no_team(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(omp_spin, "_parked", None)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    assert omp_spin.park_openmp_team() is False
    assert omp_spin._parked is None
