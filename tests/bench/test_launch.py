"""``bench.launch``: a benchmark's server in its own process group, paused and resumed,
and stopped however the benchmark ends (SIGTERM included)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from actorllm.bench.launch import (
    launch_process,
    proc_stat,
    sigterm_unwinds,
    wait_group_stopped,
)

_HEALTH_SERVER = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def _argv(tmp_path: Path) -> Callable[[int], list[str]]:
    script = tmp_path / "health_server.py"
    script.write_text(_HEALTH_SERVER)
    return lambda port: [sys.executable, str(script), str(port)]


def _state(pid: int) -> str | None:
    fields = proc_stat(pid)
    return None if fields is None else fields[0]


def test_pause_stops_the_group_and_exit_stops_the_server(tmp_path: Path) -> None:
    with launch_process(_argv(tmp_path), name="health", timeout_s=60) as server:
        pid = server.proc.pid
        server.pause()  # returns once the group is stopped (SIGSTOP is asynchronous)
        assert _state(pid) == "T"  # stopped: takes no CPU while another server is measured
        server.resume()
        assert httpx.get(server.url + "/health", timeout=5).status_code == 200
        server.pause()  # left paused: leaving must still stop it
    assert server.proc.poll() is not None


def test_waiting_for_a_stopped_group_sees_every_process_of_it() -> None:
    """A busy group of two (a spinning leader and its spinning child) is stopped only
    once both are; a group left running times out."""
    spin = "import os\nos.fork()\nwhile True: pass\n"
    proc = subprocess.Popen([sys.executable, "-c", spin], start_new_session=True)
    try:
        time.sleep(0.5)  # both spinning
        assert not wait_group_stopped(proc.pid, timeout_s=0.2)
        os.killpg(proc.pid, signal.SIGSTOP)
        assert wait_group_stopped(proc.pid, timeout_s=5.0)
        stats = [proc_stat(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]
        states = [f[0] for f in stats if f is not None and int(f[2]) == proc.pid]
        assert states == ["T", "T"]  # the group's two processes, both stopped
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_start_that_fails_names_the_server_and_shows_its_log(tmp_path: Path) -> None:
    def argv(port: int) -> list[str]:
        return [sys.executable, "-c", "import sys; print('no such model'); sys.exit(3)"]

    failed = r"`fake vllm` exited with status 3[\s\S]*no such model"
    with (
        pytest.raises(RuntimeError, match=failed),
        launch_process(argv, name="fake vllm", log_path=tmp_path / "log", timeout_s=60),
    ):
        pass


def test_sigterm_unwinds_and_stops_a_paused_server(tmp_path: Path) -> None:
    before = signal.getsignal(signal.SIGTERM)
    with (
        pytest.raises(SystemExit) as exc,
        sigterm_unwinds(),
        launch_process(_argv(tmp_path), name="health", timeout_s=60) as server,
    ):
        server.pause()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises at the next bytecode
    assert exc.value.code == 128 + signal.SIGTERM
    assert server.proc.poll() is not None
    assert signal.getsignal(signal.SIGTERM) is before  # the previous handler is back
