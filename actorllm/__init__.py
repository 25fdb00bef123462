"""actorllm: an LLM inference and serving engine on a structured-concurrency actor system.

The names a vLLM script imports live here, as in vLLM::

    from actorllm import LLM, SamplingParams

    llm = LLM()  # the demo model; or LLM("/path/to/model", max_model_len=512)
    print(llm.generate("Hello", SamplingParams(max_tokens=8))[0].outputs[0].text)

They are loaded on first use (PEP 562), so ``import actorllm`` stays cheap: it imports
neither torch nor the engine's actors until one of these names is touched.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__version_tuple__ = (0, 1, 0)  # vLLM's companion of __version__; the same version

# {public name: module that defines it}
_LAZY = {
    "LLM": "actorllm.compat.vllm.llm",
    "LLMEngine": "actorllm.compat.vllm.llm_engine",
    "AsyncEngine": "actorllm.engine.api.async_engine",
    "AsyncLLMEngine": "actorllm.compat.vllm.async_llm",
    "EngineArgs": "actorllm.compat.vllm.engine_args",
    "AsyncEngineArgs": "actorllm.compat.vllm.engine_args",
    "TextPrompt": "actorllm.compat.vllm.offline_prompts",
    "PromptType": "actorllm.inputs",
    "TokensPrompt": "actorllm.compat.vllm.offline_prompts",
    "EngineConfig": "actorllm.engine.config.engine_config",
    "SamplingParams": "actorllm.core.sampling_params",
    "RequestOutputKind": "actorllm.core.sampling_params",
    "RequestOutput": "actorllm.core.outputs",
    "CompletionOutput": "actorllm.core.outputs",
    "PoolingParams": "actorllm.core.pooling_params",
    "PoolingRequestOutput": "actorllm.engine.api.pooling_outputs",
    "EmbeddingRequestOutput": "actorllm.engine.api.pooling_outputs",
    "ClassificationRequestOutput": "actorllm.engine.api.pooling_outputs",
    "ScoringRequestOutput": "actorllm.engine.api.pooling_outputs",
    "PoolingOutput": "actorllm.engine.api.pooling_outputs",
    "EmbeddingOutput": "actorllm.engine.api.pooling_outputs",
    "ClassificationOutput": "actorllm.engine.api.pooling_outputs",
    "ScoringOutput": "actorllm.engine.api.pooling_outputs",
    "LoRARequest": "actorllm.core.lora",
    "ModelRegistry": "actorllm.compat.vllm.model_registry",
    "initialize_ray_cluster": "actorllm.compat.vllm.refused_names",  # refused when called
}

__all__ = [*_LAZY, "__version__", "__version_tuple__"]

if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ loads them
    from actorllm.compat.vllm.async_llm import AsyncLLMEngine as AsyncLLMEngine
    from actorllm.compat.vllm.engine_args import AsyncEngineArgs as AsyncEngineArgs
    from actorllm.compat.vllm.engine_args import EngineArgs as EngineArgs
    from actorllm.compat.vllm.llm import LLM as LLM
    from actorllm.compat.vllm.llm_engine import LLMEngine as LLMEngine
    from actorllm.compat.vllm.model_registry import ModelRegistry as ModelRegistry
    from actorllm.compat.vllm.offline_prompts import TextPrompt as TextPrompt
    from actorllm.compat.vllm.offline_prompts import TokensPrompt as TokensPrompt
    from actorllm.compat.vllm.refused_names import (
        initialize_ray_cluster as initialize_ray_cluster,
    )
    from actorllm.core.lora import LoRARequest as LoRARequest
    from actorllm.core.outputs import CompletionOutput as CompletionOutput
    from actorllm.core.outputs import RequestOutput as RequestOutput
    from actorllm.core.pooling_params import PoolingParams as PoolingParams
    from actorllm.core.sampling_params import RequestOutputKind as RequestOutputKind
    from actorllm.core.sampling_params import SamplingParams as SamplingParams
    from actorllm.engine.api.async_engine import AsyncEngine as AsyncEngine
    from actorllm.engine.api.pooling_outputs import (
        ClassificationOutput as ClassificationOutput,
    )
    from actorllm.engine.api.pooling_outputs import (
        ClassificationRequestOutput as ClassificationRequestOutput,
    )
    from actorllm.engine.api.pooling_outputs import EmbeddingOutput as EmbeddingOutput
    from actorllm.engine.api.pooling_outputs import (
        EmbeddingRequestOutput as EmbeddingRequestOutput,
    )
    from actorllm.engine.api.pooling_outputs import PoolingOutput as PoolingOutput
    from actorllm.engine.api.pooling_outputs import PoolingRequestOutput as PoolingRequestOutput
    from actorllm.engine.api.pooling_outputs import ScoringOutput as ScoringOutput
    from actorllm.engine.api.pooling_outputs import ScoringRequestOutput as ScoringRequestOutput
    from actorllm.engine.config.engine_config import EngineConfig as EngineConfig
    from actorllm.inputs import PromptType as PromptType


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'actorllm' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
