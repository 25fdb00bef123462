"""glibc keeps what a CPU step frees (worker/malloc_tuning.py): the next step's blocks of
the same size come back without page faults, on the worker's own thread too."""

from __future__ import annotations

import resource
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
