"""glibc keeps what a CPU step frees (worker/malloc_tuning.py): the next step's blocks of
the same size come back without page faults, on the worker's own thread too."""

from __future__ import annotations

import resource
import subprocess
import sys
import threading

import pytest
import torch

from actorllm.worker import malloc_tuning


def _faults_reallocating(numel: int) -> list[int]:
    """Minor page faults of each of 16 alloc + write + free rounds of a float32 [numel]."""
    out = []
    for _ in range(16):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        x = torch.empty(numel)
        x.fill_(1.0)
        del x
        out.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    return out


@pytest.mark.skipif(not malloc_tuning.keep_freed_memory(), reason="not glibc on Linux")
@pytest.mark.parametrize("on_thread", [False, True])
def test_freed_blocks_come_back_without_page_faults(on_thread: bool) -> None:
    numel = 8 << 20  # 32 MiB: glibc would always mmap it, 8192 faults a round
    got: list[list[int]] = []
    if on_thread:  # the worker thread allocates from its own arena
        t = threading.Thread(target=lambda: got.append(_faults_reallocating(numel)))
        t.start()
        t.join()
    else:
        got.append(_faults_reallocating(numel))
    # The first rounds grow the heap (and may land beside other mappings); once it holds
    # the block, it is reused. Untuned, every round maps and faults it afresh (8192).
    assert sum(got[0][-4:]) < 500, got


_THREAD_PAST_A_HEAP = """
import threading, torch
from actorllm.worker import malloc_tuning
assert malloc_tuning.keep_freed_memory()
where = []
def run():
    x = torch.empty(18 << 20)  # 72 MiB float32: more than a thread arena's heap holds
    p = x.data_ptr()
    for line in open("/proc/self/maps"):
        span, rest = line.split(" ", 1)
        lo, hi = (int(a, 16) for a in span.split("-"))
        if lo <= p < hi:
            where.append(rest.split()[-1] if rest.strip().endswith("]") else "anonymous")
t = threading.Thread(target=run)
t.start()
t.join()
print(where[0])
"""


@pytest.mark.skipif(not malloc_tuning.keep_freed_memory(), reason="not glibc on Linux")
def test_a_worker_thread_started_after_it_takes_big_blocks_from_the_heap() -> None:
    """A thread's own arena grows in heaps of at most 64 MiB; glibc maps a larger block
    on its own and unmaps it when freed (a fault every 4 KiB when it comes back). A thread
    started after the tuning shares the main arena: the block lies in the process heap. In
    a fresh interpreter: the arena a thread gets depends on the threads before it."""
    out = subprocess.run(
        [sys.executable, "-c", _THREAD_PAST_A_HEAP], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == "[heap]", out.stdout


def test_other_c_libraries_are_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(malloc_tuning.platform, "libc_ver", lambda: ("musl", "1.2"))
    assert malloc_tuning._apply() is False


def test_the_engine_setting_turns_it_off(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from actorllm.engine.actors import startup
    from actorllm.engine.config.engine_config import EngineConfig

    calls: list[int] = []
    monkeypatch.setattr(malloc_tuning, "keep_freed_memory", lambda: calls.append(1) or True)
    monkeypatch.setattr("actorllm.worker.model_runner.ModelRunner", lambda *a, **k: object())
    startup.default_runner_factory(EngineConfig(device="cpu", cpu_keep_freed_memory=False))
    assert calls == []
    startup.default_runner_factory(EngineConfig(device="cpu"))
    assert calls == [1]
