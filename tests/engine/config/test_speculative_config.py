"""speculative_config: vLLM's keys and defaults; everything not built is refused by name,
from EngineConfig, LLM-style keywords and the command line."""

from __future__ import annotations

import pytest

from actorllm.compat.vllm.args import engine_config
from actorllm.engine.config.engine_config import EngineConfig, EngineConfigError
from actorllm.engine.config.speculative import parse_speculative_config


def test_ngram_defaults_as_vllm() -> None:
    c = parse_speculative_config({"method": "ngram", "num_speculative_tokens": 4})
    assert (c.prompt_lookup_min, c.prompt_lookup_max) == (5, 5)
    c = parse_speculative_config(
        {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3}
    )
    assert (c.prompt_lookup_min, c.prompt_lookup_max) == (3, 3)
    c = parse_speculative_config({"model": "[ngram]", "num_speculative_tokens": 2,
                                  "prompt_lookup_min": 2, "prompt_lookup_max": 4})  # fmt: skip
    assert (c.method, c.prompt_lookup_min, c.prompt_lookup_max) == ("ngram", 2, 4)
    assert EngineConfig(speculative_config={}).speculative() is None  # asks for nothing


@pytest.mark.parametrize(
    ("value", "names"),
    [
        ({"method": "nonsense", "num_speculative_tokens": 2}, "unknown method 'nonsense'"),
        ({"method": "ngram", "num_speculative_tokens": 0}, "num_speculative_tokens"),
        ({"method": "ngram", "num_speculative_tokens": -1}, "num_speculative_tokens"),
        ({"method": "ngram"}, "num_speculative_tokens is required"),
        ({"method": "mtp", "num_speculative_tokens": 2}, "method 'mtp'"),
        ({"method": "deepseek_mtp", "num_speculative_tokens": 2}, "method 'deepseek_mtp'"),
        ({"method": "eagle3", "num_speculative_tokens": 2}, "needs model: the EAGLE head"),
        ({"method": "draft_model", "num_speculative_tokens": 2}, "needs model"),
        ({"method": "eagle", "num_speculative_tokens": 2}, "needs model: the EAGLE head"),
        ({"model": "/x", "num_speculative_tokens": 2, "prompt_lookup_max": 3}, "ngram setting"),
        (
            {
                "method": "ngram",
                "num_speculative_tokens": 2,
                "draft_sample_method": "probabilistic",
            },
            "draft_sample_method",
        ),
        (
            {
                "method": "ngram",
                "num_speculative_tokens": 2,
                "rejection_sample_method": "synthetic",
            },
            "rejection_sample_method",
        ),
        ({"method": "ngram", "num_speculative_tokens": 2, "bogus": 1}, "'bogus'"),
        (
            {
                "method": "ngram",
                "num_speculative_tokens": 2,
                "prompt_lookup_min": 4,
                "prompt_lookup_max": 2,
            },
            "prompt_lookup_min=4",
        ),
        (
            {"method": "ngram", "num_speculative_tokens": 2, "draft_tensor_parallel_size": 2},
            "draft_tensor_parallel_size",
        ),
    ],
)
def test_refused_by_name(value: dict, names: str) -> None:
    with pytest.raises(EngineConfigError, match="speculative_config") as info:
        EngineConfig(speculative_config=value)
    assert names in str(info.value)


def test_suffix_defaults_as_vllm() -> None:
    """vLLM's defaults; num_speculative_tokens defaults to the tree depth."""
    c = parse_speculative_config({"method": "suffix"})
    assert (c.method, c.num_speculative_tokens) == ("suffix", 24)
    assert (c.suffix_decoding_max_tree_depth, c.suffix_decoding_max_cached_requests) == (
        24, 10000)  # fmt: skip
    assert (c.suffix_decoding_max_spec_factor, c.suffix_decoding_min_token_prob) == (1.0, 0.1)
    c = parse_speculative_config({"method": "suffix", "suffix_decoding_max_tree_depth": 8,
                                  "suffix_decoding_max_cached_requests": 0,
                                  "suffix_decoding_max_spec_factor": 2,
                                  "suffix_decoding_min_token_prob": 0.5})  # fmt: skip
    assert c.num_speculative_tokens == 8
    assert (c.suffix_decoding_max_cached_requests, c.suffix_decoding_max_spec_factor) == (0, 2.0)
    assert c.suffix_decoding_min_token_prob == 0.5
    c = parse_speculative_config({"method": "suffix", "num_speculative_tokens": 5,
                                  "suffix_decoding_max_tree_depth": 8})  # fmt: skip
    assert c.num_speculative_tokens == 5


