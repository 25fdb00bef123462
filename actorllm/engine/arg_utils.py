"""vLLM's import path (``vllm.engine.arg_utils``); the code is in
:mod:`actorllm.compat.vllm.engine_args`."""

from actorllm.compat.vllm.engine_args import AsyncEngineArgs as AsyncEngineArgs
from actorllm.compat.vllm.engine_args import EngineArgs as EngineArgs

__all__ = ["AsyncEngineArgs", "EngineArgs"]
