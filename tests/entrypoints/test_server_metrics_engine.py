"""/metrics over the whole engine (scripted model), as vLLM's test_metrics.py reads it:
iteration tokens of one request, and the scheduler's gauges back to 0 once clients that
went away are aborted."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from actorllm.entrypoints.openai.app import AppSettings, build_app
from actorllm.testing import open_test_engine
from tests.entrypoints.server_thread import ServerThread

GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    engine = lambda: open_test_engine(step_delay_s=0.01)  # noqa: E731
    srv = ServerThread(build_app(engine, AppSettings(log_interval_s=0, metrics_prefix="vllm")))
    srv.start()
    yield srv
    srv.stop()
    assert srv.error is None


def _value(text: str, name: str) -> float:
    m = re.search(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? (\S+)$", text, re.M)
    assert m is not None, name
    return float(m.group(1))


def _gauges(srv: ServerThread) -> tuple[float, ...]:
    text = httpx.get(srv.url + "/metrics").text
    return tuple(_value(text, g) for g in GAUGES)


def _until(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_one_request_adds_its_prompt_and_outputs_over_its_steps(server: ServerThread) -> None:
    def total(text: str, suffix: str) -> float:
        return _value(text, "vllm:iteration_tokens_total" + suffix)

    before = httpx.get(server.url + "/metrics").text
    prompt = [11, 12, 13, 14, 15, 16, 17]
    body = {"prompt": prompt, "max_tokens": 10, "ignore_eos": True}
    assert httpx.post(server.url + "/v1/completions", json=body, timeout=60).status_code == 200
    after = httpx.get(server.url + "/metrics").text
    assert total(after, "_count") - total(before, "_count") == 10  # one per output step
    assert total(after, "_sum") - total(before, "_sum") == len(prompt) + 10
    computed = "vllm:request_prefill_kv_computed_tokens_sum"
    assert _value(after, computed) - _value(before, computed) == len(prompt)  # no cache hit


def test_gauges_return_to_zero_after_clients_go_away(server: ServerThread) -> None:
    _until(lambda: _gauges(server) == (0, 0, 0))
    body = {"prompt": "Hello", "max_tokens": 500, "ignore_eos": True, "stream": True}
    with httpx.Client(base_url=server.url, timeout=60) as client, contextlib.ExitStack() as open_:
        lines = []  # held: a dropped line iterator would close its connection
        for _ in range(3):
            response = open_.enter_context(client.stream("POST", "/v1/completions", json=body))
            lines.append(response.iter_lines())
            assert next(lines[-1]).startswith("data: ")  # generating
        running, _, usage = _gauges(server)
        assert running > 0 and usage > 0
    _until(lambda: _gauges(server) == (0, 0, 0))  # disconnects abort the requests
