"""--pooler-config's token pooling keys, read as vLLM 0.32's PoolerConfig reads them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from actorllm.models.pooler_spec import (
    REWARD_MODELS,
    PoolerConfigError,
    PoolerSpec,
    apply_overrides,
    causal_architecture,
    reward_pooler_spec,
)

BASE = PoolerSpec(pooling_type="LAST", normalize=False)


def test_pooling_type_fills_the_sequence_or_token_type_by_its_value() -> None:
    assert apply_overrides(BASE, {"pooling_type": "MEAN"}).pooling_type == "MEAN"
    step = apply_overrides(BASE, {"pooling_type": "STEP", "step_tag_id": 3})
    assert (step.pooling_type, step.tok_pooling_type, step.step_tag_id) == ("LAST", "STEP", 3)
    assert apply_overrides(BASE, {"tok_pooling_type": "ALL"}).tok_pooling_type == "ALL"


@pytest.mark.parametrize(
    ("overrides", "key", "words"),
    [
        ({"pooling_type": "MEAN", "seq_pooling_type": "CLS"}, "pooling_type",
         "Cannot set both `pooling_type` and `seq_pooling_type`"),
        ({"pooling_type": "STEP", "tok_pooling_type": "ALL"}, "pooling_type",
         "Cannot set both `pooling_type` and `tok_pooling_type`"),
        ({"tok_pooling_type": "MEAN"}, "tok_pooling_type", "not supported"),
        ({"pooling_type": "SUM"}, "pooling_type", "not supported"),
        ({"step_tag_id": "7"}, "step_tag_id", "integer"),
        ({"returned_token_ids": [1, "2"]}, "returned_token_ids", "list of integers"),
    ],
)  # fmt: skip
def test_bad_token_pooling_keys_are_refused_by_name(
    overrides: dict[str, Any], key: str, words: str
) -> None:
    with pytest.raises(PoolerConfigError, match=words) as info:
        apply_overrides(BASE, overrides)
    assert info.value.key == key


def test_reward_defaults_are_vllms(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({}))
    orm = reward_pooler_spec(tmp_path, REWARD_MODELS["Qwen2ForRewardModel"], None)
    assert (orm.tok_pooling_type, orm.default_use_activation, orm.step_tag_id) == (
        "ALL", False, None
    )  # fmt: skip
    prm = reward_pooler_spec(tmp_path, REWARD_MODELS["Qwen2ForProcessRewardModel"], None)
    assert (prm.tok_pooling_type, prm.default_use_activation, prm.step_tag_id) == (
        "STEP", True, 151651
    )  # fmt: skip
    assert prm.classify_activation == "by_shape"
    mine = reward_pooler_spec(
        tmp_path, REWARD_MODELS["Qwen2ForRewardModel"], {"use_activation": True}
    )
    assert mine.default_use_activation is True
    (tmp_path / "config.json").write_text(json.dumps({"problem_type": "regression"}))
    assert (
        reward_pooler_spec(tmp_path, REWARD_MODELS["Qwen2ForRewardModel"], None).classify_activation
        == "identity"
    )
    assert causal_architecture("Qwen2ForProcessRewardModel") == "Qwen2ForCausalLM"
