"""The vLLM peer's plumbing (no vLLM needed: the peer itself lives in its own venv)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from actorllm.bench.datasets import BenchRequest
from actorllm.bench.throughput import parse_backends
from actorllm.bench.vllm_peer import PeerUnavailableError, VllmPeer, omp_bind


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


def test_missing_venv_names_the_setup_script(tmp_path: Path) -> None:
    reqs = [BenchRequest([1, 2, 3], 4)]
    with pytest.raises(PeerUnavailableError, match=r"setup_vllm_cpu\.sh"):
        VllmPeer(reqs, tmp_path, dtype="float32", temperature=0.6, python=tmp_path / "python")


def test_every_backend_gets_actorllms_resolved_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    from actorllm.bench.throughput_workload import resolved_dtype_name
    from actorllm.engine.config import EngineConfig
    from actorllm.kernels import cpu_features

    cfg = EngineConfig(device="cpu")  # the demo model: a float32 checkpoint
    monkeypatch.setattr(cpu_features, "native_bf16", lambda flags=None: True)
    assert resolved_dtype_name(cfg) == "bfloat16"
    monkeypatch.setattr(cpu_features, "native_bf16", lambda flags=None: False)
    assert resolved_dtype_name(cfg) == "float32"
    assert resolved_dtype_name(EngineConfig(device="cpu", dtype="float32")) == "float32"
