"""The scale-out routes in /openapi.json: listed exactly when served (--enable-scale-out;
the Cohere render with the Cohere API too), guarded by the API key like vLLM's, and a
schemathesis run over the render routes finds nothing (fake engine)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from actorllm.entrypoints.openai.app.routes import COHERE_RENDER_ROUTE, SCALE_OUT_ROUTES
from actorllm.entrypoints.openai.openapi import Served, openapi_document
from tests.entrypoints.conftest import start_server
from tests.entrypoints.fake_engine import FakeEngine
from tests.entrypoints.server_thread import ServerThread

MAX_LEN = 512
_ROOT = Path(__file__).resolve().parents[3]
_PATHS = {path for path, _, _ in SCALE_OUT_ROUTES}


@pytest.mark.parametrize("cohere", [False, True])
def test_documented_only_when_served(cohere: bool) -> None:
    def paths(**kw: bool) -> set[str]:
        doc = openapi_document(dev_mode=False, api_key=True, served=Served(64, 100, "fcfs", **kw))
        return set(doc["paths"])

    expected = _PATHS | ({COHERE_RENDER_ROUTE[0]} if cohere else set())
    assert paths(scale_out=True, cohere_api=cohere) - paths(cohere_api=cohere) == expected
    assert not paths(cohere_api=cohere) & expected
    doc = openapi_document(dev_mode=False, api_key=True, served=Served(64, 100, "fcfs",
                                                                       scale_out=True))  # fmt: skip
    generate = doc["paths"]["/inference/v1/generate"]["post"]
    assert generate["security"] == [{"bearer": []}] and "401" in generate["responses"]


@pytest.fixture(scope="module")
def srv() -> Iterator[ServerThread]:
    server = start_server(FakeEngine(max_model_len=MAX_LEN), enable_scale_out=True)
    yield server
    server.stop()


def test_schemathesis_finds_nothing(srv: ServerThread, tmp_path: Path) -> None:
    schemathesis = Path(sys.executable).with_name("schemathesis")
    env = {
        **os.environ,
        "PYTHONPATH": str(_ROOT),
        "SCHEMATHESIS_HOOKS": "tests.entrypoints.schemathesis_hooks",
        "ACTORLLM_MAX_MODEL_LEN": str(MAX_LEN),
    }
    # The render routes take the plain routes' bodies; generate's and derender's carry
    # vLLM's free-form sampling params and engine outputs (tests/ drive them over HTTP).
    regex = "^/v1/(chat/completions|completions|messages|responses)/render$"
    cmd = [str(schemathesis), "run", srv.url + "/openapi.json", "--checks", "all"]
    cmd += ["--max-examples", "10", "--seed", "1", "--no-color", "--workers", "1"]
    cmd += ["--include-path-regex", regex, "--suppress-health-check", "too_slow"]
    cmd += ["--suppress-health-check", "filter_too_much"]
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=240)
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-2000:]
