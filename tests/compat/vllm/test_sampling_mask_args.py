"""--return-sampling-mask and --logprobs-mode in vLLM's three spellings (keywords,
EngineArgs, the command line), vLLM's rule that ties them, and what is refused by name."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from actorllm import EngineArgs, EngineConfig
from actorllm.compat.vllm import args
from actorllm.compat.vllm.cli_args import add_engine_arguments, engine_config
from actorllm.engine.config.engine_config import EngineConfigError

ON = {"return_sampling_mask": True, "logprobs_mode": "processed_logprobs"}


def _keywords(**kw: Any) -> EngineConfig:
    return args.engine_config(None, **kw)


def _engine_args(**kw: Any) -> EngineConfig:
    return EngineArgs(**kw).create_engine_config()


def _command_line(**kw: Any) -> EngineConfig:
    argv: list[str] = []
    if kw.get("return_sampling_mask"):
        argv.append("--return-sampling-mask")
    if "logprobs_mode" in kw:
        argv += ["--logprobs-mode", kw["logprobs_mode"]]
    if "speculative_config" in kw:
        argv += ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 2}']
    parser = argparse.ArgumentParser()
    add_engine_arguments(parser, model_positional=False)
    return engine_config(parser.parse_args(argv))


FORMS = [_keywords, _engine_args, _command_line]


@pytest.mark.parametrize("form", FORMS)
def test_the_flags_reach_the_engine(form) -> None:
    config = form(**ON)
    assert config.return_sampling_mask is True
    assert config.logprobs_mode == "processed_logprobs"
    plain = form()
    assert (plain.return_sampling_mask, plain.logprobs_mode) == (False, "raw_logprobs")


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(
    ("config", "field", "words"),
    [
        ({"return_sampling_mask": True}, "return_sampling_mask",
         "requires logprobs_mode='processed_logprobs'"),
        ({"logprobs_mode": "processed_logprobs"}, "logprobs_mode",
         "built only with return_sampling_mask"),
        ({"logprobs_mode": "raw_logits"}, "logprobs_mode", "must be one of"),
        ({**ON, "speculative_config": {"method": "ngram", "num_speculative_tokens": 2}},
         "return_sampling_mask", "not built with speculative_config"),
    ],
)  # fmt: skip
def test_refusals_name_the_field(form, config: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(EngineConfigError, match=field) as info:
        form(**config)
    assert words in str(info.value)
