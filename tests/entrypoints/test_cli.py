"""The CLI: flags -> EngineConfig kwargs, the subcommand table, startup failure -> exit 1."""

from __future__ import annotations

import io
import logging
import sys
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
        "served_model_name": ["tiny"],
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


def test_version_collect_env_and_vllms_commands_not_built(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from actorllm import __version__

    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == __version__
    assert cli.main(["collect-env"]) == 0
    out = capsys.readouterr().out
    assert "torch_version" in out and "cpu_flags" in out and "Environment variables" in out
    # vLLM's subcommands not built here: refused by name, whatever their arguments
    assert cli.main(["--log-level", "INFO", "preload", "--model", "m", "-tp", "4"]) == 2
    assert "actorllm preload: not built: weight-cache daemons" in capsys.readouterr().err


@pytest.mark.parametrize("seed", [[], ["--seed", "3"]], ids=["no-seed", "seed"])
def test_generate_runs_on_the_demo_model(
    seed: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """`actorllm generate` end to end, with and without --seed (a flag left out is absent
    from the parsed args: the command must not read it)."""
    assert cli.main(["generate", "--max-tokens", "3", "--temperature", "0", *seed, "Hello"]) == 0
    assert capsys.readouterr().out.strip()


def test_generate_interactive_chats_on_the_demo_model(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The local-engine REPL: a reply per message, /reset forgets, /exit quits (the line
    after it is never read). Piped stdin: no prompts, the replies only."""
    monkeypatch.setattr(sys, "stdin", io.StringIO("Hello\n/reset\nHi\n/exit\nnever\n"))
    argv = ["generate", "--interactive", "--system", "Be brief.", "--max-tokens", "3"]
    assert cli.main(argv) == 0
    assert capsys.readouterr().out.strip()
    assert sys.stdin.read() == "never\n"


def test_generate_takes_a_prompt_or_interactive(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        ["generate"],
        ["generate", "hi", "--interactive"],
        ["generate", "hi", "--system", "s"],
    ):
        assert cli.main(argv) == 2
        assert capsys.readouterr().err.startswith("error: ")


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


# -- vLLM's flags -------------------------------------------------------------------------------


def test_every_settings_field_is_a_documented_flag() -> None:
    """One source of truth: each field of the settings structs is a flag with help text."""
    import msgspec

    from actorllm.compat.vllm.struct_flags import field_docs, flag_for
    from actorllm.engine.config.engine_config import EngineConfig
    from actorllm.entrypoints.openai.app import AppSettings

    parser = cli.build_parser()
    serve = next(a for a in parser._actions if a.dest == "command").choices["serve"]  # type: ignore[index]
    options = serve._option_string_actions
    for cls, skip in (
        (EngineConfig, set()),
        (ServerSettings, ServerSettings.CLI_EXCLUDE),
        (AppSettings, AppSettings.CLI_EXCLUDE),
    ):
        docs = field_docs(cls)
        for f in msgspec.structs.fields(cls):
            if f.name in skip:
                continue
            assert flag_for(f.name) in options, f.name
            assert docs[f.name].help and docs[f.name].group, f.name


def test_help_groups_flags_as_vllm_does(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse("serve", "--help")
    out = capsys.readouterr().out
    for group in (
        "Frontend:",
        "ModelConfig:",
        "LoadConfig:",
        "CacheConfig:",
        "SchedulerConfig:",
        "ParallelConfig:",
        "KVTransferConfig:",
        "vLLM compatibility:",
    ):
        assert group in out
    section = out.split("\nSchedulerConfig:")[1].split("\n\n")[0]
    assert "--long-prefill-token-threshold" in section


VLLM_LAUNCH = [
    "serve",
    "--model",
    "/models/tiny",
    "--dtype",
    "auto",
    "--api-key",
    "token-abc123",
    "--gpu-memory-utilization",
    "0.85",
    "--enable-chunked-prefill",
    "--max-num-batched-tokens",
    "4096",
    "--long-prefill-token-threshold",
    "512",
    "--num-gpu-blocks-override",
    "64",
    "--tensor-parallel-size",
    "1",
    "-dp",
    "1",
    "--kv-cache-dtype",
    "auto",
    "--disable-log-requests",
    "--disable-log-stats",
    "--trust-remote-code",
    "--uvicorn-log-level",
    "warning",
    "--swap-space",
    "4",
    "--host",
    "0.0.0.0",
]


def test_a_vllm_launch_line_parses_and_warns_once_per_ignored_flag() -> None:
    from actorllm.compat.vllm import foreign_flags as vllm_compat

    args = parse(*VLLM_LAUNCH, "--trust-remote-code")
    kwargs = engine_kwargs(args)
    assert kwargs == {
        "model": "/models/tiny",
        "dtype": "auto",
        "gpu_memory_utilization": 0.85,
        "enable_chunked_prefill": True,
        "max_num_batched_tokens": 4096,
        "long_prefill_token_threshold": 512,
        "num_gpu_blocks_override": 64,
        "tensor_parallel_size": 1,
        "data_parallel_size": 1,
        "kv_cache_dtype": "auto",
    }
    settings = server_settings(args)
    assert settings.host == "0.0.0.0" and settings.uvicorn_log_level == "warning"
    assert settings.app.api_key == ["token-abc123"]
    assert settings.app.enable_log_requests is False and settings.app.log_interval_s == 0.0
    notes = vllm_compat.notes(args)
    assert len(notes) == 2  # --trust-remote-code (given twice: one warning), --swap-space
    assert any("--trust-remote-code" in n for n in notes)
    assert any("--swap-space" in n for n in notes)


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--tensor-parallel-size", "0"], "--tensor-parallel-size"),
        (["-pp", "0"], "--pipeline-parallel-size"),
        (["-pp", "2", "-tp", "2"], "--tensor-parallel-size"),
        (["--quantization", "bogus"], "--quantization"),
        (["--enable-lora-bias"], "--enable-lora-bias"),
        (["--kv-cache-dtype", "fp8_inc"], "--kv-cache-dtype: 'fp8_inc'"),
        (["--chat-template", "/no/such/template.jinja"], "--chat-template"),
    ],
)
def test_what_we_cannot_do_is_refused_naming_the_flag(
    argv: list[str], named: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR):
        assert cli.main(["serve", *argv]) == 2
    assert named in caplog.text


def test_the_ray_backend_flag_reaches_the_engine_config() -> None:
    args = parse("serve", "/models/tiny", "-tp", "2", "--distributed-executor-backend", "ray")
    kwargs = engine_kwargs(args)
    assert kwargs["distributed_executor_backend"] == "ray"
    assert kwargs["tensor_parallel_size"] == 2
    assert engine_config(args).distributed_executor_backend == "ray"  # validates: accepted


def test_tensor_parallel_inside_data_parallel_reaches_the_engine_config() -> None:
    config = engine_config(parse("serve", "/models/tiny", "-tp", "2", "-dp", "2"))  # validates
    assert (config.tensor_parallel_size, config.data_parallel_size) == (2, 2)


def test_both_log_request_spellings() -> None:
    assert server_settings(parse("serve", "--enable-log-requests")).app.enable_log_requests
    assert not server_settings(parse("serve", "--no-enable-log-requests")).app.enable_log_requests
    assert not server_settings(parse("serve", "--disable-log-requests")).app.enable_log_requests
    assert not server_settings(parse("serve")).app.enable_log_requests


def test_lora_module_is_lora_modules() -> None:
    """vLLM's tests spell it --lora-module (vLLM matches prefixes); both add adapters."""
    args = parse("serve", "--lora-modules", "a=/a", "--lora-module", "b=/b", "c=/c")
    assert server_settings(args).app.lora_modules == ["a=/a", "b=/b", "c=/c"]


def test_model_positional_or_flag_but_not_two_different() -> None:
    assert engine_kwargs(parse("serve", "org/a"))["model"] == "org/a"
    assert engine_kwargs(parse("serve", "org/a", "--model", "org/a"))["model"] == "org/a"
    with pytest.raises(ValueError, match="given twice"):
        engine_kwargs(parse("serve", "org/a", "--model", "org/b"))


def test_kv_transfer_config_json_sets_the_connector() -> None:
    config = (
        '{"kv_connector": "OffloadingConnector", "kv_role": "kv_both",'
        ' "kv_connector_extra_config": {"host_bytes": "1GiB", "disk_dir": "/tmp/kv"}}'
    )
    kwargs = engine_kwargs(parse("serve", "--kv-transfer-config", config))
    assert kwargs == {
        "kv_connector": "offload",
        "kv_offload_host_bytes": 2**30,
        "kv_offload_disk_dir": "/tmp/kv",
    }
    assert engine_kwargs(parse("serve", "--kv-offloading-size", "0.5")) == {
        "kv_connector": "offload",
        "kv_offload_host_bytes": 2**29,
    }
    for bad in (
        '{"kv_connector": "NixlConnector"}',
        "not json",
        '{"kv_connector": "offload", "x": 1}',
    ):
        with pytest.raises(SystemExit):
            parse("serve", "--kv-transfer-config", bad)


def test_server_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACTORLLM_SERVER_DEV_MODE", "1")
    s = server_settings(
        parse(
            "serve",
            "--backlog",
            "4096",
            "--allowed-origins",
            '["https://a.example", "https://b.example"]',
            "--allowed-methods",
            "GET,POST",
            "--allow-credentials",
            "--root-path",
            "/llm",
            "--response-role",
            "bot",
            "--keep-alive-timeout",
            "7.5",
            "--max-body-bytes",
            "1MiB",
        )
    )
    assert s.backlog == 4096 and s.keep_alive_timeout_s == 7.5
    assert s.app.allowed_origins == ["https://a.example", "https://b.example"]
    assert s.app.allowed_methods == ["GET", "POST"] and s.app.allow_credentials
    assert (s.app.root_path, s.app.response_role, s.app.max_body_bytes) == ("/llm", "bot", 2**20)
    assert s.app.dev_mode  # from ACTORLLM_SERVER_DEV_MODE
    defaults = server_settings(parse("serve"))
    assert defaults.backlog == 2048 and defaults.app.allowed_origins == []


def test_chat_template_inline_or_file(tmp_path: Any) -> None:
    inline = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    assert (
        engine_config(parse("serve", "--chat-template", inline)).resolved_chat_template() == inline
    )
    path = tmp_path / "t.jinja"
    path.write_text(inline)
    config = engine_config(parse("serve", "--chat-template", str(path)))
    assert config.resolved_chat_template() == inline


def test_generate_and_chat_sampling_flags_over_the_generation_config() -> None:
    """`actorllm generate [--interactive]`: a sampling flag given wins; one left out takes
    the model's generation_config default (--override-generation-config here), else the
    command's own (greedy, --max-tokens 64, 256 interactive) -- the generation-config flags
    are never silently ignored."""
    from actorllm.entrypoints.commands.generate import sampling_params

    def params(*flags: str) -> Any:
        args = parse("generate", "hi", *flags)
        return sampling_params(args, engine_config(args).get_diff_sampling_param())

    own = params("--generation-config", "vllm")
    assert (own.temperature, own.top_p, own.max_tokens) == (0.0, 1.0, 64)
    over = [
        "--override-generation-config",
        '{"temperature": 0.7, "top_p": 0.9, "max_new_tokens": 9}',
    ]
    p = params("--generation-config", "vllm", *over)
    assert (p.temperature, p.top_p, p.max_tokens) == (0.7, 0.9, 9)
    p = params("--generation-config", "vllm", *over, "--temperature", "0.2", "--max-tokens", "3")
    assert (p.temperature, p.top_p, p.max_tokens) == (0.2, 0.9, 3)
    chat = parse("generate", "--interactive", "--generation-config", "vllm")
    assert sampling_params(chat, {}).max_tokens == 256


def test_the_cli_module_imports_neither_torch_nor_the_engine() -> None:
    """A tensor-parallel rank (a spawn) imports the parent's main module: under
    ``actorllm serve`` that is this one, so it must stay light."""
    import subprocess

    code = (
        "import sys, actorllm.entrypoints.cli; "
        "print(sorted(m for m in ('torch', 'transformers', 'actorllm.engine') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stderr
