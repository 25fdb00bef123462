"""The vLLM peer's plumbing (no vLLM needed: the peer itself lives in its own venv)."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from actorllm.bench import vllm_peer
from actorllm.bench.datasets import BenchRequest
from actorllm.bench.throughput import parse_backends
from actorllm.bench.vllm_peer import PeerUnavailableError, VllmPeer, omp_bind, peer_env


def test_parse_backends() -> None:
    assert parse_backends("both") == ("actorllm", "hf")
    assert parse_backends("all") == ("actorllm", "hf", "vllm")
    assert parse_backends("actorllm, vllm,actorllm") == ("actorllm", "vllm")
    with pytest.raises(ValueError, match="--backend: unknown sglang"):
        parse_backends("actorllm,sglang")


def test_omp_bind_follows_affinity() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    assert omp_bind(None) == ",".join(map(str, cpus))
    assert omp_bind(1) == str(cpus[0])


def test_peer_env_outlasts_a_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    """The paused peer's in-flight step must not time out while actorllm runs (vLLM's 300 s
    deadline runs on the wall clock); a value the user set is kept, ours never leak."""
    monkeypatch.delenv("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    env = peer_env(None)
    assert int(env["VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"]) >= 3600
    assert "OMP_NUM_THREADS" not in env
    monkeypatch.setenv("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "42")
    assert peer_env(None)["VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"] == "42"


def test_missing_venv_names_the_setup_script(tmp_path: Path) -> None:
    reqs = [BenchRequest([1, 2, 3], 4)]
    with pytest.raises(PeerUnavailableError, match=r"setup_vllm_cpu\.sh"):
        VllmPeer(reqs, tmp_path, dtype="float32", temperature=0.6, python=tmp_path / "python")


def test_every_backend_gets_actorllms_resolved_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    from actorllm.bench.throughput_workload import resolved_dtype_name
    from actorllm.engine.config.engine_config import EngineConfig
    from actorllm.kernels import cpu_features

    cfg = EngineConfig(device="cpu")  # the demo model: a float32 checkpoint
    monkeypatch.setattr(cpu_features, "native_bf16", lambda flags=None: True)
    assert resolved_dtype_name(cfg) == "bfloat16"
    monkeypatch.setattr(cpu_features, "native_bf16", lambda flags=None: False)
    assert resolved_dtype_name(cfg) == "float32"
    assert resolved_dtype_name(EngineConfig(device="cpu", dtype="float32")) == "float32"


def test_a_start_that_fails_stops_the_runner_and_restores_sigterm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "python"  # a runner that never reports ready, and quits when told
    fake.write_text(f'#!/bin/sh\nexec "{sys.executable}" -c "import sys; sys.stdin.readline()"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(vllm_peer, "_START_TIMEOUT_S", 0.5)
    started: list[subprocess.Popen[str]] = []
    popen = subprocess.Popen

    def recording_popen(*args: Any, **kwargs: Any) -> subprocess.Popen[str]:
        started.append(popen(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(subprocess, "Popen", recording_popen)
    before = signal.getsignal(signal.SIGTERM)
    reqs = [BenchRequest([1, 2], 2)]
    peer = VllmPeer(reqs, tmp_path, dtype="float32", temperature=0.6, python=fake)
    with pytest.raises(PeerUnavailableError, match="the vLLM runner failed"):
        peer.start()
    (proc,) = started
    assert proc.poll() is not None  # stopped, not left running as an orphan
    assert signal.getsignal(signal.SIGTERM) is before
