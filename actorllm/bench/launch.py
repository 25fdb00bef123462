"""``launch_server``: ``actorllm serve`` in a child process on 127.0.0.1, for one benchmark.

The server binds loopback only, on a port the OS reports free; startup is bounded by
``timeout_s`` (``TimeoutError``; ``RuntimeError`` if the process exits first), and the
child gets SIGTERM (graceful shutdown) on exit, then SIGKILL after ``stop_timeout_s``.

    with launch_server({"load_format": "dummy"}) as url:
        ...  # http://127.0.0.1:<port>
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from actorllm.entrypoints.commands.struct_flags import flag_for


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_argv(engine_kwargs: dict[str, Any], port: int) -> list[str]:
    """The child's command line: ``actorllm serve [MODEL] --host 127.0.0.1 --port P ...``."""
    argv = [sys.executable, "-m", "actorllm.entrypoints.cli", "--log-level", "WARNING", "serve"]
    kwargs = dict(engine_kwargs)
    if kwargs.get("model") is not None:
        argv.append(str(kwargs.pop("model")))
    argv += ["--host", "127.0.0.1", "--port", str(port), "--log-interval", "0"]
    for key, value in kwargs.items():
        flag = flag_for(key)
        if value is True:
            argv.append(flag)
        elif value is False:
            argv.append("--no-" + flag[2:])
        else:
            argv += [flag, str(value)]
    return argv


@contextmanager
def launch_server(
    engine_kwargs: dict[str, Any], *, timeout_s: float = 300.0, stop_timeout_s: float = 30.0
) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(serve_argv(engine_kwargs, port))
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(proc, url, timeout_s)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(stop_timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_healthy(proc: subprocess.Popen[bytes], url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"`actorllm serve` exited with status {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"`actorllm serve` was not healthy within {timeout_s:.0f} s")
