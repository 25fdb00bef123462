"""Dev mode's RL routes on the real engine (a scripted model): ``/pause``, ``/resume``,
``/is_paused``, ``/wake_up?tags=``, ``/is_sleeping``, ``/server_info``; vLLM's bodies, 400
with an OpenAI error body for bad query parameters, 404 without dev mode."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import httpx
import pytest

from actorllm.entrypoints.openai.app import AppSettings, build_app
from actorllm.testing.engine_harness import open_test_engine
from tests.entrypoints.server_thread import ServerThread


@pytest.fixture(scope="module")
def dev() -> Iterator[ServerThread]:
    app = build_app(
        lambda: open_test_engine(step_delay_s=0.002, tensor_parallel_size=1),
        AppSettings(log_interval_s=0, dev_mode=True),
    )
    srv = ServerThread(app).start()
    yield srv
    srv.stop()
    assert srv.error is None


def error_of(r: httpx.Response, status: int, param: str) -> None:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] == status and err["param"] == param and err["message"]


def test_pause_abort_then_a_request_queues_until_resume(dev: ServerThread) -> None:
    url = dev.url
    body = {
        "model": "scripted",
        "prompt": "in flight",
        "max_tokens": 900,
        "ignore_eos": True,
        "stream": True,
    }
    reasons: list[str | None] = []
    streaming = threading.Event()

    def stream() -> None:
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    streaming.set()
                    reasons.append(json.loads(line[6:])["choices"][0]["finish_reason"])

    running = threading.Thread(target=stream)
    running.start()
    assert httpx.get(url + "/is_paused").json() == {"is_paused": False}
    assert streaming.wait(30)
    r = httpx.post(url + "/pause", timeout=60)  # mode abort, vLLM's default
    assert r.status_code == 200 and r.json() == {"status": "paused"}
    running.join(60)
    assert reasons[-1] == "abort"
    assert httpx.get(url + "/is_paused").json() == {"is_paused": True}

    late: list[httpx.Response] = []
    small = {"model": "scripted", "prompt": "while paused", "max_tokens": 3}
    waiting = threading.Thread(
        target=lambda: late.append(httpx.post(url + "/v1/completions", json=small, timeout=60))
    )
    waiting.start()
    waiting.join(0.3)
    assert waiting.is_alive()  # queued, not failed
    r = httpx.post(url + "/resume", timeout=60)
    assert r.status_code == 200 and r.json() == {"status": "resumed"}
    waiting.join(60)
    assert late[0].status_code == 200 and late[0].json()["choices"][0]["finish_reason"] == "length"
    assert httpx.get(url + "/is_paused").json() == {"is_paused": False}


@pytest.mark.parametrize("mode", ["wait", "keep"])
def test_pause_modes_and_clear_cache(dev: ServerThread, mode: str) -> None:
    r = httpx.post(dev.url + "/pause", params={"mode": mode, "clear_cache": "false"}, timeout=60)
    assert r.status_code == 200 and r.json() == {"status": "paused"}
    assert httpx.get(dev.url + "/is_paused").json() == {"is_paused": True}
    assert httpx.post(dev.url + "/resume", timeout=60).json() == {"status": "resumed"}


def test_bad_pause_parameters_are_400(dev: ServerThread) -> None:
    error_of(httpx.post(dev.url + "/pause", params={"mode": "freeze"}), 400, "mode")
    error_of(httpx.post(dev.url + "/pause", params={"clear_cache": "maybe"}), 400, "clear_cache")
    assert httpx.get(dev.url + "/is_paused").json() == {"is_paused": False}
    error_of(httpx.post(dev.url + "/wake_up", params={"tags": "gpu"}), 400, "tags")
    error_of(httpx.post(dev.url + "/sleep", params={"mode": "nap"}), 400, "mode")
    error_of(httpx.get(dev.url + "/server_info", params={"config_format": "yaml"}), 400,
             "config_format")  # fmt: skip


def test_sleep_and_wake_up_by_tags(dev: ServerThread) -> None:
    url = dev.url
    r = httpx.post(url + "/sleep", params={"level": "1", "mode": "keep"}, timeout=60)
    assert r.status_code == 200 and r.json() == {"status": "sleeping", "level": 1}
    assert httpx.get(url + "/is_sleeping").json() == {"is_sleeping": True}
    r = httpx.post(url + "/wake_up", params={"tags": "weights"}, timeout=60)
    assert r.json() == {"status": "sleeping", "tags": ["weights"]}
    assert httpx.get(url + "/is_sleeping").json() == {"is_sleeping": True}
    r = httpx.post(url + "/wake_up", params=[("tags", "kv_cache")], timeout=60)
    assert r.json() == {"status": "awake", "tags": ["kv_cache"]}
    assert httpx.get(url + "/is_sleeping").json() == {"is_sleeping": False}
    httpx.post(url + "/sleep", params={"level": "2"}, timeout=60)
    r = httpx.post(url + "/wake_up", timeout=60)  # no tags: everything
    assert r.json() == {"status": "awake", "tags": None}
    body = {"model": "scripted", "prompt": "awake", "max_tokens": 2}
    assert httpx.post(url + "/v1/completions", json=body, timeout=60).status_code == 200


def test_level_0_sleep_and_release_kv_cache_memory(dev: ServerThread) -> None:
    url = dev.url
    r = httpx.post(url + "/release_kv_cache_memory", timeout=60)  # not paused
    assert r.status_code == 400 and "completed pause" in r.json()["error"]["message"]
    r = httpx.post(url + "/sleep", params={"level": "0"}, timeout=60)
    assert r.json() == {"status": "sleeping", "level": 0}
    assert httpx.get(url + "/is_sleeping").json() == {"is_sleeping": True}
    r = httpx.post(url + "/release_kv_cache_memory", timeout=60)
    assert r.status_code == 200 and r.json() == {"status": "kv_cache_released"}
    r = httpx.post(url + "/wake_up", params={"tags": "scheduling"}, timeout=60)
    assert r.json() == {"status": "sleeping", "tags": ["scheduling"]}  # the cache sleeps
    r = httpx.post(url + "/wake_up", params={"tags": "kv_cache"}, timeout=60)
    assert r.json() == {"status": "awake", "tags": ["kv_cache"]}
    assert httpx.get(url + "/is_sleeping").json() == {"is_sleeping": False}
    body = {"model": "scripted", "prompt": "awake", "max_tokens": 2}
    assert httpx.post(url + "/v1/completions", json=body, timeout=60).status_code == 200
    r = httpx.post(url + "/sleep", params={"level": "3"}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "level"


def test_server_info_has_vllms_keys(dev: ServerThread) -> None:
    text = httpx.get(dev.url + "/server_info").json()
    assert set(text) == {"vllm_config", "vllm_env", "system_env"}
    assert "EngineConfig(" in text["vllm_config"]
    assert text["system_env"]["torch_version"] and text["system_env"]["actorllm_version"]
    info = httpx.get(dev.url + "/server_info", params={"config_format": "json"}).json()
    config = info["vllm_config"]
    assert config["served_model_name"] == "scripted"
    parallel = config["parallel_config"]
    assert parallel["tensor_parallel_size"] == 1 and parallel["world_size_across_dp"] == 1
    assert all("KEY" not in k for k in info["vllm_env"])


def test_rl_routes_absent_without_dev_mode(server: ServerThread) -> None:
    for method, path in [
        ("POST", "/pause"),
        ("POST", "/resume"),
        ("GET", "/is_paused"),
        ("GET", "/server_info"),
    ]:
        assert httpx.request(method, server.url + path).status_code == 404


def test_reset_prefix_cache_takes_vllms_query_parameters(dev: ServerThread) -> None:
    """Off, vLLM's parameters reset as before; on, each is a 400 naming it (not dropped),
    and a value that is not a boolean is a 400 too."""
    url = dev.url + "/reset_prefix_cache"
    off = {"reset_running_requests": "false", "reset_external": "false"}
    r = httpx.post(url, params=off)
    assert r.status_code == 200 and r.json() == {"success": True}  # vLLM 0.32's body
    for cache in ("/reset_mm_cache", "/reset_encoder_cache"):  # none here: nothing to clear
        assert httpx.post(dev.url + cache).status_code == 200
    for name in ("reset_running_requests", "reset_external"):
        error_of(httpx.post(url, params={name: "true"}), 400, name)
        error_of(httpx.post(url, params={name: "maybe"}), 400, name)
