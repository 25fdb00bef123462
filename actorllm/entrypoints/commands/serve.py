"""``actorllm serve [MODEL]``: the OpenAI-compatible HTTP server, with vLLM's flags.

Every flag is generated from a settings struct (``EngineConfig``, ``ServerSettings``,
``AppSettings``: each field a flag, its help text and ``--help`` group from the struct's
``CLI_HELP`` table, grouped by vLLM's config names); vLLM's flags with no setting here are
in :mod:`actorllm.compat.vllm.foreign_flags` (ignored with a warning, or refused when they
ask for something missing). So a launch line written for ``vllm serve`` starts this server:

    $ actorllm serve Qwen/Qwen3-0.6B --dtype auto --api-key token-abc123 \\
        --max-model-len 4096 --enable-chunked-prefill --disable-log-requests
"""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any

from actorllm.compat.vllm import foreign_flags, logging_flags
from actorllm.compat.vllm.config_file import add_config_argument
from actorllm.compat.vllm.struct_flags import Groups, add_struct_flags, given
from actorllm.entrypoints.commands.engine_args import (
    add_engine_arguments,
    describe_error,
    engine_config,
)
from actorllm.entrypoints.openai.app.settings import AppSettings
from actorllm.entrypoints.openai.lora_models import parse_lora_modules
from actorllm.entrypoints.openai.middleware import load_middleware
from actorllm.entrypoints.server import ServerSettings

HELP = "serve a model over an OpenAI-compatible HTTP API"
logger = logging.getLogger("actorllm.server")

_TRUE = ("1", "true", "yes", "on")
# Fields that do nothing on CPU: said once at start-up when given for a CPU engine.
_CUDA_ONLY = {"gpu_memory_utilization": "the KV cache size is --kv-cache-memory-bytes"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    groups: Groups = {}
    add_struct_flags(parser, ServerSettings, groups=groups, exclude=ServerSettings.CLI_EXCLUDE)
    add_struct_flags(parser, AppSettings, groups=groups, exclude=AppSettings.CLI_EXCLUDE)
    frontend = groups["Frontend"]
    add_log_spellings(frontend)
    add_lora_spelling(frontend)
    logging_flags.add_logging_flags(frontend)
    add_engine_arguments(parser)
    add_config_argument(frontend)
    foreign_flags.add_foreign_flags(parser)


def add_lora_spelling(frontend: argparse._ArgumentGroup) -> None:
    """``--lora-module``: vLLM takes it for ``--lora-modules`` by argparse's prefix
    matching (its own tests spell it so); ours matches no prefixes, so it is named."""
    frontend.add_argument(
        "--lora-module",
        dest="lora_modules",
        action="extend",
        nargs="+",
        default=argparse.SUPPRESS,
        help="vLLM's shorter spelling of --lora-modules",
    )


def add_log_spellings(frontend: argparse._ArgumentGroup) -> None:
    """vLLM's other spellings of two logging settings (``serve``, ``run-batch``)."""
    frontend.add_argument(
        "--disable-log-requests",
        dest="enable_log_requests",
        action="store_false",
        default=argparse.SUPPRESS,
        help="vLLM's older spelling of --no-enable-log-requests",
    )
    frontend.add_argument(
        "--disable-log-stats",
        dest="log_interval_s",
        action="store_const",
        const=0.0,
        default=argparse.SUPPRESS,
        help="no periodic stats log lines (--log-interval 0)",
    )


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in _TRUE


def server_settings(args: argparse.Namespace) -> ServerSettings:
    app: dict[str, Any] = given(args, AppSettings, AppSettings.CLI_EXCLUDE)
    app.setdefault("api_key", os.environ.get("ACTORLLM_API_KEY") or os.environ.get("VLLM_API_KEY"))
    if _env_true("ACTORLLM_SERVER_DEV_MODE") or _env_true("VLLM_SERVER_DEV_MODE"):
        app.setdefault("dev_mode", True)
    server = given(args, ServerSettings, ServerSettings.CLI_EXCLUDE)
    server.setdefault("log_config_file", logging_flags.log_config_file(args))
    return ServerSettings(**server, app=AppSettings(**app))


def _startup_notes(args: argparse.Namespace, device: str) -> list[str]:
    """One warning per given flag that has no effect here."""
    notes = foreign_flags.notes(args)
    values = vars(args)
    if device == "cpu":
        for name, why in _CUDA_ONLY.items():
            if name in values:
                notes.append(f"--{name.replace('_', '-')} has no effect on CPU: {why}.")
    return notes


def run(args: argparse.Namespace) -> int:
    try:
        settings = server_settings(args)
        load_middleware(settings.app.middleware)  # an import error stops the launch now
        parse_lora_modules(settings.app.lora_modules)  # a malformed entry stops it now too
        config = engine_config(args)
        notes = _startup_notes(args, config.resolved_device())
    except ValueError as exc:
        logger.error("invalid configuration: %s", describe_error(exc))
        return 2
    for note in notes:
        logger.warning("%s", note)
    from actorllm.engine import AsyncEngine
    from actorllm.entrypoints.server import run_server

    return run_server(lambda: AsyncEngine.open(config), settings)
