"""Serving the app on hypercorn, on trio (default) or asyncio.

* :func:`serve` runs inside an event loop until ``shutdown_trigger`` returns (default:
  SIGINT/SIGTERM). Shutdown is a graceful drain: ``/health`` and new requests answer 503
  (stop accepting: balancers route elsewhere), in-flight requests get the engine's
  ``shutdown_timeout`` to finish and the rest are aborted, so every client's stream
  still ends properly (``finish_reason: "abort"``, ``[DONE]``); then the listeners close,
  the lifespan closes the engine and the process exits 0.
* :func:`run_server` is the blocking entry point used by ``actorllm serve``: it picks the
  event loop, and turns an engine that fails to start into one clear log line and exit
  status 1 (no traceback spam).

    run_server(lambda: AsyncEngine.open(config), ServerSettings(port=8000))
"""

from __future__ import annotations

import json
import logging
import logging.config
import signal
import ssl
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar, Literal

import anyio
import msgspec
from hypercorn.config import Config

from actorllm.entrypoints.openai.app.build import build_app
from actorllm.entrypoints.openai.app.lifespan import EngineFactory
from actorllm.entrypoints.openai.app.settings import AppSettings
from actorllm.entrypoints.openai.app.state import app_state
from actorllm.entrypoints.server_help import SERVER_SETTINGS_HELP

logger = logging.getLogger("actorllm.server")

WorkerClass = Literal["trio", "asyncio"]


class ServerSettings(msgspec.Struct, kw_only=True):
    """The HTTP server's settings. ``actorllm serve`` has a flag for each field but those in
    ``CLI_EXCLUDE`` (for tests and embedding only); the ``--help`` text is :data:`CLI_HELP`
    (``server_help.py``)."""

    CLI_EXCLUDE: ClassVar[frozenset[str]] = frozenset({"fd", "startup_timeout_s", "app"})
    CLI_HELP: ClassVar[Mapping[str, Mapping[str, str]]] = SERVER_SETTINGS_HELP

    # -- Frontend ---------------------------------------------------------------------------
    host: str = "127.0.0.1"
    """Address to listen on (0.0.0.0 or :: for every interface)."""
    port: int = 8000
    """Port to listen on."""
    uds: str | None = None
    """Serve on this Unix domain socket path instead of host:port (e.g. behind a local
    proxy)."""
    fd: int | None = None
    """Serve on this already-bound listening socket instead of host:port (tests: port 0)."""
    backlog: int = 2048
    """Listen backlog: connections the kernel queues before the server accepts them. vLLM's
    value; hypercorn's default of 100 resets clients when a thousand connect at once."""
    keep_alive_timeout_s: float = 5.0
    """Seconds an idle keep-alive connection stays open waiting for its next request
    (uvicorn's and so vLLM's value): long enough for a client to reuse it, short enough that
    abandoned connections do not pile up. Streams in progress are not idle."""
    keep_alive_max_requests: int = 10_000
    """Requests served on one keep-alive connection before it is closed (a client then opens
    a new one); bounds what one connection can hold on to."""
    h11_max_incomplete_event_size: int = 4 * 2**20
    """Bytes of request line and headers (HTTP/1.1) accepted before the request is refused
    (vLLM's 4 MiB)."""
    worker_class: WorkerClass = "trio"
    """The event loop: trio or asyncio."""
    graceful_timeout_s: float = 30.0
    """Seconds shutdown waits for in-flight requests before cancelling them."""
    startup_timeout_s: float = 3600.0
    """Seconds building the engine (loading weights) may take."""
    ssl_keyfile: str | None = None
    """TLS: the private key file (PEM). With ssl_certfile, the server speaks HTTPS."""
    ssl_certfile: str | None = None
    """TLS: the certificate chain file (PEM)."""
    ssl_ca_certs: str | None = None
    """TLS: CA certificates to verify client certificates with."""
    ssl_cert_reqs: int = 0
    """TLS: client certificates: 0 not asked, 1 optional, 2 required (Python's ssl.CERT_*)."""
    ssl_ciphers: str | None = None
    """TLS: the cipher suites (OpenSSL cipher list; TLS 1.2 and below)."""
    uvicorn_log_level: Literal["critical", "error", "warning", "info", "debug", "trace"] = "info"
    """Log level of the HTTP server's own logger (hypercorn here; vLLM's name)."""
    log_config_file: str | None = None
    """A JSON logging configuration (Python's logging.config.dictConfig schema) applied at
    start-up, for actorllm's loggers and hypercorn's."""
    app: AppSettings = msgspec.field(default_factory=AppSettings)

    def __post_init__(self) -> None:
        if (self.ssl_keyfile is None) != (self.ssl_certfile is None):
            raise ValueError("--ssl-keyfile and --ssl-certfile go together: give both or neither.")
        if self.ssl_cert_reqs not in (0, 1, 2):
            raise ValueError(f"--ssl-cert-reqs must be 0, 1 or 2, got {self.ssl_cert_reqs}.")
        if self.uds is not None and self.fd is not None:
            raise ValueError("--uds and fd are two places to listen: give one.")
        if self.backlog < 1:
            raise ValueError(f"--backlog must be at least 1, got {self.backlog}.")
        if self.log_config_file is not None:
            read_log_config(self.log_config_file)  # a bad file fails at configuration


