"""vLLM's offline API on a reward model: ``LLM.encode(..., pooling_task="token_classify")``
(vLLM 0.32 has no ``LLM.reward``), with ``PoolingParams``' STEP fields on a process reward
model and refused, as a clear exception naming them, on an outcome reward model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from actorllm import LLM, PoolingParams
from actorllm.core.errors import InvalidRequestError
from actorllm.outputs import PoolingRequestOutput
from tests.helpers.reward_models import reference_logits, reward_checkpoint

STEP_TAG = 7
PROMPT = [5, 9, STEP_TAG, 12, 30, STEP_TAG, 40]


def test_reward_model_encode(tmp_path: Path) -> None:
    path = reward_checkpoint(tmp_path, "Qwen2ForRewardModel", 1)
    want = reference_logits(path, PROMPT)  # [n, 1]
    with LLM(path, dtype="float32") as llm:
        outs = llm.encode(
            [{"prompt_token_ids": PROMPT}], pooling_task="token_classify", use_tqdm=False
        )
        assert isinstance(outs[0], PoolingRequestOutput)
        assert torch.allclose(outs[0].outputs.data, want, atol=1e-4)
        on = llm.encode(
            [{"prompt_token_ids": PROMPT}],
            pooling_params=PoolingParams(use_activation=True),
            pooling_task="token_classify",
            use_tqdm=False,
        )
        assert torch.allclose(on[0].outputs.data, want.sigmoid(), atol=1e-4)
        with pytest.raises(InvalidRequestError, match=r"does not support \['step_tag_id'\]"):
            llm.encode(
                [{"prompt_token_ids": PROMPT}],
                pooling_params=PoolingParams(step_tag_id=STEP_TAG),
                pooling_task="token_classify",
            )


def test_process_reward_model_encode(tmp_path: Path) -> None:
    path = reward_checkpoint(tmp_path, "Qwen2ForProcessRewardModel", 2)
    want = reference_logits(path, PROMPT)[[2, 5]]  # the step tags' rows [2, 2]
    with LLM(path, dtype="float32", pooler_config={"step_tag_id": STEP_TAG}) as llm:
        outs = llm.encode(
            [{"prompt_token_ids": PROMPT}], pooling_task="token_classify", use_tqdm=False
        )
        assert torch.allclose(outs[0].outputs.data, want.softmax(-1), atol=1e-4)
        good = llm.encode(
            [{"prompt_token_ids": PROMPT}],
            pooling_params=PoolingParams(returned_token_ids=[1]),
            pooling_task="token_classify",
            use_tqdm=False,
        )
        assert torch.allclose(good[0].outputs.data, want[:, [1]].sigmoid(), atol=1e-4)
