"""``actorllm serve`` as a real child process on a free loopback port, for end-to-end tests.

    with ServeProcess(["--max-model-len", "256"]) as srv:
        httpx.get(srv.url + "/health")

The process is the command a user runs (``python -m actorllm.entrypoints.cli serve``), with
the embedded demo model unless the arguments name another. Its output goes to a temporary
file that ``log()`` returns, so a test can check what the server logged.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

import httpx

_ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServeProcess:
    def __init__(self, args: list[str], *, timeout_s: float = 240.0) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._args = args
        self._timeout_s = timeout_s
        self._log = tempfile.NamedTemporaryFile(prefix="actorllm-serve-", suffix=".log")  # noqa: SIM115
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> ServeProcess:
        env = {**os.environ, "PYTHONPATH": str(_ROOT), "OMP_NUM_THREADS": "1"}
        cmd = [sys.executable, "-m", "actorllm.entrypoints.cli", "serve"]
        cmd += ["--port", str(self.port), "--log-interval", "0", *self._args]
        self._proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + self._timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"actorllm serve exited during startup:\n{self.log()}")
            try:
                if httpx.get(self.url + "/health", timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.__exit__(None, None, None)
        raise TimeoutError(f"actorllm serve did not become healthy:\n{self.log()}")

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()  # SIGTERM: graceful shutdown
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._log.close()

    def log(self) -> str:
        return Path(self._log.name).read_text(errors="replace")