def read_log_config(path: str) -> dict[str, Any]:
    """The ``dictConfig`` mapping in ``path``; ValueError naming the flag if unusable."""
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError) as exc:
        raise ValueError(f"--log-config-file {path}: cannot read it: {exc}") from exc
    if not isinstance(config, dict):
        raise ValueError(f"--log-config-file {path}: must hold a JSON object (dictConfig).")
    return config


def hypercorn_config(settings: ServerSettings) -> Config:
    config = Config()
    if settings.fd is not None:
        config.bind = [f"fd://{settings.fd}"]
    elif settings.uds is not None:
        config.bind = [f"unix:{settings.uds}"]
    else:
        host = f"[{settings.host}]" if ":" in settings.host else settings.host
        config.bind = [f"{host}:{settings.port}"]
    config.backlog = settings.backlog
    config.keep_alive_timeout = settings.keep_alive_timeout_s
    config.keep_alive_max_requests = settings.keep_alive_max_requests
    config.h11_max_incomplete_size = settings.h11_max_incomplete_event_size
    # No read timeout (hypercorn's default): a slow client ties up only its own connection
    # (a task, no thread), and what it can make the server hold is bounded by
    # h11_max_incomplete_size (headers) and the app's body limit; idle connections between
    # requests close after keep_alive_timeout.
    config.graceful_timeout = settings.graceful_timeout_s
    config.startup_timeout = settings.startup_timeout_s
    config.shutdown_timeout = settings.graceful_timeout_s + 30.0
    if settings.ssl_certfile is not None:
        config.certfile = settings.ssl_certfile
        config.keyfile = settings.ssl_keyfile
        config.ca_certs = settings.ssl_ca_certs
        config.verify_mode = ssl.VerifyMode(settings.ssl_cert_reqs)
        if settings.ssl_ciphers:
            config.ciphers = settings.ssl_ciphers
    config.accesslog = None
    error_logger = logging.getLogger("hypercorn.error")
    level = settings.uvicorn_log_level.upper()
    error_logger.setLevel(logging.DEBUG if level == "TRACE" else level)
    config.errorlog = error_logger
    config.include_server_header = False
    return config


async def wait_for_signal() -> None:
    """Return on the first SIGINT or SIGTERM (works on both anyio backends)."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            logger.info("received %s, shutting down", signal.Signals(signum).name)
            return


async def serve(
    app: Any,
    settings: ServerSettings,
    *,
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Serve ``app`` until ``shutdown_trigger()`` returns; must run on ``worker_class``'s loop.

    Raises whatever hypercorn raises, e.g. when the app's lifespan startup fails.
    """
    config = hypercorn_config(settings)
    wait = shutdown_trigger or wait_for_signal

    async def trigger() -> None:
        await wait()
        # Drain before hypercorn's own shutdown (which starts when this returns): new
        # requests and /health get 503 meanwhile, so balancers route elsewhere.
        await drain(app)

    if settings.worker_class == "trio":
        from hypercorn.trio import serve as trio_serve

        from actorllm.entrypoints.trio_send import install

        install()  # a streamed chunk without two task switches (trio_send.py)
        await trio_serve(app, config, shutdown_trigger=trigger)
    else:
        from hypercorn.asyncio import serve as asyncio_serve

        await asyncio_serve(app, config, shutdown_trigger=trigger)


async def drain(app: Any) -> None:
    """Mark the app draining (``/health`` 503) and drain its engine within the engine's
    ``shutdown_timeout`` (``--shutdown-timeout``; see :func:`serve`)."""
    state = app_state(app)
    state.draining = True
    if state.ctx is None or state.ctx.is_dead():
        return
    aborted = await state.ctx.engine.drain()
    if aborted:
        logger.warning("shutdown: aborted %d requests still running at the timeout", aborted)


def run_server(
    engine_factory: EngineFactory,
    settings: ServerSettings,
    *,
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
) -> int:
    """Build the app and serve it until SIGINT/SIGTERM; returns the process exit status."""
    if settings.log_config_file is not None:
        logging.config.dictConfig(read_log_config(settings.log_config_file))
    app = build_app(engine_factory, settings.app)
    if settings.app.dev_mode:
        logger.warning(
            "dev mode is on: /sleep, /wake_up, /pause, /resume, /server_info, "
            "/reset_prefix_cache, /kv_connector/*, "
            "/collective_rpc and /start_profile, /stop_profile are "
            "exposed without authentication; do not use it in production."
        )
    if not settings.app.api_key:
        where = settings.uds or settings.host
        logger.info("no API key set: /v1/* is open to anyone who can reach %s", where)

    async def main() -> None:
        await serve(app, settings, shutdown_trigger=shutdown_trigger)

    try:
        anyio.run(main, backend=settings.worker_class)
    except KeyboardInterrupt:
        return 0
    except BaseException as exc:
        error = app_state(app).startup_error
        if error is not None:
            logger.error("the engine failed to start: %s: %s", type(error).__name__, error)
            return 1
        if isinstance(exc, Exception | BaseExceptionGroup):
            logger.error("the server stopped with an error", exc_info=exc)
            return 1
        raise
    return 0
