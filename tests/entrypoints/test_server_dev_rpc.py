"""Dev mode's /collective_rpc, /start_profile, /stop_profile on the real engine (a scripted
model); absent without dev mode."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from actorllm.entrypoints.openai.app import AppSettings, build_app
from actorllm.testing.engine_harness import open_test_engine
from tests.entrypoints.server_thread import ServerThread


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerThread, Path]]:
    traces = tmp_path_factory.mktemp("traces")
    app = build_app(
        lambda: open_test_engine(profiler_dir=str(traces)),
        AppSettings(log_interval_s=0, dev_mode=True),
    )
    srv = ServerThread(app).start()
    yield srv, traces
    srv.stop()
    assert srv.error is None


def test_collective_rpc_runs_a_worker_method(dev: tuple[ServerThread, Path]) -> None:
    srv, _ = dev
    r = httpx.post(srv.url + "/collective_rpc", json={"method": "get_model"})
    assert r.status_code == 200 and r.json() == {"results": [None]}  # one rank, no weights
    stats = httpx.post(srv.url + "/collective_rpc", json={"method": "statistics"})
    assert stats.status_code == 200 and len(stats.json()["results"]) == 1


@pytest.mark.parametrize(
    ("body", "results"),
    [
        ({"method": "remove_lora", "args": ["none-loaded"]}, ["False"]),  # a bool: its str()
        ({"method": "list_loras"}, [[]]),  # a list as it is
        ({"method": "get_model"}, [None]),
    ],
)
def test_collective_rpc_answers_results_as_vllm_does(
    dev: tuple[ServerThread, Path], body: dict[str, object], results: list[object]
) -> None:
    """vLLM's route sends None, dicts and lists as they are and anything else as its
    str(): a client reads the same JSON from both servers."""
    srv, _ = dev
    r = httpx.post(srv.url + "/collective_rpc", json=body)
    assert r.status_code == 200 and r.json() == {"results": results}, r.text


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"method": "nope"}, 400),  # no such worker method
        ({"method": "_private"}, 400),
        ({"method": "get_model", "timeout": 0}, 400),
        ({"method": "get_model", "bogus": 1}, 400),  # strict: unknown fields refused
        ({"args": []}, 400),  # method is required
    ],
)
def test_collective_rpc_refuses_bad_calls(
    dev: tuple[ServerThread, Path], body: dict[str, object], status: int
) -> None:
    srv, _ = dev
    r = httpx.post(srv.url + "/collective_rpc", json=body)
    assert r.status_code == status and "error" in r.json()
    assert httpx.get(srv.url + "/health").status_code == 200


def test_profile_start_stop_writes_a_trace(dev: tuple[ServerThread, Path]) -> None:
    srv, traces = dev
    r = httpx.post(srv.url + "/stop_profile", timeout=120)
    assert r.status_code == 400  # not started: a clear error
    assert httpx.post(srv.url + "/start_profile", timeout=120).status_code == 200
    assert httpx.post(srv.url + "/start_profile", timeout=120).status_code == 400  # already running
    body = {"model": "scripted", "prompt": "hello", "max_tokens": 4}
    assert httpx.post(srv.url + "/v1/completions", json=body, timeout=60).status_code == 200
    assert httpx.post(srv.url + "/stop_profile", timeout=120).status_code == 200
    assert any(traces.rglob("*.json*"))


def test_dev_routes_absent_without_dev_mode(server: ServerThread) -> None:
    for path in ("/collective_rpc", "/start_profile", "/stop_profile"):
        assert httpx.post(server.url + path, json={"method": "get_model"}).status_code == 404
