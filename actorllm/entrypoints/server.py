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

import logging
import signal
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import anyio
import msgspec
from hypercorn.config import Config

from actorllm.entrypoints.openai.app import AppSettings, EngineFactory, app_state, build_app

logger = logging.getLogger("actorllm.server")

WorkerClass = Literal["trio", "asyncio"]
_WRITE_MARGIN_S = 5.0  # after the drain, for aborted streams to be written out


class ServerSettings(msgspec.Struct, kw_only=True):
    host: str = "127.0.0.1"
    port: int = 8000
    # Serve on an already-bound listening socket instead of host:port (tests use port 0).
    fd: int | None = None
    worker_class: WorkerClass = "trio"
    graceful_timeout_s: float = 30.0  # how long shutdown waits for in-flight requests
    startup_timeout_s: float = 3600.0  # building the engine (loading weights) may be slow
    app: AppSettings = msgspec.field(default_factory=AppSettings)


def hypercorn_config(settings: ServerSettings) -> Config:
    config = Config()
    if settings.fd is not None:
        config.bind = [f"fd://{settings.fd}"]
    else:
        host = f"[{settings.host}]" if ":" in settings.host else settings.host
        config.bind = [f"{host}:{settings.port}"]
    # The drain (see serve) has already finished or aborted every request when hypercorn's
    # graceful period starts: it only covers writing out the last (aborted) streams.
    config.graceful_timeout = _WRITE_MARGIN_S
    config.startup_timeout = settings.startup_timeout_s
    config.shutdown_timeout = settings.graceful_timeout_s + 30.0
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
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
    app = build_app(engine_factory, settings.app)
    if settings.app.dev_mode:
        logger.warning(
            "dev mode is on: /sleep, /wake_up, /reset_prefix_cache and /kv_connector/* are "
            "exposed without authentication; do not use it in production."
        )
    if settings.app.api_key is None:
        logger.info("no API key set: /v1/* is open to anyone who can reach %s", settings.host)

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
