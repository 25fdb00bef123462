"""libgomp teams: the host thread's idle team freed, and the parked team (made once per
process, alive, a real team of threads)."""

from __future__ import annotations

import os
import subprocess
import sys
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


def _tids() -> set[str]:
    """The process's OS thread ids."""
    return set(os.listdir("/proc/self/task"))


def test_parks_one_team_once(two_threads: None) -> None:
    fresh = omp_spin._parked is None
    before = _tids()
    assert omp_spin.park_openmp_team() is True
    assert omp_spin.parked()
    parked = omp_spin._parked
    assert parked is not None
    if fresh:
        # By thread id, not by count: threads of other tests in this process may come and
        # go. New: the parked thread and its OpenMP helper (one per extra torch thread).
        new = _tids() - before
        assert str(parked.native_id) in new
        assert new - {str(parked.native_id)}
    assert omp_spin.park_openmp_team() is True  # idempotent: the same thread, no new one
    assert omp_spin._parked is parked
    names = [t.name for t in threading.enumerate()]
    assert names.count("actorllm-omp-parked") == 1


def test_one_torch_thread_needs_no_team(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(omp_spin, "_parked", None)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    assert omp_spin.park_openmp_team() is False
    assert omp_spin._parked is None


_RELEASE_CHECK = """
import os, threading, torch
from actorllm.worker import omp_spin

def tids():
    return set(os.listdir("/proc/self/task"))

seen, ids = {}, {}

def host():
    torch.set_num_threads(2)
    ids["before"] = tids()
    torch.empty(1 << 20).fill_(1.0)  # a parallel region: this thread gets a team
    ids["with_team"] = tids()
    seen["released"] = omp_spin.release_thread_team()
    ids["after"] = tids()
    seen["again"] = omp_spin.release_thread_team()  # no team: nothing to free, no error

thread = threading.Thread(target=host)
thread.start()
thread.join()
assert seen["released"] is True and seen["again"] is True, seen
team = ids["with_team"] - ids["before"]
assert team, "the parallel region made no helper thread"
assert team - ids["after"], "the helper thread outlived the release"
"""


def test_release_frees_the_calling_threads_team() -> None:
    """In a fresh interpreter: in the suite's process other tests' threads start and end
    at any time, so an id that appears beside the team's need not be the team's (a full
    run failed with its one new id still alive after the release)."""
    done = subprocess.run(
        [sys.executable, "-c", _RELEASE_CHECK], capture_output=True, text=True, timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "2"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]


def test_cpu_engines_release_the_host_team_unless_short_spin() -> None:
    from actorllm.engine.config.engine_config import EngineConfig

    assert EngineConfig(device="cpu").releases_host_openmp_team()
    assert not EngineConfig(device="cpu", cpu_omp_short_spin=True).releases_host_openmp_team()
    assert not EngineConfig(device="cuda").releases_host_openmp_team()


def test_an_embedding_host_calls_it_as_actorllm_utils_release_openmp_team() -> None:
    import actorllm.utils

    assert actorllm.utils.release_openmp_team is omp_spin.release_thread_team
    assert "release_openmp_team" in actorllm.utils.__all__
