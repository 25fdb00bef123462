"""``GET /server_info`` (dev mode): the payload of vLLM's route, with its three keys.

* ``vllm_config``: the engine's configuration, ``str(EngineConfig)`` (``config_format=text``,
  the default) or its fields as JSON (``config_format=json``), plus a ``parallel_config``
  object with vLLM's names for the parallel sizes (tensor, pipeline, data, world size);
* ``vllm_env``: the ``VLLM_*`` and ``ACTORLLM_*`` environment variables set (names with
  ``KEY`` in them left out, as vLLM does);
* ``system_env``: versions (actorllm, Python, torch, transformers), platform, CPU count and
  CUDA, under vLLM's ``collect_env`` names where they exist.
"""

from __future__ import annotations

import functools
import os
import platform
import sys
from typing import Any, Literal

import msgspec

from actorllm.engine.config.engine_config import EngineConfig


def server_info_payload(config: EngineConfig, config_format: Literal["text", "json"]) -> dict:
    """The route's body (blocks: reads package versions on the first call)."""
    return {
        "vllm_config": str(config) if config_format == "text" else config_json(config),
        "vllm_env": env_vars(),
        "system_env": system_env(),
    }


def config_json(config: EngineConfig) -> dict[str, Any]:
    fields: dict[str, Any] = msgspec.to_builtins(config, enc_hook=str)
    tp, pp, dp = (
        config.tensor_parallel_size,
        config.pipeline_parallel_size,
        config.data_parallel_size,
    )
    fields["parallel_config"] = {
        "tensor_parallel_size": tp,
        "pipeline_parallel_size": pp,
        "data_parallel_size": dp,
        "world_size": tp * pp,
        "world_size_across_dp": tp * pp * dp,
        "distributed_executor_backend": config.distributed_executor_backend or "mp",
        "worker_extension_cls": config.worker_extension_cls,
    }
    return fields


def env_vars() -> dict[str, str]:
    return {
        k: v
        for k, v in sorted(os.environ.items())
        if k.startswith(("VLLM_", "ACTORLLM_")) and "KEY" not in k
    }


@functools.cache
def system_env() -> dict[str, Any]:
    import torch
    import transformers

    from actorllm import __version__

    cuda = torch.cuda.is_available()
    return {
        "actorllm_version": __version__,
        "torch_version": str(torch.__version__),
        "transformers_version": str(transformers.__version__),
        "python_version": sys.version.split()[0],
        "python_platform": platform.platform(),
        "os": platform.system(),
        "cpu_count": os.cpu_count(),
        "is_cuda_available": cuda,
        "cuda_runtime_version": torch.version.cuda,
        "gpu_models": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        if cuda
        else [],
    }
