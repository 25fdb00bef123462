"""A ``vllm serve`` launch line works here: every flag of vLLM's serve command is parsed
and is then mapped onto a setting, accepted with one warning naming it (no meaning here),
or refused with an error naming it (it asks for a feature not built). None is unknown,
none is dropped in silence."""

from __future__ import annotations

import argparse
import functools
import json
from pathlib import Path
from typing import Any

import pytest

from actorllm.compat.vllm import foreign_flags as vllm_compat
from actorllm.entrypoints import cli
from actorllm.entrypoints.commands.engine_args import engine_config, engine_kwargs
from actorllm.entrypoints.commands.serve import server_settings
from tests.entrypoints.vllm_serve_flags import VLLM_SERVE_FLAGS

# The flags of the list that ask for something actorllm does not have.
REFUSED = {
    "--headless",
    "--calculate-kv-scales",
    "--kv-cache-dtype-skip-layers",
    "--quantization-param-path",
    "--enable-lora-bias",
    "--long-lora-scaling-factors",
    "--enable-ssl-refresh",
    "--tool-server",
    "--hf-config-path",
    "--rope-theta",
    "--skip-tokenizer-init",
    "--logits-processor-pattern",
    "--override-attention-dtype",
    "--io-processor-plugin",
    "--data-parallel-rank",
    "-dpn",
    "--data-parallel-hybrid-lb",
    "--otlp-traces-endpoint",
    "--collect-detailed-traces",
    "--scheduler-cls",
    "--enable-per-request-metrics",
    "--speculative-model",
    "--enable-prompt-adapter",
    "--prompt-adapters",
    "--worker-use-ray",
    "--engine-use-ray",
}


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("flags")
    (d / "serve.yaml").write_text("max-model-len: 1024\nenable-chunked-prefill: true\n")
    (d / "logging.json").write_text(json.dumps({"version": 1}))
    for name in ("key.pem", "cert.pem", "parsers.py"):
        (d / name).write_text("")
    return d


@functools.cache
def _parser() -> argparse.ArgumentParser:
    return cli.build_parser()


def parse(*argv: str) -> Any:
    return _parser().parse_args(["serve", *argv])


def main_status(argv: list[str]) -> int:
    try:
        return cli.main(argv)
    except SystemExit as exc:  # argparse's own errors
        return int(exc.code or 0)


def outcome(argv: list[str]) -> tuple[str, str]:
    """("refused" | "warned" | "set", what was said or set)."""
    args = parse(*argv)  # SystemExit (an unknown flag) fails the test
    try:
        notes = vllm_compat.notes(args)
        kwargs = engine_kwargs(args)
        settings = server_settings(args)
        engine_config(args)
    except ValueError as exc:
        return "refused", str(exc)
    if notes:
        assert len(notes) == 1, notes
        return "warned", notes[0]
    return "set", f"{kwargs} {settings}"


@pytest.mark.parametrize("argv", VLLM_SERVE_FLAGS, ids=lambda argv: " ".join(argv)[:60])
def test_every_vllm_serve_flag_is_mapped_warned_or_refused(argv: list[str], tmp: Path) -> None:
    argv = [a.replace("{tmp}", str(tmp)) for a in argv]
    verdict, said = outcome(argv)
    if argv[0] in REFUSED:
        assert verdict == "refused" and argv[0] in said, said
    else:
        assert verdict in ("warned", "set"), said
        if verdict == "warned":
            assert argv[0] in said


def test_a_fingerprint_value_without_the_custom_mode_is_refused_by_name() -> None:
    """vLLM drops the value unless the mode is custom; here the launch says so."""
    verdict, said = outcome(["--fingerprint-value", "fp"])
    assert verdict == "refused" and "--fingerprint-value" in said and "custom" in said


def test_foreign_switches_also_take_vllm_no_form() -> None:
    assert vllm_compat.notes(parse("--no-enable-sleep-mode", "--no-enable-lora")) == []


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--speculative-config", '{"method": "ngram"}'], "--speculative-config"),
        (["--guided-decoding-backend", "outlines"], "--guided-decoding-backend"),
        (
            ["--structured-outputs-config", '{"backend": "xgrammar", "x": 1}'],
            "structured_outputs_config.x",
        ),
        (["--kv-cache-dtype", "fp8_inc"], "--kv-cache-dtype: 'fp8_inc'"),
        (["--quantization-config", '{"linear": {"weight_dtype": "fp8"}}'], "--quantization-config"),
        (["-dp", "2", "-dpl", "1"], "--data-parallel-size-local 1"),
        (
            ["-tp", "2", "-dpb", "ray", "--distributed-executor-backend", "mp"],
            "--data-parallel-backend",
        ),
        (["--middleware", "no.such.module.Thing"], "--middleware no.such.module.Thing"),
        (["--config", "/no/such.yaml"], "--config /no/such.yaml"),
        (["--enable-log-outputs"], "--enable-log-outputs needs --enable-log-requests"),
    ],
)
def test_what_cannot_be_honoured_stops_the_launch_naming_it(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str], caplog: Any
) -> None:
    assert main_status(["serve", *argv]) == 2
    assert named in capsys.readouterr().err + caplog.text


