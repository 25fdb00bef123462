"""``actorllm.compat.vllm.args``: one translation of vLLM's engine arguments, with one
precedence, whichever form they come in (keywords, ``EngineArgs``, a command line)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

import pytest

from actorllm import EngineArgs, EngineConfig
from actorllm.compat.vllm import args
from actorllm.compat.vllm.cli_args import add_engine_arguments, engine_config
from actorllm.engine.api.async_engine import _as_config
from actorllm.engine.config.engine_config import EngineConfigError


def _keywords(**kw: Any) -> EngineConfig:
    return args.engine_config(None, **kw)


def _engine_args(**kw: Any) -> EngineConfig:
    return EngineArgs(**kw).create_engine_config()


def _command_line(**kw: Any) -> EngineConfig:
    """The same settings as flags (``--name value``; a dict value as its JSON)."""
    import json

    argv: list[str] = []
    for name, value in kw.items():
        argv += [args_flag(name), json.dumps(value) if isinstance(value, dict) else str(value)]
    parser = argparse.ArgumentParser()
    add_engine_arguments(parser, model_positional=False)
    return engine_config(parser.parse_args(argv))


def args_flag(name: str) -> str:
    return "--" + name.replace("_", "-")


FORMS: list[Callable[..., EngineConfig]] = [_keywords, _engine_args, _command_line]


@pytest.mark.parametrize("form", FORMS)
def test_a_field_given_by_its_own_name_wins_over_a_spelling_that_sets_it(form) -> None:
    config = form(
        structured_outputs_config={"backend": "guidance"},
        structured_outputs_backend="xgrammar",
    )
    assert config.structured_outputs_backend == "xgrammar"
    config = form(kv_offloading_size=0.5, kv_offload_host_bytes=2**20)
    assert (config.kv_connector, config.kv_offload_host_bytes) == ("offload", 2**20)


@pytest.mark.parametrize("form", FORMS)
def test_later_spellings_override_earlier_ones_in_the_documented_order(form) -> None:
    transfer = {
        "kv_connector": "OffloadingConnector",
        "kv_connector_extra_config": {"host_bytes": "1GiB", "disk_dir": "/tmp/kv"},
    }
    config = form(kv_transfer_config=transfer, kv_offloading_size=0.5)
    assert config.kv_offload_host_bytes == 2**29  # kv_offloading_size comes later
    assert config.kv_offload_disk_dir == "/tmp/kv"  # set by kv_transfer_config alone
    assert list(args.SPELLINGS).index("kv_transfer_config") < list(args.SPELLINGS).index(
        "kv_offloading_size"
    )


@pytest.mark.parametrize("form", FORMS)
def test_worker_extension_cls_reaches_the_engine_config_in_every_form(form) -> None:
    path = "tests.helpers.worker_extension.ProbeExtension"
    assert form(worker_extension_cls=path).worker_extension_cls == path


@pytest.mark.parametrize("form", FORMS)
def test_kv_offloading_size_is_gib_of_host_memory_in_every_form(form) -> None:
    config = form(kv_offloading_size=2)
    assert (config.kv_connector, config.kv_offload_host_bytes) == ("offload", 2 * 2**30)


@pytest.mark.parametrize("form", FORMS)
def test_data_parallel_size_local_sets_or_must_equal_the_size(form) -> None:
    assert form(data_parallel_size_local=1).data_parallel_size == 1
    assert form(data_parallel_size_local=1, data_parallel_size=1).data_parallel_size == 1
    with pytest.raises(EngineConfigError) as info:
        form(data_parallel_size_local=1, data_parallel_size=2)
    assert info.value.param == "data_parallel_size_local"


@pytest.mark.parametrize("form", FORMS)
def test_vllm_cpu_kvcache_space_reaches_the_worker_under_an_explicit_size(
    form, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``LLM(...)``, ``EngineArgs`` and ``serve`` flags: the environment's size (whole GiB)
    reaches the rank's spec unless ``kv_cache_memory_bytes`` is given, as in vLLM."""
    from actorllm.engine.actors.startup import rank_spec

    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "2")
    monkeypatch.delenv("ACTORLLM_CPU_KVCACHE_SPACE", raising=False)
    assert rank_spec(form(device="cpu")).kv_cache_bytes == 2 * 2**30
    assert rank_spec(form(device="cpu", kv_cache_memory_bytes=2**29)).kv_cache_bytes == 2**29
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "two")
    with pytest.raises(EngineConfigError, match="VLLM_CPU_KVCACHE_SPACE"):
        rank_spec(form(device="cpu"))


def test_keywords_with_an_engine_config_replace_its_fields() -> None:
    base = EngineConfig(max_num_seqs=4, max_model_len=128)
    config = args.engine_config(base, max_num_seqs=8, kv_offloading_size=0.5)
    assert (config.max_num_seqs, config.max_model_len) == (8, 128)
    assert config.kv_offload_host_bytes == 2**29
    assert args.engine_config(base) is base


def test_the_hf_token_is_exported_by_its_one_function_never_by_a_config(monkeypatch) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    _keywords(hf_token="hf_secret")
    _engine_args(hf_token="hf_secret")
    assert "HF_TOKEN" not in os.environ  # building a config exports nothing
    assert EngineArgs(hf_token="hf_secret").hf_token == "hf_secret"
    args.export_hf_token(True)  # the saved token: huggingface_hub's default
    assert "HF_TOKEN" not in os.environ
    args.export_hf_token("hf_secret")
    assert os.environ["HF_TOKEN"] == "hf_secret"


def test_tool_calling_settings_are_accepted_and_left_to_the_server() -> None:
    engine_args = EngineArgs(enable_auto_tool_choice=True, tool_call_parser="hermes")
    assert engine_args.tool_call_parser == "hermes"
    assert not hasattr(engine_args.create_engine_config(), "tool_call_parser")
    assert EngineArgs().tool_call_parser is None
    with pytest.raises(EngineConfigError, match="tool_call_parser"):
        _keywords(enable_auto_tool_choice=True)


def test_the_native_door_takes_engine_config_fields_only() -> None:
    assert _as_config(None, {"max_num_seqs": 8}).max_num_seqs == 8
    nested = _as_config(None, {"structured_outputs_config": {"backend": "guidance"}})
    assert nested.structured_outputs_backend == "guidance"
    for name, value in (("trust_remote_code", True), ("kv_offloading_size", 1)):
        with pytest.raises(TypeError, match=f"'{name}'.*actorllm.compat.vllm"):
            _as_config(None, {name: value})
