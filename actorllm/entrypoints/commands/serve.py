"""``actorllm serve [MODEL]``: the OpenAI-compatible HTTP server."""

from __future__ import annotations

import argparse
import logging
import os

from actorllm.engine.config import parse_size
from actorllm.entrypoints.commands.engine_args import add_engine_arguments, engine_config
from actorllm.entrypoints.openai.app import AppSettings
from actorllm.entrypoints.server import ServerSettings

HELP = "serve a model over an OpenAI-compatible HTTP API"
logger = logging.getLogger("actorllm.server")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    http = parser.add_argument_group("server")
    http.add_argument("--host", default="127.0.0.1")
    http.add_argument("--port", type=int, default=8000)
    http.add_argument(
        "--api-key",
        default=os.environ.get("ACTORLLM_API_KEY"),
        help="require `Authorization: Bearer KEY` on /v1/* (env ACTORLLM_API_KEY)",
    )
    http.add_argument(
        "--dev-mode",
        action="store_true",
        help="expose /sleep, /wake_up, /reset_prefix_cache, /kv_connector/* (unsafe)",
    )
    http.add_argument("--worker-class", choices=("trio", "asyncio"), default="trio")
    http.add_argument(
        "--log-interval", type=float, default=10.0, help="seconds between stats log lines (0: off)"
    )
    http.add_argument(
        "--max-body-bytes",
        type=parse_size,
        default=16 * 2**20,
        help="413 beyond this request size (default 16MiB)",
    )
    http.add_argument(
        "--metrics-prefix",
        default="actorllm:",
        help="Prometheus metric name prefix (vllm: an existing vLLM dashboard works unchanged)",
    )
    http.add_argument(
        "--graceful-timeout",
        type=float,
        default=30.0,
        help="seconds shutdown waits for in-flight requests",
    )
    add_engine_arguments(parser)


def server_settings(args: argparse.Namespace) -> ServerSettings:
    return ServerSettings(
        host=args.host,
        port=args.port,
        worker_class=args.worker_class,
        graceful_timeout_s=args.graceful_timeout,
        app=AppSettings(
            api_key=args.api_key or None,
            max_body_bytes=args.max_body_bytes,
            dev_mode=args.dev_mode,
            log_interval_s=args.log_interval,
            metrics_prefix=args.metrics_prefix,
        ),
    )


def run(args: argparse.Namespace) -> int:
    try:
        config = engine_config(args)
    except ValueError as exc:
        logger.error("invalid engine configuration: %s", exc)
        return 2
    from actorllm.engine import AsyncEngine
    from actorllm.entrypoints.server import run_server

    return run_server(lambda: AsyncEngine.open(config), server_settings(args))
