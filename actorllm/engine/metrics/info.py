"""vLLM's info gauges: series whose labels carry the information and whose value is fixed
(``cache_config_info``: 1) or a time (``lora_requests_info``: the snapshot's).

    >>> from actorllm.engine.config.engine_config import EngineConfig
    >>> family = cache_config_info("vllm:", EngineConfig(block_size=16), 1000, [("0", None)])
    >>> family.samples[0].labels["kv_cache_max_concurrency"], family.samples[0].value
    ('0.0', 1.0)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from prometheus_client.core import GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from actorllm.engine.config.engine_config import EngineConfig

# EngineConfig fields shown as cache_config_info labels (vLLM's CacheConfig names).
_CACHE_CONFIG = (
    "block_size",
    "enable_prefix_caching",
    "gpu_memory_utilization",
    "num_gpu_blocks_override",
    "kv_cache_memory_bytes",
)


def kv_capacity(num_blocks: int, block_size: int, max_model_len: int | None) -> tuple[int, float]:
    """vLLM's KV-cache capacity (``get_kv_cache_capacity``): how many requests of
    ``max_model_len`` tokens the blocks hold at once (each takes whole blocks), and that
    many requests' tokens; (0, 0.0) while the context length is unknown.

    >>> kv_capacity(100, 16, 1000)  # 63 blocks a request
    (1587, 1.5873015873015872)
    """
    if not max_model_len or block_size <= 0:
        return 0, 0.0
    concurrency = num_blocks / -(-max_model_len // block_size)
    return int(concurrency * max_model_len), concurrency


def cache_config_info(
    prefix: str, config: EngineConfig, max_model_len: int | None, engines: list[tuple[str, Any]]
) -> Metric:
    """One series per engine (replica): the cache config, the engine's KV blocks and vLLM's
    capacity labels (``kv_cache_size_tokens``, ``kv_cache_max_concurrency``)."""
    info = {k: str(getattr(config, k)) for k in _CACHE_CONFIG}
    block_size = config.resolved_block_size()
    info["block_size"] = str(block_size)  # the one in use
    info["cache_dtype"] = config.kv_cache_dtype  # vLLM's label name
    info.update(num_gpu_blocks="0", engine="0", kv_cache_size_tokens="0",
                kv_cache_max_concurrency="0")  # fmt: skip
    family = GaugeMetricFamily(
        prefix + "cache_config_info", "Information of the engine's cache config.",
        labels=list(info),
    )  # fmt: skip
    for engine, figures in engines:
        blocks = int(getattr(figures, "num_gpu_blocks", 0))
        tokens, concurrency = kv_capacity(blocks, block_size, max_model_len)
        info.update(num_gpu_blocks=str(blocks), engine=engine, kv_cache_size_tokens=str(tokens),
                    kv_cache_max_concurrency=str(concurrency))  # fmt: skip
        family.add_metric(list(info.values()), 1.0)
    return family


def lora_requests_info(prefix: str, max_loras: int, stats: Any, when: float) -> Metric:
    """vLLM's ``lora_requests_info``: one series whose labels name the adapters with
    running and waiting requests (comma-joined) and ``max_lora``; its value ``when``, the
    time of the snapshot (vLLM's ``set_to_current_time``)."""
    family = GaugeMetricFamily(
        prefix + "lora_requests_info", "Running stats on lora requests.",
        labels=["max_lora", "waiting_lora_adapters", "running_lora_adapters"],
    )  # fmt: skip
    running = getattr(stats, "running_lora_adapters", None) or {}
    waiting = getattr(stats, "waiting_lora_adapters", None) or {}
    family.add_metric([str(max_loras), ",".join(waiting), ",".join(running)], when)
    return family
