"""--watermark-config in vLLM's three spellings (keywords, EngineArgs, the command line's
JSON), its checks naming the field at fault, and vLLM's refusal beside speculative
decoding."""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest

from actorllm import EngineArgs, EngineConfig
from actorllm.compat.vllm import args
from actorllm.compat.vllm.cli_args import add_engine_arguments, engine_config
from actorllm.config import WatermarkConfig
from actorllm.engine.config.engine_config import EngineConfigError


def _keywords(**kw: Any) -> EngineConfig:
    return args.engine_config(None, **kw)


def _engine_args(**kw: Any) -> EngineConfig:
    return EngineArgs(**kw).create_engine_config()


def _command_line(**kw: Any) -> EngineConfig:
    argv: list[str] = []
    for name, value in kw.items():
        argv += ["--" + name.replace("_", "-"), json.dumps(value)]
    parser = argparse.ArgumentParser()
    add_engine_arguments(parser, model_positional=False)
    return engine_config(parser.parse_args(argv))


FORMS = [_keywords, _engine_args, _command_line]


@pytest.mark.parametrize("form", FORMS)
def test_the_config_reaches_the_engine_with_vllms_defaults(form) -> None:
    config = form(watermark_config={"key": 1234, "algorithm": "dual_key_gumbel"}).watermarking()
    assert config == WatermarkConfig(key=1234, algorithm="dual_key_gumbel")
    assert (config.alpha, config.context_width, config.prf) == (0.1, 4, "philox")
    assert config.deduplicate_contexts == "single_turn"
    assert config.deduplicate_contexts_max_history == 8192
    assert config.allow_target_only_watermarking is False


def test_a_config_object_and_its_json_mean_the_dict() -> None:
    given = WatermarkConfig(key=7, context_width=2)
    assert _keywords(watermark_config=given).watermarking() == given
    as_json = _keywords(watermark_config='{"key": 7, "context_width": 2}')
    assert as_json.watermarking() == given


def test_no_config_is_no_watermark() -> None:
    assert _keywords().watermarking() is None


@pytest.mark.parametrize(
    ("fields", "param", "words"),
    [
        ({"key": 2**64}, "key", "philox keys must fit in 64 bits"),
        ({"key": -1}, "key", "greater than or equal to 0"),
        ({}, "key", "Field required"),
        ({"key": 1, "algorithm": "kgw"}, "algorithm", "'gumbel' or 'dual_key_gumbel'"),
        ({"key": 1, "alpha": 2}, "alpha", "less than or equal to 1"),
        ({"key": 1, "context_width": 0}, "context_width", "greater than or equal to 1"),
        ({"key": 1, "deduplicate_contexts": "x"}, "deduplicate_contexts", "'single_turn'"),
        ({"key": 1, "deduplicate_contexts_max_history": 0}, "deduplicate_contexts_max_history",
         "greater than or equal to 1"),
        ({"key": 1, "prf": "aes"}, "prf", "Input should be 'philox'"),
        ({"key": 1, "colour": 2}, "colour", "Unexpected keyword argument"),
        ({"key": 1.5}, "key", "fractional part"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("form", FORMS)
def test_bad_fields_are_refused_naming_them(form, fields, param: str, words: str) -> None:
    """vLLM's pydantic sentences (WatermarkConfig's ValidationError), under the flag."""
    with pytest.raises(EngineConfigError, match="watermark_config") as info:
        form(watermark_config=fields)
    assert f"\n{param}\n" in str(info.value) and words in str(info.value)


def test_lax_spellings_are_coerced_as_pydantic_does() -> None:
    assert WatermarkConfig(key="12").key == 12  # type: ignore[arg-type]
    assert WatermarkConfig(key=1, context_width=3.0).context_width == 3  # type: ignore[arg-type]
    assert WatermarkConfig(key=2**64 - 1).key == 2**64 - 1


def test_the_key_is_kept_out_of_repr() -> None:
    assert "1234" not in repr(WatermarkConfig(key=1234))


def test_a_short_deduplication_history_warns_once_as_vllm(caplog, monkeypatch) -> None:
    from actorllm.core import watermark_config

    monkeypatch.setattr(watermark_config, "_warned", [])
    WatermarkConfig(key=1, deduplicate_contexts_max_history=16)
    WatermarkConfig(key=1, deduplicate_contexts="none")
    assert caplog.text.count("repetition loops") == 1


def test_speculative_decoding_is_refused_with_vllms_first_rule() -> None:
    spec = {"method": "ngram", "num_speculative_tokens": 2}
    with pytest.raises(EngineConfigError, match="draft_sample_method='probabilistic'"):
        _keywords(watermark_config={"key": 1}, speculative_config=spec)
    with pytest.raises(EngineConfigError, match="draft_sample_method='probabilistic'"):
        _keywords(
            watermark_config={"key": 1, "algorithm": "dual_key_gumbel"},
            speculative_config={**spec, "method": "ngram"},
        )