def test_data_parallel_backend_ray_places_each_replicas_ranks_with_ray() -> None:
    config = engine_config(parse("-tp", "2", "-dp", "2", "--data-parallel-backend", "ray"))
    assert (config.data_parallel_backend, config.distributed_executor_backend) == ("ray", "ray")
    assert engine_config(parse("-dp", "2", "-dpb", "mp")).distributed_executor_backend is None
    # TP 1: each replica's worker (rank 0) is the Ray actor.
    assert engine_config(parse("-dp", "2", "-dpb", "ray")).distributed_executor_backend == "ray"


def test_structured_outputs_flags_map_onto_the_settings() -> None:
    so = '{"backend": "guidance", "disable_any_whitespace": true, "reasoning_parser": "qwen3"}'
    assert engine_kwargs(parse("--structured-outputs-config", so)) == {
        "structured_outputs_backend": "guidance",
        "structured_outputs_disable_any_whitespace": True,
        "reasoning_parser": "qwen3",
    }
    assert engine_kwargs(parse("--guided-decoding-backend", "xgrammar:disable-any-whitespace")) == {
        "structured_outputs_backend": "xgrammar",
        "structured_outputs_disable_any_whitespace": True,
    }
    # auto falls back from xgrammar to guidance; without fallback it is xgrammar alone
    assert engine_kwargs(parse("--guided-decoding-disable-fallback", "true")) == {
        "structured_outputs_backend": "xgrammar"
    }
    assert engine_kwargs(parse("--guided-decoding-disable-any-whitespace")) == {
        "structured_outputs_disable_any_whitespace": True
    }


def test_several_keys_and_served_names() -> None:
    args = parse("--api-key", "a", "b", "--api-key", "c", "--served-model-name", "qwen", "q3")
    assert server_settings(args).app.api_key == ["a", "b", "c"]
    config = engine_config(args)
    assert config.model_name() == "qwen" and config.model_names() == ["qwen", "q3"]


def test_a_yaml_config_file_sets_flags_and_the_command_line_wins(tmp_path: Path) -> None:
    path = tmp_path / "serve.yaml"
    path.write_text(
        "model: /models/tiny\nmax_model_len: 1024\nenforce-eager: true\n"
        "api-key: [a, b]\nallowed-origins: ['https://a.example']\n"
        "kv-transfer-config: {kv_connector: OffloadingConnector, kv_role: kv_both}\n"
        "trust-remote-code: true\n"
    )
    args = parse("--max-model-len", "2048", "--config", str(path))
    assert engine_kwargs(args) == {
        "model": "/models/tiny",
        "max_model_len": 2048,  # the command line wins, before or after --config
        "enforce_eager": True,
        "kv_connector": "offload",
    }
    settings = server_settings(args)
    assert settings.app.api_key == ["a", "b"]
    assert settings.app.allowed_origins == ["https://a.example"]
    assert len(vllm_compat.notes(args)) == 1  # trust-remote-code: warned like on the line
    path.write_text("no-such-flag: 1\n")
    with pytest.raises(SystemExit):
        parse("--config", str(path))


def test_no_prefix_abbreviations() -> None:
    """``--config`` must never be taken for ``--config-format`` (nor any prefix for a flag)."""
    with pytest.raises(SystemExit):
        parse("--max-model", "4")


def test_vllm_looser_spellings() -> None:
    """vLLM's FlexibleArgumentParser forms: underscores, and one key of a JSON flag."""
    args = parse(
        "--max_model_len",
        "64",
        "--enable_chunked_prefill",
        "--structured-outputs-config.backend",
        "guidance",
        "--structured-outputs-config.disable_any_whitespace=true",
        "-O.level",
        "3",
        "--seed=3",
    )
    assert engine_kwargs(args) == {
        "max_model_len": 64,
        "enable_chunked_prefill": True,
        "structured_outputs_backend": "guidance",
        "structured_outputs_disable_any_whitespace": True,
        "seed": 3,
    }
    notes = vllm_compat.notes(args)
    assert len(notes) == 1 and notes[0].startswith("-O ")  # -O.level 3: warned, not a model
    with pytest.raises(SystemExit):  # an unknown flag is still unknown, whatever its form
        parse("--no_such_flag", "1")


def test_the_api_server_module_is_serve(tmp_path: Path) -> None:
    """``python -m actorllm.entrypoints.openai.api_server`` takes serve's flags (vLLM's older
    launch form): a refused flag stops it with serve's error, naming the flag."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "actorllm.entrypoints.openai.api_server", "--enable-lora-bias"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert done.returncode == 2 and "--enable-lora-bias" in done.stderr
