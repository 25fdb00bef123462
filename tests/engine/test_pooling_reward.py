"""vLLM's reward models (``Qwen2ForRewardModel``, ``Qwen2ForProcessRewardModel``): a tiny
random Qwen2 decoder with the two-layer ``score`` head, served as it is (runner pooling,
task token_classify), against transformers' ``Qwen2Model`` and the head in plain torch;
STEP pooling's rows and columns; the step parameters refused on a model without it."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
import torch

from actorllm.core.pooling_params import PoolingParams
from actorllm.engine import AsyncEngine, InvalidRequestError
from tests.helpers.reward_models import reference_logits, reward_checkpoint

pytestmark = pytest.mark.anyio

STEP_TAG = 7
# Prompts with step tags (7) at known places; the second is cut in chunks by the budget.
PROMPTS = [[5, 9, STEP_TAG, 12, 30, STEP_TAG], [11 + j % 50 for j in range(37)] + [STEP_TAG]]


@pytest.fixture(scope="module")
def orm(tmp_path_factory: pytest.TempPathFactory) -> str:
    return reward_checkpoint(tmp_path_factory.mktemp("qwen2-rm"), "Qwen2ForRewardModel", 1)


@pytest.fixture(scope="module")
def prm(tmp_path_factory: pytest.TempPathFactory) -> str:
    return reward_checkpoint(tmp_path_factory.mktemp("qwen2-prm"), "Qwen2ForProcessRewardModel", 2)


async def _encode(engine: AsyncEngine, params: PoolingParams) -> list[torch.Tensor]:
    out: dict[int, torch.Tensor] = {}

    async def one(i: int) -> None:
        async for r in engine.encode({"prompt_token_ids": PROMPTS[i]}, params):
            out[i] = r.outputs.data

    async with anyio.create_task_group() as tg:
        for i in range(len(PROMPTS)):
            tg.start_soon(one, i)
    return [out[i] for i in range(len(PROMPTS))]


async def test_reward_model_rewards_every_token(orm: str) -> None:
    """vLLM's Qwen2ForRewardModel: token_classify only, ALL pooling, raw rewards by
    default (its use_activation defaults to False), sigmoid when asked."""
    async with AsyncEngine.open(orm, dtype="float32", max_num_batched_tokens=16) as engine:
        pm = engine.pooling_model
        assert (
            pm is not None
            and pm.tasks == ("token_classify",)
            and pm.default_task == "token_classify"
        )
        assert pm.spec.tok_pooling_type == "ALL" and pm.num_labels == 1
        raw = await _encode(engine, PoolingParams())
        act = await _encode(engine, PoolingParams(task="token_classify", use_activation=True))
    for ids, got, got_act in zip(PROMPTS, raw, act, strict=True):
        want = reference_logits(orm, ids)
        assert got.shape == (len(ids), 1)
        assert torch.allclose(got, want, atol=1e-4), (got - want).abs().max()
        assert torch.allclose(got_act, want.sigmoid(), atol=1e-4)


async def test_process_reward_model_pools_the_step_tags(prm: str) -> None:
    """vLLM's Qwen2ForProcessRewardModel: STEP pooling, the softmax of both labels at each
    step tag; returned_token_ids keeps only those columns (one column: sigmoid)."""
    async with AsyncEngine.open(
        prm, dtype="float32", max_num_batched_tokens=16, pooler_config={"step_tag_id": STEP_TAG}
    ) as engine:  # fmt: skip
        pm = engine.pooling_model
        assert pm is not None and pm.spec.tok_pooling_type == "STEP" and pm.num_labels == 2
        probs = await _encode(engine, PoolingParams())
        swapped = await _encode(engine, PoolingParams(returned_token_ids=[1, 0]))
        one = await _encode(engine, PoolingParams(returned_token_ids=[1], use_activation=False))
    for ids, got, got_swapped, got_one in zip(PROMPTS, probs, swapped, one, strict=True):
        steps = [i for i, t in enumerate(ids) if t == STEP_TAG]
        want = reference_logits(prm, ids)[steps]  # [steps, 2]
        assert got.shape == (len(steps), 2)
        assert torch.allclose(got, want.softmax(-1), atol=1e-4), (got, want)
        assert torch.allclose(got_swapped, want[:, [1, 0]].softmax(-1), atol=1e-4)
        assert torch.allclose(got_one, want[:, [1]], atol=1e-4)


async def test_process_reward_model_defaults(prm: str) -> None:
    """Without --pooler-config the step tag is vLLM's (151651, not in this vocabulary: no
    rows); a request's own step_tag_id wins over it."""
    async with AsyncEngine.open(prm, dtype="float32") as engine:
        assert engine.pooling_model is not None
        assert engine.pooling_model.spec.step_tag_id == 151651
        none = await _encode(engine, PoolingParams())
        tagged = await _encode(engine, PoolingParams(step_tag_id=STEP_TAG))
    assert [t.shape for t in none] == [(0, 2), (0, 2)]
    assert [t.shape[0] for t in tagged] == [2, 1]


async def test_step_parameters_are_refused_without_step_pooling(orm: str) -> None:
    """vLLM's _verify_step_pooling, in its words, naming the parameter."""
    async with AsyncEngine.open(orm, dtype="float32") as engine:
        for params, name in [
            (PoolingParams(step_tag_id=STEP_TAG), "step_tag_id"),
            (PoolingParams(returned_token_ids=[0]), "returned_token_ids"),
        ]:
            with pytest.raises(InvalidRequestError) as info:
                async for _ in engine.encode("hi", params):
                    pass
            assert info.value.param == name
            assert str(info.value) == (
                f"Task token_classify only supports ['use_activation'] parameters, does not "
                f"support ['{name}'] parameters"
            )


async def test_returned_token_ids_must_index_the_logits(prm: str) -> None:
    async with AsyncEngine.open(prm, dtype="float32") as engine:
        with pytest.raises(InvalidRequestError) as info:
            async for _ in engine.encode("hi", PoolingParams(returned_token_ids=[2])):
                pass
        assert info.value.param == "returned_token_ids"


def test_config_refusals(orm: str, tmp_path: Path) -> None:
    """What the server refuses at start, by name: generation, a convert, STEP settings
    without STEP pooling, and InternLM2's reward model (its decoder is remote code)."""
    from actorllm.engine.config import EngineConfig, EngineConfigError

    cases = [
        (dict(runner="generate"), "runner"),
        (dict(convert="embed"), "runner"),
        (dict(pooler_config={"returned_token_ids": [0]}), "pooler_config"),
        (dict(pooler_config={"pooling_type": "STEP", "tok_pooling_type": "ALL"}), "pooler_config"),
    ]
    for kwargs, field in cases:
        with pytest.raises(EngineConfigError) as info:
            EngineConfig(model=orm, **kwargs).pooling_model()  # type: ignore[arg-type]
        assert info.value.param == field, kwargs
    internlm = tmp_path / "internlm"
    internlm.mkdir()
    (internlm / "config.json").write_text(
        json.dumps({"architectures": ["InternLM2ForRewardModel"]})
    )
    with pytest.raises(EngineConfigError, match="InternLM2ForRewardModel"):
        EngineConfig(model=str(internlm)).pooling_model()
