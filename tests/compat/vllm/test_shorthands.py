"""vLLM 0.32's shorthands set the fields they name, in every form (keywords, EngineArgs,
flags), with vLLM's checks."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable

import pytest

from actorllm import EngineConfig
from actorllm.compat.vllm import args
from actorllm.compat.vllm.cli_args import describe_error
from actorllm.compat.vllm.shorthands import human_int
from actorllm.engine.config.engine_config import EngineConfigError
from tests.compat.vllm.test_args import FORMS

Form = Callable[..., EngineConfig]


@pytest.mark.parametrize("form", FORMS)
def test_spec_flags_are_keys_of_speculative_config(form: Form) -> None:
    config = form(spec_method="ngram", spec_tokens=3)
    assert config.speculative_config == {"method": "ngram", "num_speculative_tokens": 3}
    spec = config.speculative()
    assert spec is not None and spec.num_speculative_tokens == 3
    config = form(speculative_config={"method": "ngram"}, spec_tokens=2)
    assert config.speculative_config == {"method": "ngram", "num_speculative_tokens": 2}


@pytest.mark.parametrize("form", FORMS)
def test_a_spec_key_given_both_ways_is_refused_naming_the_shorthand(form: Form) -> None:
    with pytest.raises(EngineConfigError, match="spec_method"):
        form(speculative_config={"method": "ngram"}, spec_method="ngram")


@pytest.mark.parametrize("form", FORMS)
def test_max_num_active_seqs_caps_the_running_requests(form: Form) -> None:
    assert form(max_num_active_seqs=4).max_num_seqs == 4
    assert form(max_num_seqs=8, max_num_active_seqs=8).max_num_seqs == 8
    with pytest.raises(EngineConfigError, match="max_num_seqs"):
        form(max_num_seqs=8, max_num_active_seqs=9)


@pytest.mark.parametrize("form", FORMS)
def test_max_num_active_seqs_above_max_num_seqs_is_vllms_value_error(form: Form) -> None:
    """vLLM 0.32's SchedulerConfig check (config/scheduler.py): its words, a ValueError,
    against the given max_num_seqs or, without one, the default (vLLM's 256 offline on a
    CPU, arg_utils.py's get_batch_defaults)."""
    words = "max_num_active_seqs ({}) cannot be greater than max_num_seqs ({})."
    with pytest.raises(ValueError, match=re.escape(words.format(9, 8))):
        form(max_num_seqs=8, max_num_active_seqs=9)
    with pytest.raises(ValueError, match=re.escape(words.format(257, 256))):
        form(max_num_active_seqs=257)
    assert form(max_num_active_seqs=256).max_num_seqs == 256


def test_max_num_active_seqs_over_an_engine_config_is_bounded_by_its_max_num_seqs() -> None:
    """``LLM(config, max_num_active_seqs=n)``: the config's max_num_seqs bounds n (not the
    default, which would raise the config's 8 to 16)."""
    config = EngineConfig(max_num_seqs=8)
    assert args.engine_config(config, max_num_active_seqs=4).max_num_seqs == 4
    with pytest.raises(EngineConfigError, match=re.escape("max_num_seqs (8).")):
        args.engine_config(config, max_num_active_seqs=16)
    with pytest.raises(EngineConfigError, match=re.escape("max_num_batched_tokens (512).")):
        args.engine_config(EngineConfig(max_num_batched_tokens=512), max_num_scheduled_tokens=1024)
    both = args.engine_config(config, max_num_seqs=32, max_num_active_seqs=16)
    assert both.max_num_seqs == 16  # a max_num_seqs given beside it wins over the config's


@pytest.mark.parametrize("form", FORMS)
def test_max_num_scheduled_tokens_is_the_step_budget(form: Form) -> None:
    assert form(max_num_scheduled_tokens=512).max_num_batched_tokens == 512
    assert (
        form(max_num_batched_tokens=1024, max_num_scheduled_tokens=256).max_num_batched_tokens
        == 256
    )
    with pytest.raises(EngineConfigError, match="max_num_batched_tokens"):
        form(max_num_batched_tokens=256, max_num_scheduled_tokens=512)


@pytest.mark.parametrize("form", FORMS)
def test_distributed_timeouts_are_the_collective_timeout(form: Form) -> None:
    assert form(distributed_timeout_seconds=30).tp_collective_timeout_s == 30.0
    config = form(distributed_timeout_seconds=30, cpu_distributed_timeout_seconds=90)
    assert config.tp_collective_timeout_s == 90.0


def test_the_collective_timeout_by_its_own_name_wins() -> None:
    config = args.engine_config(
        None, cpu_distributed_timeout_seconds=90, tp_collective_timeout_s=5.0
    )
    assert config.tp_collective_timeout_s == 5.0


@pytest.mark.parametrize(
    ("text", "value"), [("2048", 2048), ("2k", 2000), ("2K", 2048), ("25.6k", 25600)]
)
def test_human_int_reads_vllms_suffixes(text: str, value: int) -> None:
    assert human_int(text) == value


def test_human_int_refuses_decimals_with_binary_suffixes() -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        human_int("1.5K")


def test_the_cli_error_names_the_flag() -> None:
    with pytest.raises(EngineConfigError) as info:
        args.translate({"max_num_seqs": 2, "max_num_active_seqs": 3})
    assert describe_error(info.value).startswith("--max-num-active-seqs")
