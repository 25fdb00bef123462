"""vLLM's ``structured_outputs_config``: every key honoured or refused by name, from
``AsyncEngine.open`` / ``LLM`` keyword arguments and from the command line."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from actorllm.core.structured_outputs_params import StructuredOutputsParams as SOP
from actorllm.engine.api.async_engine import _as_config
from actorllm.engine.config.engine_config import EngineConfigError
from actorllm.engine.config.structured_outputs_config import structured_outputs_config_kwargs
from actorllm.engine.scheduling.structured_outputs import structured_outputs_for
from actorllm.entrypoints import cli
from actorllm.entrypoints.commands.engine_args import engine_kwargs
from tests.helpers.tokenizers import ENDOFTEXT_ID, VOCAB_SIZE, hf_demo_tokenizer


@dataclass
class VllmLikeConfig:  # vLLM's StructuredOutputsConfig is a dataclass
    backend: str = "auto"
    disable_fallback: bool = False
    disable_any_whitespace: bool = False
    disable_additional_properties: bool = False
    reasoning_parser: str = ""
    reasoning_parser_plugin: str = ""
    enable_in_reasoning: bool = False


def test_every_key_maps_to_a_setting() -> None:
    config = _as_config(None, {"structured_outputs_config": {
        "backend": "guidance", "disable_any_whitespace": True,
        "disable_additional_properties": True, "reasoning_parser": "qwen3",
        "enable_in_reasoning": True,
    }})  # fmt: skip
    assert config.structured_outputs_backend == "guidance"
    assert config.structured_outputs_disable_any_whitespace
    assert config.structured_outputs_disable_additional_properties
    assert config.reasoning_parser == "qwen3" and config.structured_outputs_enable_in_reasoning
    assert structured_outputs_config_kwargs({"disable_fallback": True}) == {
        "structured_outputs_backend": "xgrammar"  # auto without its fallback
    }
    assert structured_outputs_config_kwargs(VllmLikeConfig(backend="xgrammar")) == {
        "structured_outputs_backend": "xgrammar",
        "structured_outputs_disable_any_whitespace": False,
        "structured_outputs_disable_additional_properties": False,
        "structured_outputs_enable_in_reasoning": False,
    }


@pytest.mark.parametrize(
    ("value", "param"),
    [
        ({"backend": "outlines"}, "structured_outputs_config.backend"),
        ({"reasoning_parser_plugin": "my.py"}, "structured_outputs_config.reasoning_parser_plugin"),
        ({"disable_any_whitespace": "yes"}, "structured_outputs_config.disable_any_whitespace"),
        ({"whatever": 1}, "structured_outputs_config.whatever"),
    ],
)
def test_what_cannot_be_honoured_is_refused_by_name(value: dict, param: str) -> None:
    with pytest.raises(EngineConfigError) as info:
        _as_config(None, {"structured_outputs_config": value})
    assert info.value.param == param


def test_command_line_spellings() -> None:
    def kwargs(*argv: str) -> dict:
        return engine_kwargs(cli.build_parser().parse_args(["serve", *argv]))

    assert kwargs("--structured-outputs-config", '{"backend": "guidance"}') == {
        "structured_outputs_backend": "guidance"
    }
    for flag in ("--structured-outputs-config.backend", "--guided-decoding-backend"):
        assert kwargs(flag, "xgrammar") == {"structured_outputs_backend": "xgrammar"}
    with pytest.raises(argparse.ArgumentTypeError, match="backend"):
        from actorllm.entrypoints.commands.engine_args import structured_outputs_config

        structured_outputs_config('{"backend": "outlines"}')


def test_engine_wide_options_reach_the_compiler() -> None:
    config = _as_config(None, {"structured_outputs_config": {
        "disable_additional_properties": True, "reasoning_parser": "qwen3",
        "enable_in_reasoning": True,
    }})  # fmt: skip
    model = SimpleNamespace(vocab_size=VOCAB_SIZE, eos_token_ids=[ENDOFTEXT_ID])
    svc = structured_outputs_for(config, hf_demo_tokenizer(), model)
    try:
        assert svc.reasoning_markers is None  # the reasoning is constrained too
        so = SOP(json={"type": "object", "properties": {"a": {"type": "integer"}}})
        compiler = svc.compiler
        compiler.submit(so.key, "guidance").result()
        keys = [k for k, _ in compiler._cache]
        assert keys[-1].disable_additional_properties
    finally:
        svc.shutdown()
