"""vLLM's ``reasoning_config``: the markers a thinking budget counts and forces, from the
reasoning parser's defaults or the config's strings, from the command line too; every key
honoured or refused by name."""

from __future__ import annotations

import pytest

from actorllm.core.thinking_budget import ThinkingMarkers
from actorllm.engine.config.engine_config import EngineConfig, EngineConfigError
from actorllm.engine.config.reasoning_config import thinking_markers
from actorllm.entrypoints import cli
from actorllm.entrypoints.commands.engine_args import engine_kwargs
from actorllm.testing.engine_harness import demo_tokenizer


def _ids(text: str) -> tuple[int, ...]:
    return tuple(demo_tokenizer().encode(text, add_special_tokens=False))


def test_the_parser_alone_gives_its_markers() -> None:
    markers = thinking_markers(None, "qwen3", demo_tokenizer())
    assert markers == ThinkingMarkers(start=_ids("<think>"), end=_ids("</think>"))


def test_the_config_strings_win_over_the_parser() -> None:
    value = {"reasoning_end_str": "Time to answer.</think>"}
    markers = thinking_markers(value, "qwen3", demo_tokenizer())
    assert markers is not None and markers.end == _ids("Time to answer.</think>")
    assert markers.start == _ids("<think>")


def test_no_markers_without_both_strings() -> None:
    tok = demo_tokenizer()
    assert thinking_markers(None, None, tok) is None
    assert thinking_markers({"reasoning_start_str": "<think>"}, None, tok) is None
    assert thinking_markers(None, "openai_gptoss", tok) is None  # channels, not a block
    both = {"reasoning_start_str": "<a>", "reasoning_end_str": "</a>"}
    assert thinking_markers(both, None, tok) == ThinkingMarkers(start=_ids("<a>"), end=_ids("</a>"))


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ({"reasoning_start": "<t>"}, "reasoning_start is not a reasoning config setting"),
        ({"reasoning_end_str": 3}, "reasoning_end_str must be a string"),
        ({"reasoning_parser": "deepseek_r1"}, "differs from --reasoning-parser 'qwen3'"),
    ],
)
def test_wrong_keys_are_refused_by_name(value: dict[str, object], words: str) -> None:
    with pytest.raises(EngineConfigError, match=words) as err:
        EngineConfig(reasoning_config=value, reasoning_parser="qwen3")
    assert err.value.param == "reasoning_config"


def test_the_flag_takes_json() -> None:
    args = cli.build_parser().parse_args(
        ["serve", "--reasoning-config", '{"reasoning_end_str": "</think>"}']
    )
    assert engine_kwargs(args)["reasoning_config"] == {"reasoning_end_str": "</think>"}
