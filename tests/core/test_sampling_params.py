"""SamplingParams takes vLLM's fields: honoured (truncate_prompt_tokens) or refused by name
when asking for what this engine cannot do (best_of != n, logits processors)."""

from __future__ import annotations

from typing import Any

import pytest

from actorllm.core.sampling_params import SamplingParams, SamplingParamsError


def test_offline_sampling_params_take_vllms_fields() -> None:
    p = SamplingParams(n=2, best_of=2, truncate_prompt_tokens=3)
    assert p.truncate_prompt([1, 2, 3, 4, 5], max_model_len=64) == [3, 4, 5]
    assert SamplingParams(truncate_prompt_tokens=-1).truncate_prompt(list(range(9)), 4) == [6, 7, 8]
    for bad in ({"best_of": 3}, {"truncate_prompt_tokens": 0}, {"logits_processors": [print]}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            SamplingParams(**bad)


def test_clone_is_deep_unless_skip_clone() -> None:
    p = SamplingParams(stop=["x"], logit_bias={1: 2.0})
    deep = p.clone()
    assert deep == p and deep is not p
    assert deep.stop is not p.stop and deep.logit_bias is not p.logit_bias
    shallow = SamplingParams(stop=["x"], skip_clone=True)
    q = shallow.clone()
    assert q == shallow and q is not shallow and q.skip_clone
    assert q.stop is shallow.stop  # shared: a shallow copy
    assert p.clone(seed=3).seed == 3 and p.seed is None  # actorllm: fields to change
    with pytest.raises(ValueError, match="top_p"):
        p.clone(top_p=0.0)  # validated again


def test_skip_reading_prefix_cache_defaults_as_vllm() -> None:
    assert SamplingParams().skip_reading_prefix_cache is False
    assert SamplingParams(prompt_logprobs=0).skip_reading_prefix_cache is True
    assert SamplingParams(skip_reading_prefix_cache=True).skip_reading_prefix_cache is True
    with pytest.raises(ValueError, match="skip_reading_prefix_cache"):
        SamplingParams(prompt_logprobs=1, skip_reading_prefix_cache=False)
    # A clone that asks for prompt logprobs derives the default again.
    assert SamplingParams().clone(prompt_logprobs=1).skip_reading_prefix_cache is True


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("trace_decode_token_ids", [1, 2]),
        ("prompt_logprob_token_ids", [[1, 2]]),
        ("prompt_logprob_start", 0),
    ],
)
def test_unbuilt_vllm_fields_are_refused_by_name(field: str, value: Any) -> None:
    with pytest.raises(ValueError, match=f"^{field} is not supported"):
        SamplingParams(**{field: value})


def test_unbuilt_vllm_fields_accept_their_defaults() -> None:
    p = SamplingParams(
        watermarking=False,
        thinking_token_budget=-1,
        trace_decode_token_ids=None,
        prompt_logprob_token_ids=None,
        prompt_logprob_start=None,
        routed_experts_prompt_start=0,
    )
    assert p.thinking_token_budget is None
    assert SamplingParams(watermarking=None).watermarking is None


def test_routed_experts_prompt_start_is_kept() -> None:
    """Checked against the prompt's length by the input processor (vLLM's)."""
    assert SamplingParams(routed_experts_prompt_start=3).routed_experts_prompt_start == 3


@pytest.mark.parametrize("value", [-2, 1.5, True, "3"])
def test_thinking_token_budget_is_a_non_negative_int_or_minus_one(value: Any) -> None:
    with pytest.raises(ValueError, match=r"^`thinking_token_budget` must be a non-negative"):
        SamplingParams(thinking_token_budget=value)
    assert SamplingParams(thinking_token_budget=0).thinking_token_budget == 0
    assert SamplingParams(thinking_token_budget=-1).thinking_token_budget is None


def test_logprob_token_ids_are_validated_as_vllm() -> None:
    p = SamplingParams(logprob_token_ids=[3, 5])
    assert p.num_logprobs == 2 and SamplingParams(logprobs=4).num_logprobs == 4
    assert SamplingParams().num_logprobs is None
    assert SamplingParams(logprobs=2, logprob_token_ids=[3, 5]).num_logprobs == 2
    with pytest.raises(ValueError, match="logprobs must equal len"):
        SamplingParams(logprobs=1, logprob_token_ids=[3, 5])
    with pytest.raises(ValueError, match="greater than max allowed: 128"):
        SamplingParams(logprob_token_ids=list(range(129)))
    with pytest.raises(ValueError, match=r"^logprob_token_ids contains out-of-vocab .*\[9\]"):
        SamplingParams(logprob_token_ids=[1, 9]).verify_vocab(8)


def test_seed_minus_one_means_unseeded() -> None:
    # vLLM's SamplingParams: seed == -1 is None (a fresh random stream per request).
    assert SamplingParams(seed=-1).seed is None
    assert SamplingParams(seed=0).seed == 0


def test_verify_logprobs_resolves_minus_one_and_checks_the_limit() -> None:
    p = SamplingParams(logprobs=-1, prompt_logprobs=-1).verify_logprobs(-1, 100)
    assert (p.logprobs, p.prompt_logprobs) == (100, 100)
    assert SamplingParams(logprobs=5).verify_logprobs(20, 100).logprobs == 5
    with pytest.raises(SamplingParamsError, match=r"^Requested sample logprobs of 21, which"):
        SamplingParams(logprobs=21).verify_logprobs(20, 100)
    with pytest.raises(SamplingParamsError, match=r"prompt logprobs of 100, .* allowed: 20$"):
        SamplingParams(prompt_logprobs=-1).verify_logprobs(20, 100)
    with pytest.raises(SamplingParamsError, match="logprobs must be non-negative or -1"):
        SamplingParams(logprobs=-2)