@pytest.mark.parametrize(
    ("value", "names"),
    [  # vLLM's messages (config/speculative.py, _validate_suffix_decoding)
        ({"suffix_decoding_max_tree_depth": 0}, "suffix_decoding_max_tree_depth=0 must be >= 1"),
        (
            {"suffix_decoding_max_cached_requests": -1},
            "suffix_decoding_max_cached_requests=-1 must be >= 0",
        ),
        (
            {"suffix_decoding_max_spec_factor": -0.5},
            "suffix_decoding_max_spec_factor=-0.5 must be >= 0",
        ),
        (
            {"suffix_decoding_min_token_prob": 1.5},
            "suffix_decoding_min_token_prob=1.5 must be in [0, 1]",
        ),
        ({"suffix_decoding_max_tree_depth": 2.5}, "must be an integer"),
        ({"suffix_decoding_min_token_prob": "x"}, "must be a number"),
        ({"num_speculative_tokens": 0}, "num_speculative_tokens"),
        ({"model": "/x"}, "takes no draft model"),
        ({"prompt_lookup_max": 3}, "ngram setting"),
    ],
)
def test_suffix_refused_as_vllm(value: dict, names: str) -> None:
    with pytest.raises(EngineConfigError, match="speculative_config") as info:
        EngineConfig(speculative_config={"method": "suffix", **value})
    assert names in str(info.value)


def test_suffix_keys_belong_to_suffix() -> None:
    """At vLLM's defaults they ask for nothing; other values are refused elsewhere."""
    ok = {"method": "ngram", "num_speculative_tokens": 2, "suffix_decoding_max_tree_depth": 24}
    assert parse_speculative_config(ok).method == "ngram"
    with pytest.raises(EngineConfigError, match="suffix decoding setting"):
        parse_speculative_config({**ok, "suffix_decoding_max_tree_depth": 8})


def test_draft_model_as_vllm() -> None:
    c = parse_speculative_config({"model": "/d", "num_speculative_tokens": 2})
    assert (c.method, c.model, c.num_speculative_tokens) == ("draft_model", "/d", 2)


def test_eagle_as_vllm() -> None:
    c = parse_speculative_config({"method": "eagle", "model": "/h", "num_speculative_tokens": 3})
    assert (c.method, c.model, c.num_speculative_tokens) == ("eagle", "/h", 3)
    # vLLM's guess from the name when no method is given
    c = parse_speculative_config({"model": "/x/EAGLE-LLaMA3-8B", "num_speculative_tokens": 2})
    assert c.method == "eagle"
    c = parse_speculative_config({"model": "/x/EAGLE3-LLaMA3.1-8B", "num_speculative_tokens": 2})
    assert (c.method, c.model) == ("eagle3", "/x/EAGLE3-LLaMA3.1-8B")
    c = parse_speculative_config(
        {"method": "draft_model", "model": "/d", "num_speculative_tokens": 4,
         "draft_tensor_parallel_size": 1}
    )  # fmt: skip
    assert (c.method, c.model) == ("draft_model", "/d")


@pytest.mark.parametrize(
    ("model", "method"),
    [
        ("/x/my_eagle_head", "draft_model"),  # vLLM looks for "eagle-", not "eagle"
        ("/x/EAGLE-LLaMA3-8B", "eagle"),
        ("AngelSlim/Qwen3-8B_eagle3", "eagle3"),
        ("/x/tiny-llama", "draft_model"),
    ],
)
def test_method_guessed_from_the_name_as_vllm(model: str, method: str) -> None:
    c = parse_speculative_config({"model": model, "num_speculative_tokens": 2})
    assert c.method == method
    # vLLM's guess also overrides a given "draft_model"
    c = parse_speculative_config(
        {"method": "draft_model", "model": model, "num_speculative_tokens": 2}
    )
    assert c.method == method


@pytest.mark.parametrize(
    ("model", "names"),
    [
        ("my_pkg.MyProposer", "method 'custom_class'"),  # vLLM: a custom proposer class
        ("/x/dflash_qwen3_8b", "method 'dflash'"),
        ("deepseek-ai/dspark_qwen3_8b_block7", "method 'dspark'"),
    ],
)
def test_methods_vllm_guesses_are_refused_by_name(model: str, names: str) -> None:
    with pytest.raises(EngineConfigError, match="speculative_config") as info:
        parse_speculative_config({"model": model, "num_speculative_tokens": 2})
    assert names in str(info.value)


def test_async_scheduling_with_speculation_is_refused() -> None:
    spec = {"method": "ngram", "num_speculative_tokens": 2}
    with pytest.raises(EngineConfigError, match="async_scheduling"):
        EngineConfig(speculative_config=spec, async_scheduling=True)
    with pytest.raises(EngineConfigError, match="tensor_parallel_size"):
        EngineConfig(speculative_config=spec, tensor_parallel_size=2)


def test_llm_keywords_and_json_text() -> None:
    c = engine_config("/m", speculative_config={"method": "ngram", "num_speculative_tokens": 3})
    assert c.speculative() is not None and c.speculative().num_speculative_tokens == 3  # type: ignore[union-attr]


def test_command_line_flag() -> None:
    import argparse

    from actorllm.compat.vllm.args import namespace_kwargs
    from actorllm.compat.vllm.cli_args import add_engine_arguments

    parser = argparse.ArgumentParser()
    add_engine_arguments(parser)
    args = parser.parse_args(
        ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4}']
    )
    config = EngineConfig(**namespace_kwargs(args))
    assert config.speculative() is not None
