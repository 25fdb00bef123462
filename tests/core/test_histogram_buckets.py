"""``--custom-histogram-buckets``: vLLM's bucket families, checked by vLLM's rules, and the
bounds they give the request histograms and /metrics."""

from __future__ import annotations

from typing import Any

import pytest

from actorllm.compat.vllm.args import engine_config
from actorllm.core.histogram_buckets import FAMILIES, check_custom_buckets
from actorllm.core.request_stats import RequestStats
from actorllm.engine.config.engine_config import EngineConfig, EngineConfigError
from actorllm.engine.metrics.prometheus import ServerMetrics
from actorllm.entrypoints import cli
from actorllm.entrypoints.commands.engine_args import engine_config as flags_config


def test_a_family_replaces_the_bounds_of_each_of_its_histograms() -> None:
    stats = RequestStats(100, {"request_latency": [1, 10], "request_tokens": [8, 64]})
    histograms = stats.snapshot().histograms
    for name in FAMILIES["request_latency"]:
        assert histograms[name].bounds == (1.0, 10.0)
    assert histograms["request_prompt_tokens"].bounds == (8.0, 64.0)
    # families not given keep vLLM's defaults
    assert (
        histograms["request_params_n"].bounds
        == RequestStats(100).snapshot().histograms["request_params_n"].bounds
    )


def test_metrics_render_the_custom_iteration_token_buckets() -> None:
    config = EngineConfig(custom_histogram_buckets={"iteration_tokens": [4, 8]})
    text = ServerMetrics("m", prefix="vllm", cache_config=config).render().decode()
    bounds = [
        line.split('le="')[1].split('"')[0]
        for line in text.splitlines()
        if line.startswith("vllm:iteration_tokens_total_bucket")
    ]
    assert bounds == ["4.0", "8.0", "+Inf"]


@pytest.mark.parametrize(
    ("custom", "said"),
    [
        ({"request_latncy": [1.0]}, "unknown bucket family"),
        ({"request_latency": []}, "non-empty"),
        ({"request_latency": [2, 1]}, "strictly increasing"),
        ({"request_latency": [0, 1]}, "finite and positive"),
        ({"request_latency": [True]}, "must be a number"),
        ({"kv_cache_residency": [1.0]}, "not collected"),
    ],
)
def test_bad_buckets_are_refused_naming_the_family(custom: dict[str, Any], said: str) -> None:
    with pytest.raises(ValueError, match=said):
        check_custom_buckets(custom)
    with pytest.raises(EngineConfigError, match="custom_histogram_buckets"):
        EngineConfig(custom_histogram_buckets=custom)


def test_the_serve_flag_and_the_engine_keyword_set_it() -> None:
    text = '{"time_to_first_token": [0.1, 1]}'
    args = cli.build_parser().parse_args(["serve", "--custom-histogram-buckets", text])
    assert flags_config(args).custom_histogram_buckets == {"time_to_first_token": [0.1, 1]}
    config = engine_config(None, custom_histogram_buckets={"time_to_first_token": [0.1, 1]})
    assert config.custom_histogram_buckets == {"time_to_first_token": [0.1, 1]}
