"""VLLM_CPU_KVCACHE_SPACE / ACTORLLM_CPU_KVCACHE_SPACE: the CPU KV cache's size in whole
GiB from the environment, under an explicit kv_cache_memory_bytes."""

from __future__ import annotations

import pytest

from actorllm.engine.config.engine_config import EngineConfig, EngineConfigError
from actorllm.engine.config.kv_cache_space import kv_cache_space_bytes

GiB = 2**30


def test_whole_gib_and_which_spelling_wins() -> None:
    assert kv_cache_space_bytes({}) is None
    assert kv_cache_space_bytes({"VLLM_CPU_KVCACHE_SPACE": "4"}) == 4 * GiB
    assert kv_cache_space_bytes({"ACTORLLM_CPU_KVCACHE_SPACE": " 2 "}) == 2 * GiB
    both = {"VLLM_CPU_KVCACHE_SPACE": "4", "ACTORLLM_CPU_KVCACHE_SPACE": "2"}
    assert kv_cache_space_bytes(both) == 2 * GiB
    # Empty or 0: the engine sizes the cache itself.
    assert kv_cache_space_bytes({"VLLM_CPU_KVCACHE_SPACE": ""}) is None
    assert kv_cache_space_bytes({"VLLM_CPU_KVCACHE_SPACE": "0"}) is None


@pytest.mark.parametrize("name", ["VLLM_CPU_KVCACHE_SPACE", "ACTORLLM_CPU_KVCACHE_SPACE"])
@pytest.mark.parametrize("value", ["1.5", "4GiB", "-1", "lots"])
def test_a_bad_value_is_an_error_naming_the_variable(name: str, value: str) -> None:
    with pytest.raises(EngineConfigError, match=rf"^{name}: must be a whole number of GiB") as e:
        kv_cache_space_bytes({name: value})
    assert e.value.param == name and repr(value) in str(e.value)


def test_the_config_takes_an_explicit_size_over_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "3")
    monkeypatch.delenv("ACTORLLM_CPU_KVCACHE_SPACE", raising=False)
    assert EngineConfig(device="cpu").resolved_kv_cache_memory_bytes() == 3 * GiB
    explicit = EngineConfig(device="cpu", kv_cache_memory_bytes=2**28)
    assert explicit.resolved_kv_cache_memory_bytes() == 2**28
    # 0 given is no size given, as the variable's 0; a negative size is refused.
    assert EngineConfig(device="cpu", kv_cache_memory_bytes=0).resolved_kv_cache_memory_bytes() == (
        3 * GiB
    )
    with pytest.raises(EngineConfigError, match="kv_cache_memory_bytes: must be non-negative"):
        EngineConfig(kv_cache_memory_bytes=-1)
    # vLLM reads it on its CPU platform only: CUDA profiles its memory.
    assert EngineConfig(device="cuda").resolved_kv_cache_memory_bytes() is None
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE")
    assert EngineConfig(device="cpu").resolved_kv_cache_memory_bytes() is None
