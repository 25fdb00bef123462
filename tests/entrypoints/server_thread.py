"""A real hypercorn server on 127.0.0.1 (a free port) in a background thread, for tests.

The thread runs its own event loop (trio or asyncio); ``stop()`` triggers hypercorn's
graceful shutdown and joins the thread.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import anyio
import httpx

from actorllm.entrypoints.server import ServerSettings, serve


class ServerThread:
    def __init__(
        self,
        app: Any,
        *,
        worker_class: str = "trio",
        graceful_timeout_s: float = 5.0,
        send_buffer_bytes: int | None = None,
        **settings: Any,  # more ServerSettings fields (TLS, backlog, ...)
    ) -> None:
        """``send_buffer_bytes``: the kernel send buffer of every accepted connection (its
        listener's SO_SNDBUF, which also stops the kernel growing it), so that a client
        that stops reading fills it within a test."""
        self.app = app
        self._stop = threading.Event()
        self.error: BaseException | None = None
        # With uds= the server listens on that Unix socket: clients use `transport`.
        self.uds: str | None = settings.get("uds")
        fd = None
        if self.uds is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if send_buffer_bytes is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer_bytes)
            sock.bind(("127.0.0.1", 0))
            sock.listen(128)
            self.port: int = sock.getsockname()[1]
            fd = sock.detach()  # hypercorn takes the socket over
        else:
            self.port = 0
        scheme = "https" if settings.get("ssl_certfile") else "http"
        self.url = f"{scheme}://127.0.0.1:{self.port}" if self.uds is None else "http://localhost"
        self._settings = ServerSettings(
            fd=fd,
            worker_class=worker_class,  # type: ignore[arg-type]
            graceful_timeout_s=graceful_timeout_s,
            **settings,
        )
        self._thread = threading.Thread(target=self._run, daemon=True, name="test-server")

    async def _until_stopped(self) -> None:
        while not self._stop.is_set():
            await anyio.sleep(0.02)

    def _run(self) -> None:
        async def main() -> None:
            await serve(self.app, self._settings, shutdown_trigger=self._until_stopped)

        try:
            anyio.run(main, backend=self._settings.worker_class)
        except BaseException as exc:
            self.error = exc

    def start(self, timeout_s: float = 120.0) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self._thread.is_alive():
                raise RuntimeError(f"the server exited during startup: {self.error!r}")
            try:
                with self.client(timeout=1.0, verify=False) as c:
                    if c.get("/health").status_code == 200:
                        return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise TimeoutError("the server did not become healthy")

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise TimeoutError("the server did not shut down")

    def client(self, **kwargs: Any) -> httpx.Client:
        """An httpx client for this server (over its Unix socket with uds=)."""
        if self.uds is not None:
            kwargs["transport"] = httpx.HTTPTransport(uds=self.uds)
        return httpx.Client(base_url=self.url, **kwargs)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()
