"""The CLI: flags -> EngineConfig kwargs, the subcommand table, startup failure -> exit 1."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from actorllm.entrypoints import cli
from actorllm.entrypoints.commands.engine_args import engine_config, engine_kwargs
from actorllm.entrypoints.commands.serve import server_settings
from actorllm.entrypoints.server import ServerSettings, run_server


def parse(*argv: str) -> Any:
    return cli.build_parser().parse_args(list(argv))


def test_serve_flags_become_engine_kwargs() -> None:
    args = parse(
        "serve",
        "/models/tiny",
        "--served-model-name",
        "tiny",
        "--max-model-len",
        "512",
        "--kv-cache-memory-bytes",
        "512MiB",
        "--no-enable-prefix-caching",
        "--enforce-eager",
        "--scheduling-policy",
        "priority",
        "--block-size",
        "32",
        "--dtype",
        "float32",
    )
    assert engine_kwargs(args) == {
        "model": "/models/tiny",
        "served_model_name": "tiny",
        "max_model_len": 512,
        "kv_cache_memory_bytes": 512 * 2**20,
        "enable_prefix_caching": False,
        "enforce_eager": True,
        "scheduling_policy": "priority",
        "block_size": 32,
        "dtype": "float32",
    }
    assert engine_config(args).block_size == 32


def test_serve_defaults_and_server_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACTORLLM_API_KEY", "from-env")
    args = parse("serve", "--port", "9000", "--worker-class", "asyncio", "--dev-mode")
    assert engine_kwargs(args) == {}  # the demo model, EngineConfig's defaults
    settings = server_settings(args)
    assert (settings.host, settings.port, settings.worker_class) == ("127.0.0.1", 9000, "asyncio")
    assert settings.app.api_key == "from-env" and settings.app.dev_mode


def test_bad_flags_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        ["serve", "--dtype", "int3"],
        ["serve", "--kv-cache-memory-bytes", "lots"],
        ["nope"],
    ):
        with pytest.raises(SystemExit) as info:
            parse(*argv)
        assert info.value.code == 2
    assert cli.main(["serve", "--block-size", "3"]) == 2  # EngineConfig rejects it


def test_every_command_registered_from_the_table() -> None:
    sub = next(a for a in cli.build_parser()._actions if a.dest == "command")
    assert set(sub.choices) == set(cli.COMMANDS)  # type: ignore[arg-type]
    assert parse("generate", "hi", "--max-tokens", "3").max_tokens == 3


def test_engine_startup_failure_exits_1_with_one_clear_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    @asynccontextmanager
    async def broken() -> AsyncIterator[Any]:
        raise FileNotFoundError("model '/nowhere' is not a directory with a config.json")
        yield

    with caplog.at_level(logging.ERROR):
        status = run_server(broken, ServerSettings(port=0))
    assert status == 1
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "failed to start" in errors[0].getMessage()
    assert "/nowhere" in errors[0].getMessage() and errors[0].exc_info is None
