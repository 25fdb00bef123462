"""``async_scheduling``: unset means on, except where the engine keeps one step in flight,
as vLLM 0.32 resolves None; an explicit value always wins (and is checked)."""

from __future__ import annotations

import pytest

from actorllm.engine.config import EngineConfig, EngineConfigError

NGRAM = {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3}


def test_unset_is_on_for_a_generative_model() -> None:
    cfg = EngineConfig()
    assert cfg.async_scheduling is None
    assert cfg.resolved_async_scheduling(pooling=False) is True


@pytest.mark.parametrize(
    ("fields", "pooling"),
    [
        ({}, True),  # a pooling model: nothing to overlap with
        ({"speculative_config": NGRAM}, False),  # drafts come from the previous step's tokens
        ({"pipeline_parallel_size": 2}, False),  # a batch per stage instead
    ],
)
def test_unset_is_off_where_steps_cannot_overlap(fields: dict, pooling: bool) -> None:
    assert EngineConfig(**fields).resolved_async_scheduling(pooling=pooling) is False


@pytest.mark.parametrize("value", [True, False])
def test_an_explicit_value_wins(value: bool) -> None:
    cfg = EngineConfig(async_scheduling=value)
    assert cfg.resolved_async_scheduling(pooling=False) is value
    assert cfg.resolved_async_scheduling(pooling=True) is value


def test_explicitly_on_is_still_refused_with_speculation_and_pipeline_parallel() -> None:
    with pytest.raises(EngineConfigError, match="async_scheduling"):
        EngineConfig(speculative_config=NGRAM, async_scheduling=True)
    with pytest.raises(EngineConfigError, match="async_scheduling"):
        EngineConfig(pipeline_parallel_size=2, async_scheduling=True)
