"""SamplingParams takes vLLM's fields: honoured (truncate_prompt_tokens) or refused by name
when asking for what this engine cannot do (best_of != n, logits processors)."""

from __future__ import annotations

import pytest

from actorllm.core.sampling_params import SamplingParams


def test_offline_sampling_params_take_vllms_fields() -> None:
    p = SamplingParams(n=2, best_of=2, truncate_prompt_tokens=3)
    assert p.truncate_prompt([1, 2, 3, 4, 5], max_model_len=64) == [3, 4, 5]
    assert SamplingParams(truncate_prompt_tokens=-1).truncate_prompt(list(range(9)), 4) == [6, 7, 8]
    for bad in ({"best_of": 3}, {"truncate_prompt_tokens": 0}, {"logits_processors": [print]}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            SamplingParams(**bad)
