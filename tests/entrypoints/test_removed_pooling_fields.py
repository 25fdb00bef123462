"""vLLM's refusal of the pooling fields it removed: ``normalize`` (any value) and the old
tasks ``score`` / ``encode`` are a 400 naming the field on /v1/embeddings, /pooling and
/classify, not an unknown field dropped with a warning (which returned normalized vectors
for ``"normalize": false``). Scoring requests do not carry the check (vLLM's neither)."""

from __future__ import annotations

import json

import pytest

from actorllm.entrypoints.openai.errors import APIError
from actorllm.entrypoints.openai.fields import decode_request
from actorllm.entrypoints.openai.protocol import pooling as pp

INPUT_KINDS = [pp.EmbeddingRequest, pp.PoolingRequest, pp.ClassificationRequest]


def _refusal(kind: type, body: dict) -> APIError:
    with pytest.raises(APIError) as info:
        decode_request(json.dumps(body).encode(), kind)
    return info.value


@pytest.mark.parametrize("kind", INPUT_KINDS)
@pytest.mark.parametrize("value", [True, False, None])
def test_normalize_is_refused_by_name(kind: type, value: bool | None) -> None:
    err = _refusal(kind, {"input": "hi", "normalize": value})
    assert err.status == 400 and err.param == "normalize"
    assert "use `use_activation` instead" in str(err)


@pytest.mark.parametrize(("task", "hint"), [("encode", "token_embed"), ("score", "classify")])
def test_removed_tasks_name_their_replacement(task: str, hint: str) -> None:
    err = _refusal(pp.PoolingRequest, {"input": "hi", "task": task})
    assert err.status == 400 and err.param == "task"
    assert f"`{task}` task was removed" in str(err) and hint in str(err)


def test_other_requests_are_unaffected() -> None:
    req = decode_request(b'{"input": "hi", "use_activation": false}', pp.EmbeddingRequest)
    assert req.use_activation is False
    score = decode_request(b'{"text_1": "a", "text_2": "b", "normalize": 1}', pp.ScoreRequest)
    assert score.text_1 == "a"  # an unknown field there, as in vLLM
