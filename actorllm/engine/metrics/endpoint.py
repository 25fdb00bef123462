"""A Prometheus endpoint beside a run that has no HTTP server (``run-batch
--enable-metrics``, vLLM's ``start_http_server``): every GET, whatever its path, answers the
metrics as last rendered.

The figures come from the engine (``await engine.get_stats()``), which only the event loop
may ask; the HTTP server runs in a thread. So the loop refreshes the body every
``interval_s`` and the thread only reads the bytes it was handed (one reference, replaced
whole): a scrape is at most ``interval_s`` old and never sees a half-updated registry.

    >>> endpoint = MetricsEndpoint(ServerMetrics("demo"), "127.0.0.1", 0)
    >>> endpoint.url.startswith("http://127.0.0.1:")
    True
    >>> endpoint.close()
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, final

import anyio

from actorllm.engine.metrics.prometheus import CONTENT_TYPE, ServerMetrics


@final
class MetricsEndpoint:
    """Binds ``host:port`` at once (an ``OSError`` if taken; port 0: any free one); serves
    from :meth:`refresh_forever` on, until :meth:`close`."""

    def __init__(self, metrics: ServerMetrics, host: str, port: int) -> None:
        self._metrics = metrics
        self._body = metrics.render()  # replaced whole by the event loop; read by the thread
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = endpoint._body
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # a scrape every few seconds is not worth a log line

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    async def refresh_forever(self, engine: Any, interval_s: float = 1.0) -> None:
        """Serve, and render ``engine.get_stats()`` every ``interval_s`` until cancelled
        (then the server stops)."""
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics-endpoint", daemon=True
        )
        self._thread.start()
        try:
            while True:
                self._metrics.update_from_stats(await engine.get_stats())
                self._body = self._metrics.render()
                await anyio.sleep(interval_s)
        finally:
            self.close()

    def close(self) -> None:
        if self._thread is not None:
            self._server.shutdown()  # blocks until serve_forever returns (within 0.5 s)
            self._thread.join()
            self._thread = None
        self._server.server_close()
