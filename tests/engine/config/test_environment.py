"""vLLM environment variables this engine does not build are refused when it opens."""

from __future__ import annotations

import pytest

from actorllm.engine import AsyncEngine
from actorllm.engine.config.environment import check_environment
from actorllm.engine.config.errors import EngineConfigError


def test_batch_invariance_asked_for_is_refused_by_name() -> None:
    check_environment({})
    check_environment({"VLLM_BATCH_INVARIANT": "0"})
    with pytest.raises(EngineConfigError, match="VLLM_BATCH_INVARIANT: batch-invariant mode"):
        check_environment({"VLLM_BATCH_INVARIANT": "1"})
    with pytest.raises(EngineConfigError, match="VLLM_BATCH_INVARIANT: must be 0 or 1"):
        check_environment({"VLLM_BATCH_INVARIANT": "yes"})


@pytest.mark.anyio
async def test_an_engine_does_not_open_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_BATCH_INVARIANT", "1")
    with pytest.raises(EngineConfigError, match="VLLM_BATCH_INVARIANT"):
        async with AsyncEngine.open(max_model_len=64):
            pass
