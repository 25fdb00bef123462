"""vLLM's ``serve --log-level`` and ``--logging-config``: the level the command line sets."""

from __future__ import annotations

import functools
import json
import logging
from typing import Any

import pytest

from actorllm.compat.vllm.logging_flags import apply_log_config_file, log_config_file, log_level
from actorllm.entrypoints import cli
from actorllm.entrypoints.commands.serve import server_settings


@functools.cache
def _parser() -> Any:
    return cli.build_parser()


def parse(*argv: str) -> Any:
    return _parser().parse_args(list(argv))


def test_serve_takes_log_level_after_the_command_as_vllm() -> None:
    assert log_level(parse("serve", "--log-level", "debug")) == "DEBUG"
    assert log_level(parse("--log-level", "ERROR", "serve")) == "ERROR"
    assert log_level(parse("serve")) == "INFO"


def test_log_level_wins_over_logging_config() -> None:
    config = '{"log_level": "DEBUG"}'
    assert log_level(parse("serve", "--logging-config", config)) == "DEBUG"
    assert log_level(parse("serve", "--logging-config", config, "--log-level", "WARNING")) == (
        "WARNING"
    )
    assert log_level(parse("serve", "--logging-config.log_level", "ERROR")) == "ERROR"


def test_pylogging_config_file_is_the_servers_log_config_file(tmp_path: Any) -> None:
    path = tmp_path / "log.json"
    path.write_text('{"version": 1}')
    args = parse("serve", "--logging-config", f'{{"pylogging_config_file": "{path}"}}')
    assert log_config_file(args) == str(path)
    assert server_settings(args).log_config_file == str(path)


@pytest.mark.parametrize(
    "config",
    ['{"formatter": "json"}', '{"configure_logging": false}', '{"log_level": "LOUD"}', '{"x": 1}'],
)
def test_what_logging_config_cannot_do_is_a_usage_error(
    config: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse("serve", "--logging-config", config)
    assert "--logging-config" in capsys.readouterr().err


def test_main_configures_the_level_given_after_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr(cli.logging, "basicConfig", lambda **kw: seen.update(kw))
    monkeypatch.setattr("actorllm.entrypoints.commands.serve.run", lambda args: 0)
    assert cli.main(["serve", "--log-level", "DEBUG"]) == 0
    assert seen["level"] == "DEBUG"


def test_run_batch_takes_them_and_applies_the_config_file(tmp_path: Any) -> None:
    path = tmp_path / "log.json"
    loggers = {"actorllm.test_logging_flags": {"level": "ERROR"}}
    path.write_text(
        json.dumps({"version": 1, "disable_existing_loggers": False, "loggers": loggers})
    )
    argv = ["run-batch", "-i", "in.jsonl", "-o", "out.jsonl", "--log-level", "warning"]
    args = parse(*argv, "--logging-config", json.dumps({"pylogging_config_file": str(path)}))
    assert log_level(args) == "WARNING"
    apply_log_config_file(args)
    assert logging.getLogger("actorllm.test_logging_flags").level == logging.ERROR


def test_an_unusable_config_file_is_an_error_naming_it(tmp_path: Any) -> None:
    args = parse("serve", "--logging-config", '{"pylogging_config_file": "/no/such.json"}')
    with pytest.raises(ValueError, match=r"pylogging_config_file /no/such\.json"):
        apply_log_config_file(args)
