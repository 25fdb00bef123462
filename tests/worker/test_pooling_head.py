"""Per-token pooling tasks on the runner side: token_classify's head on every row, and a
prompt's earlier chunks kept whole for them."""

from __future__ import annotations

import numpy as np
import torch

from actorllm.core.pooling_params import PoolingParams
from actorllm.models.pooler_spec import PoolerSpec
from actorllm.worker.pooling_head import PoolingHead


def _head() -> PoolingHead:
    weight = torch.tensor([[1.0, 0.0], [0.0, 1.0]])  # [L=2, H=2]: the logits are the rows

    def classify(rows: torch.Tensor) -> torch.Tensor:
        return rows @ weight.t()

    return PoolingHead(PoolerSpec(pooling_type="LAST", normalize=False), classify, classify)


def _values(head: PoolingHead, hidden: torch.Tensor, task: str) -> np.ndarray:
    p = PoolingParams(task=task)  # type: ignore[arg-type]
    out = head.pool(hidden, ["r"], [0], [hidden.shape[0]], [p])["r"]
    return np.frombuffer(out.data, "<f4").reshape(out.shape)


def test_token_classify_is_each_rows_label_probabilities() -> None:
    hidden = torch.tensor([[2.0, 0.0], [0.0, 3.0], [1.0, 1.0]])  # [n=3, H=2]
    got = _values(_head(), hidden, "token_classify")
    assert got.shape == (3, 2)
    np.testing.assert_allclose(got, hidden.softmax(-1).numpy(), rtol=1e-6)
    last = _values(_head(), hidden, "classify")  # the sequence task: the last row only
    np.testing.assert_allclose(last, hidden[-1].softmax(-1).numpy(), rtol=1e-6)


def test_a_chunked_prompt_keeps_every_row_for_a_token_task() -> None:
    head = _head()
    first, rest = torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([[5.0, 5.0]])
    head.add_chunk("r", first, "token_classify")
    got = _values(head, rest, "token_classify")
    assert got.shape == (3, 2)  # the earlier chunk's two rows and the last one
    assert head.partial == {}


def test_step_pooling_keeps_the_step_rows_and_the_chosen_columns() -> None:
    """vLLM's StepPool on a reward head's logits: the rows at the step tag, the
    returned_token_ids columns (in their order), then the activation by shape."""
    spec = PoolerSpec(pooling_type="LAST", normalize=False, classify_activation="by_shape")
    head = PoolingHead(spec, None, token_classifier=lambda rows: rows)  # logits = rows
    logits = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])  # [n=3, L=3]
    ids = [11, 99, 99]

    def pooled(p: PoolingParams) -> np.ndarray:
        out = head.pool(logits, ["r"], [0], [3], [p], [ids])["r"]
        return np.frombuffer(out.data, "<f4").reshape(out.shape)

    got = pooled(PoolingParams(task="token_classify", step_tag_id=99, returned_token_ids=[2, 0]))
    np.testing.assert_allclose(got, logits[1:][:, [2, 0]].softmax(-1).numpy(), rtol=1e-6)
    one = pooled(PoolingParams(task="token_classify", step_tag_id=11, returned_token_ids=[1]))
    np.testing.assert_allclose(one, logits[:1, [1]].sigmoid().numpy(), rtol=1e-6)
    none = pooled(PoolingParams(task="token_classify", step_tag_id=5))
    assert none.shape == (0, 3)
