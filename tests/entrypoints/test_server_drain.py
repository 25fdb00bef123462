"""SIGTERM during load (issue 18): the server process stops accepting (503), lets short
requests finish, aborts the ones still running at the shutdown timeout — every stream
still ends with ``[DONE]`` — and exits 0."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

import httpx
import pytest

SHUTDOWN_TIMEOUT_S = 3.0

SERVER = """
import sys
from actorllm.entrypoints.openai.app import AppSettings
from actorllm.entrypoints.server import ServerSettings, run_server
from actorllm.testing import open_test_engine

port, backend, timeout = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
settings = ServerSettings(port=port, worker_class=backend, app=AppSettings(log_interval_s=0))
engine = lambda: open_test_engine(step_delay_s=0.02, shutdown_timeout=timeout)
sys.exit(run_server(engine, settings))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stream(url: str, max_tokens: int, out: dict[str, Any], started: threading.Event) -> None:
    body = {"prompt": "drain me", "max_tokens": max_tokens, "stream": True, "ignore_eos": True}
    events: list[str] = []
    try:
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=30.0) as r:
            assert r.status_code == 200, r.read()
            for line in r.iter_lines():
                if line.startswith("data: "):
                    events.append(line[len("data: ") :])
                    started.set()
    except httpx.HTTPError as exc:  # a reset connection: what must not happen
        out["error"] = repr(exc)
    out["events"] = events


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_sigterm_drains_then_exits_0(backend: str) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(port), backend, str(SHUTDOWN_TIMEOUT_S)], env=env
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(url + "/health", timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "server did not start"
            time.sleep(0.1)
        # Short requests finish within the drain; long ones (20 ms a token: 10 s) cannot.
        lengths = [10, 10, 500, 500]
        results: list[dict[str, Any]] = [{} for _ in lengths]
        started = [threading.Event() for _ in lengths]
        threads = [
            threading.Thread(target=stream, args=(url, n, results[i], started[i]))
            for i, n in enumerate(lengths)
        ]
        for t in threads:
            t.start()
        for e in started:
            assert e.wait(30)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        # While the long requests drain: no new work, and balancers are told so.
        while httpx.get(url + "/health", timeout=5.0).status_code == 200:
            assert time.monotonic() - t0 < SHUTDOWN_TIMEOUT_S
            time.sleep(0.02)
        late = httpx.post(url + "/v1/completions", json={"prompt": "late"}, timeout=5.0)
        assert late.status_code == 503 and late.json()["error"]["code"] == 503
        for t in threads:
            t.join(30)
        drained_in = time.monotonic() - t0
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    for n, res in zip(lengths, results, strict=True):
        assert "error" not in res, res.get("error")
        events = res["events"]
        assert events[-1] == "[DONE]"
        last = json.loads(events[-2])
        reason = last["choices"][0]["finish_reason"]
        assert reason == ("length" if n == 10 else "abort"), last
    assert drained_in < SHUTDOWN_TIMEOUT_S + 10
    with pytest.raises(httpx.ConnectError):  # stopped accepting, and gone
        httpx.get(url + "/health", timeout=1.0)
